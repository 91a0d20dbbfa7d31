"""Measure which explanation map to lead with for a checkpoint: `python -m vit.fit_faithfulness
CHECKPOINT --data-dir DIR [--n 300]`. The deletion test of rollout, relevance and occlusion on
the checkpoint's validation split (never the test set), written to config.json's
`faithfulness`; the page then leads with the map found most faithful (vit/explain/faithful.py).
"""
from __future__ import annotations

import argparse
import sys

from vit.calibration_cli import command_line, run_in_one_line


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m vit.fit_faithfulness",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a checkpoint folder")
    p.add_argument("--data-dir", default="data", help="where its data set is (default: data)")
    p.add_argument("--n", type=int, default=300, help="validation images measured (default: 300)")
    p.add_argument("--device", default="cpu",
                   help="where the maps are computed: cpu, auto (a GPU where there is one), cuda, "
                        "mps (default: cpu)")
    args = p.parse_args(argv)
    if not 1 <= args.n <= 10_000:
        p.error("--n must be between 1 and 10000")
    from vit.training.faithfulness_fit import fit_faithfulness
    return run_in_one_line(lambda: fit_faithfulness(
        args.checkpoint, args.data_dir, args.n, command=command_line("vit.fit_faithfulness", argv),
        device=None if args.device == "auto" else args.device))


if __name__ == "__main__":
    sys.exit(main())
