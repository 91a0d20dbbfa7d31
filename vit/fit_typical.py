"""Teach a checkpoint to say "not one of these" for pictures unlike anything it was trained on
(noise, a flat colour, text, a drawing shown to a photo model): `python -m vit.fit_typical
CHECKPOINT --data-dir DIR`. See vit/explain/typical.py; fitted on training and validation
images, never the test set.
"""
from __future__ import annotations

import argparse
import sys

from vit.calibration_cli import command_line, run_in_one_line
from vit.explain.typical import FAR_SHARE


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m vit.fit_typical", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a checkpoint folder")
    p.add_argument("--data-dir", default="data", help="where its data set is (default: data)")
    p.add_argument("--share", type=float, default=FAR_SHARE,
                   help=f"of validation images answered 'not one of these' (default: {FAR_SHARE})")
    p.add_argument("--device", default="auto",
                   help="where the [CLS] tokens are computed: auto (a GPU where there is one), cpu, "
                        "cuda, mps (default: auto)")
    args = p.parse_args(argv)
    if not 0 < args.share < 0.5:
        p.error("--share must be between 0 and 0.5")
    from vit.training.typical_fit import fit_typical
    return run_in_one_line(lambda: fit_typical(
        args.checkpoint, args.data_dir, args.share, command_line("vit.fit_typical", argv),
        device=None if args.device == "auto" else args.device))


if __name__ == "__main__":
    sys.exit(main())
