"""Train a ViT on MNIST, Fashion-MNIST, CIFAR-10 or your own picture folders: `python -m vit.train --help`.

The command line of vit/training/: flags generated from the two config dataclasses, Ctrl-C
handling, and one-line errors. Every random draw of a step comes from a generator seeded by
(seed, stream, step), so a run stopped anywhere and resumed with --resume ends with exactly the
weights of an uninterrupted run.
"""
from __future__ import annotations

import argparse
import errno
import shlex
import signal
import sys
import time
from dataclasses import fields
from pathlib import Path

from vit.checkpoint import CheckpointError
from vit.data.loading import DataError
from vit.data.specs import FOLDER, SPECS, DatasetSpec, builtin_spec
from vit.device import pick_device
from vit.model import PRESETS, ViTConfig
from vit.storage import SaveError, StorageError, out_problem
from vit.training.config import (
    TrainConfig,
    TrainingError,
    config_problems,
    flag_text,
    folder_size_problem,
    local_processes,
    memory_problem,
)
from vit.training.distributed import from_environment
from vit.training.finetune import ARCHITECTURE, InitError, init_config
from vit.training.loop import describe_folder, train
from vit.training.state import STATE_FILE

FOLDER_IMAGE_SIZE = 32      # --dataset folder's pictures, unless --image-size or --init says
FINETUNE_LR = 1e-4          # --init's default: a tenth of training from scratch

MODEL_HELP = {"image_size": "input image side in pixels (must be the data set's)",
              "channels": "image channels (must be the data set's)",
              "patch_size": "patch side in pixels (image_size must divide by it)",
              "stem_channels": "channels of a 3x3 conv stem before patching (0 = plain ViT)",
              "dim": "token width", "depth": "transformer blocks", "heads": "attention heads",
              "mlp_dim": "hidden width of each block's MLP", "dropout": "dropout rate",
              "num_classes": "output classes (must be the data set's)"}


def _add_dataclass_args(parser: argparse.ArgumentParser, cls, title: str, helps=None) -> None:
    """One flag per dataclass field: --field-name, typed from the default, help from metadata."""
    group = parser.add_argument_group(title)
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        text = (helps or {}).get(f.name) or f.metadata.get("help", f.name.replace("_", " "))
        help_ = f"{text} (default: {f.default})"
        if isinstance(f.default, bool):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default,
                               help=help_)
        else:
            choices = f.metadata.get("choices")
            group.add_argument(flag, type=type(f.default), default=f.default, help=help_,
                               choices=choices, metavar=None if choices else f.name.upper())


def _per_dataset_defaults() -> str:
    return "; ".join(f"--dataset {s.name}: " + " ".join(flag_text(k, v) for k, v in s.train_defaults)
                     for s in SPECS.values() if s.train_defaults)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vit.train", description=__doc__.split("\n\n")[0],
        epilog="Defaults shown are MNIST's; some data sets change them unless given "
               f"({_per_dataset_defaults()}).")
    _add_dataclass_args(p, TrainConfig, "training")
    _add_dataclass_args(p, ViTConfig, "model", MODEL_HELP)
    p.add_argument("--preset", choices=list(PRESETS), default=None,
                   help="a published ViT size — ti: ViT-Ti (192 wide, 12 blocks, 3 heads), s: "
                        "ViT-S (384, 12, 6), b: ViT-B (768, 12, 12); plain patch embedding, no "
                        "stem. Flags given as well win. Image and patch size stay as set.")
    return p


def _given(argv, flag: str) -> bool:
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _with_dataset_defaults(parser: argparse.ArgumentParser, argv
                           ) -> tuple[argparse.ArgumentParser, DatasetSpec | None]:
    """The data set's own defaults (vit/data/specs.py; an image folder's, described here) for the
    flags not given; with --init, the checkpoint's architecture and image size, and a fine-tuning
    learning rate. Returns the parser and the data set's spec."""
    known, _ = parser.parse_known_args(argv)
    init = None
    if known.init:
        try:
            init = init_config(known.init)
        except InitError as e:
            parser.error(str(e))
    spec = builtin_spec(known.dataset)
    if known.dataset == FOLDER:
        size = (known.image_size if _given(argv, "--image-size")
                else init.image_size if init else FOLDER_IMAGE_SIZE)
        problem = folder_size_problem(size)       # every picture is decoded at this size
        if problem:
            parser.error(problem)
        try:
            spec = describe_folder(known.data_dir, size)
        except DataError as e:
            parser.error(str(e))
    if spec is not None:
        # The images' shape and the classes come from the data set: 32x32 colour for cifar10.
        parser.set_defaults(image_size=spec.image_size, channels=spec.channels,
                            num_classes=spec.num_classes, **dict(spec.train_defaults))
    if init is not None:
        if spec is not None and init.channels != spec.channels:
            parser.error(f"--init {known.init} takes {init.channels}-channel images; "
                         f"{spec.name} has {spec.channels}")
        parser.set_defaults(**{k: getattr(init, k) for k in ARCHITECTURE}, lr=FINETUNE_LR,
                            warmup_epochs=1.0)
    if known.preset:
        if init is not None:
            parser.error("--preset and --init both set the architecture: pass only one")
        parser.set_defaults(**PRESETS[known.preset])
    return parser, spec


def parse_args(argv=None) -> tuple[TrainConfig, ViTConfig]:
    """Flags -> configs; a bad flag exits with argparse's one-line message and status 2."""
    parser, spec = _with_dataset_defaults(build_parser(), argv)
    ns = vars(parser.parse_args(argv))
    tc = TrainConfig(**{f.name: ns[f.name] for f in fields(TrainConfig)})
    try:
        mc = ViTConfig(**{f.name: ns[f.name] for f in fields(ViTConfig)})
        device = pick_device(tc.device)
    except ValueError as e:
        parser.error(str(e))
    problems = config_problems(tc, mc, spec)
    if problems:
        parser.error(problems[0])
    d = from_environment()
    problem = memory_problem(tc, mc, device, d.world, local_processes(d, device))
    if problem:
        parser.error(problem)
    if not tc.out:       # an image folder's model is named after the folder
        name = Path(tc.data_dir).resolve().name if tc.dataset == FOLDER else tc.dataset
        tc.out = f"checkpoints/{name}"
    problem = out_problem(tc.out)          # not the app's folder of models, /, or home itself
    if problem:
        parser.error(problem)
    return tc, mc


class StopOnSignal:
    """The first Ctrl-C (SIGINT) or SIGTERM asks the run to stop after the current step, on
    every process of a torchrun job at the same step (vit/training/), which then saves a
    resumable state; another one more than REPEAT_S later interrupts at once. A repeat within
    REPEAT_S is the same request: under torchrun a Ctrl-C reaches each worker twice, from the
    terminal and forwarded by the launcher, and aborting on the second saved nothing."""
    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    REPEAT_S = 2.0

    def __init__(self):
        self.stop = False
        self._since = 0.0
        self._old = {}

    def __enter__(self):
        def handler(signum, frame):
            now = time.monotonic()
            if self.stop:
                if now - self._since > self.REPEAT_S:
                    raise KeyboardInterrupt
                return
            self.stop, self._since = True, now
            print(f"\n{signal.Signals(signum).name}: saving a resumable state after this step "
                  "(Ctrl-C again to abort without saving)...", file=sys.stderr, flush=True)
        for sig in self.SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread: leave the signals alone
                pass
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def after_failed_save(tc: TrainConfig, argv: list[str]) -> str:
    """What to do after a save failed (a full disk), as the end of the error's one line: the
    files written before are intact."""
    again = shlex.join(w for w in argv if w not in ("--overwrite", "--resume"))
    if (Path(tc.out) / STATE_FILE).is_file():
        return (f"the files saved before are intact: free some space, then continue with "
                f"python -m vit.train {again} --resume")
    return "free some space, then run the same command again"


def main(argv=None) -> int:
    """The command line (`argv`: its arguments, paths allowed; None: sys.argv) -> exit status."""
    argv = None if argv is None else [str(a) for a in argv]
    tc, mc = parse_args(argv)
    with StopOnSignal() as stopping:
        try:
            result = train(tc, mc, argv, should_stop=lambda: stopping.stop)
        except (TrainingError, DataError, CheckpointError, StorageError, OSError) as e:
            line = " ".join(str(e).split())
            if isinstance(e, SaveError) or isinstance(e, OSError) and e.errno == errno.ENOSPC:
                line += "; " + after_failed_save(tc, sys.argv[1:] if argv is None else argv)
            print(f"error: {line}", file=sys.stderr)
            return 1
    return 130 if result.get("reason") == "interrupted" else 0


if __name__ == "__main__":
    sys.exit(main())
