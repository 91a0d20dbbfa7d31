"""ONNX Runtime against PyTorch on the CPU, in one run: the same exported model, one picture and
a batch of 256, each timed --n times in alternation (so a machine's drift hits both alike).

    python -m bench.onnx_speed [--checkpoint checkpoints/mnist] [--n 50] [--threads 1]

Prints the median milliseconds of each and `ratio` (PyTorch / ONNX Runtime: above 1, ONNX
Runtime is faster). Both run on --threads CPU threads (the app runs one per request).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default="checkpoints/mnist")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import onnxruntime as ort

    from vit.checkpoint import open_checkpoint
    from vit.export import Normalised, export

    torch.set_num_threads(args.threads)
    path = export(args.checkpoint, Path(tempfile.mkdtemp()) / "model.onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = args.threads
    run = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    model = Normalised(open_checkpoint(args.checkpoint, "cpu")).eval()
    cfg = model.model.cfg
    print(f"{args.checkpoint}: {model.model.num_parameters():,} parameters, {cfg.image_size} px, "
          f"{args.threads} thread(s), n={args.n}, onnxruntime {ort.__version__}, torch "
          f"{torch.__version__}")
    for batch in (1, 256):
        x = np.random.default_rng(0).random((batch, cfg.channels, cfg.image_size, cfg.image_size),
                                            dtype=np.float32)
        xt = torch.from_numpy(x)

        def pytorch(xt=xt):
            with torch.inference_mode():
                model(xt)

        def onnx(x=x):
            run.run(None, {"pictures": x})
        for _ in range(3):
            pytorch()
            onnx()
        pt, ox = [], []
        for _ in range(args.n):
            pt.append(timed(pytorch))
            ox.append(timed(onnx))
        a, b = statistics.median(pt), statistics.median(ox)
        print(f"  batch {batch:3d}: PyTorch {a:8.2f} ms, ONNX Runtime {b:8.2f} ms, ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
