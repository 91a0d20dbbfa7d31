"""Training as a library; `python -m vit.train` (vit/train.py) is its command line.

In the order a run uses them: config.py (the flags and their checks), state.py (preflight,
resumable state), session.py (model, optimiser, plan), batches.py (data and each step's batch),
seeds.py (every random stream), loop.py (steps, epochs, the run), records.py (metrics, curves,
provenance); teacher.py, distributed.py and finetune.py for distillation, torchrun and --init.
"""
