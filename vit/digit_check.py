"""Give a checkpoint of other classes (the clothing model) a digit model's second opinion:
`python -m vit.digit_check CHECKPOINT --digits mnist --digit-at-least P --own-below Q
--data-dir DIR`. A picture the checkpoint is unsure of (its best class below Q) that the digit
model, a checkpoint folder beside it, reads as a digit at P or more by all its own rules, is
then answered "not one of these" (`Predictor.checked`). Written to config.json's
`calibration.digit_check` with the command, the commit, and the share of the checkpoint's own
validation images it refuses, measured here as the app reads an upload of each.

P and Q are chosen on held-out families' tune halves (`python -m bench.heldout --photos --split
tune`); docs/reliability.md says how. `--digits ''` takes the check away.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from vit.calibration_cli import command_line, run_in_one_line
from vit.checkpoint import CONFIG, CheckpointError, open_checkpoint, parse_config, read_config
from vit.hub import CARD, model_card
from vit.storage import save_json, save_text


def set_digit_check(folder, digits: str, digit_at_least: float, own_below: float, data_dir,
                    command: str, say=print) -> dict | None:
    """Write (or, with `digits` empty, remove) the checkpoint's digit check; returns what
    config.json's calibration now records of it. Raises CheckpointError, DataError."""
    from vit.inference import Predictor
    from vit.training.records import git_commit
    from vit.training.typical_fit import own_splits
    folder = Path(folder)
    config = read_config(folder).to_dict()
    calibration = {k: v for k, v in config.get("calibration", {}).items() if k != "digit_check"}
    record = None
    if digits:
        started = time.time()
        check = {"model": digits, "digit_at_least": digit_at_least, "own_below": own_below}
        ck = open_checkpoint(folder, "cpu")
        # checked before anything is written: a name that is a path, numbers out of range
        ck.config = parse_config({**config, "calibration": {**calibration, "digit_check": check}},
                                 str(folder / CONFIG))
        p = Predictor(ck)
        if p.digit_model() is None:
            raise CheckpointError(f"{digits}: no digit model of that name beside {folder}")
        _, val = own_splits(p.config, data_dir, folder)
        refused = 0
        for i in range(len(val)):
            picture = val.picture(i)
            a = p.glance(*p.read(picture))
            refused += a.is_class and not p.checked(a.verdict, a.probs, picture)
        record = {**check, "validation_refused": round(refused / len(val), 5),
                  "command": command, "commit": git_commit()}
        calibration["digit_check"] = record
        say(f"{folder}: the digit check ({digits}) refuses {refused} of its {len(val):,} "
            f"validation images ({100 * refused / len(val):.2f} %), {time.time() - started:.0f} s")
    config["calibration"] = calibration
    save_json(folder / CONFIG, config)
    save_text(folder / CARD, model_card(config))
    open_checkpoint(folder, "cpu")                       # reads back, or raises
    return record


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m vit.digit_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a checkpoint folder of other classes than digits")
    p.add_argument("--digits", required=True,
                   help="the digit model: a checkpoint folder's name beside it ('' removes the check)")
    p.add_argument("--digit-at-least", type=float, default=0.995,
                   help="the digit model's probability from which a picture is a digit (default: 0.995)")
    p.add_argument("--own-below", type=float, default=0.9,
                   help="only where this model's best class is below this (default: 0.9)")
    p.add_argument("--data-dir", default="data", help="where its data set is (default: data)")
    args = p.parse_args(argv)
    for flag, v in (("--digit-at-least", args.digit_at_least), ("--own-below", args.own_below)):
        if not 0 < v <= 1:
            p.error(f"{flag} must be in (0, 1]")
    return run_in_one_line(lambda: set_digit_check(
        args.checkpoint, args.digits, args.digit_at_least, args.own_below, args.data_dir,
        command_line("vit.digit_check", argv)))


if __name__ == "__main__":
    sys.exit(main())
