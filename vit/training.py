"""Training as a library: `python -m vit.train` is its command line, bench/train_throughput.py
times its step.

A run, in the order it uses these pieces: `config_problems` (the flags make sense); `preflight`
(before any data is read: --out is writable, holds no run unless asked, and --resume's run was
started with these settings); `new_session` (model, DDP wrapper, AdamW); `start_or_resume`; per
step `make_batch` and `train_step`; per epoch `end_epoch` (test, metrics, checkpoints, curves);
`save_state` (one file, written atomically, with everything --resume needs).

Every random draw comes from a generator seeded by `mix_seed(seed, stream, epoch or step)`, so a
run stopped anywhere and resumed ends with exactly the weights of an uninterrupted one.
"""
from __future__ import annotations

import contextlib
import copy
import csv
import datetime as dt
import hashlib
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open

from . import calibration as cal
from . import distributed, trivial_augment
from .augment import draw_erasing, erase
from .checkpoint import CheckpointError, atomic_write, check_model_size, save_checkpoint, save_tensors
from .data import DEFAULT_DATA_DIR, DataError, Split, load_split, normalize, to_unit_float
from .datasets import FOLDER, SPECS, DatasetSpec, get_spec, use_folder
from .evaluation import evaluate, pick_device, predict_logits, score
from .model import ViT, ViTConfig
from .teacher import Teacher, distillation_loss

MAX_SEED = 2**63 - 1                  # torch.manual_seed overflows beyond what fits an int64
MAX_LR = 1e6                          # far past any useful rate; 1e308 overflows AdamW's float
STATE_FILE = Path("train_state") / "state.safetensors"
TEACHER_FILE = Path("train_state") / "teacher.safetensors"   # the CNN a --distill run learns from
OLD_STATE_JSON = Path("train_state") / "state.json"     # the two-file form of earlier versions
STATE_FORMAT = "vit-explorer-train-state/2"
FINISHED_FILES = ("config.json", "model.safetensors", "metrics.csv")
# What --overwrite sets aside: the files a run writes, by name (never a whole folder).
RUN_FILES = ("config.json", "model.safetensors", "metrics.csv", "curves.png",
             "best/config.json", "best/model.safetensors", str(STATE_FILE), str(OLD_STATE_JSON),
             str(TEACHER_FILE))
# TrainConfig fields that say where and how a run executes, not what it computes: --resume may
# change them.
RUNTIME_FIELDS = frozenset({"device", "threads", "max_steps", "eval_batch_size", "data_dir",
                            "download", "out", "resume", "overwrite", "dist_timeout"})
# Ceilings on counts a flag sets, far above any useful run: past them a typo (--batch-size
# 1000000000) would end in an allocation failure and a traceback, not a message.
MAX_BATCH = 1 << 16
MAX_EPOCHS = 100_000
MAX_NEGATIVES = 1_000_000        # drawn non-digits, 784 bytes each
# The model's size flags, each with its ceiling (the published ViTs up to ViT-22B fit under all):
# checked one by one so that the message names the flag, before the loader's limits on the whole.
MODEL_FLAG_LIMITS = {"image_size": 1024, "patch_size": 1024, "dim": 8192, "depth": 256,
                     "heads": 256, "mlp_dim": 32768, "stem_channels": 1024, "stem_layers": 16}
# Training settings added after runs were already being saved, with the value that does what a
# run saved without them did: such a run resumes instead of being refused for "changed" settings.
LATER_TRAIN_KEYS = {"teacher_width": 32, "erase": 0.0, "norm_eps": 1e-5, "policy": "none",
                    "init": ""}
SET_ASIDE = ".replaced-by-overwrite"   # where --overwrite keeps the old run until a new epoch
METRIC_FIELDS = ["epoch", "step", "lr", "train_loss", "train_acc", "val_loss", "val_acc",
                 "test_loss", "test_acc", "epoch_seconds", "images_per_second"]
# Random streams, mixed into every seed so that no two draws share a generator.
STREAM_ORDER, STREAM_AUGMENT, STREAM_DROPOUT, STREAM_VAL, STREAM_VIEW, STREAM_NEG = 1, 2, 3, 4, 5, 6
STREAM_TEACHER, STREAM_ERASE, STREAM_POLICY = 7, 8, 9
# Held-out synthetic non-digits (never trained on) that measure "not a digit" on validation.
HELD_OUT_NEGATIVES = 1000


class TrainingError(RuntimeError):
    """A run can't start or go on; the message is one line saying why and what to do."""


@dataclass
class TrainConfig:
    """Training knobs. Defaults = the command that produced the bundled checkpoints."""
    dataset: str = field(default="mnist", metadata={
        "help": "the data set to train on; folder: any image folder (--data-dir D holding "
                "D/train/<class>/<images> and D/test/ or D/val/)", "choices": [*SPECS, FOLDER]})
    data_dir: str = field(default=DEFAULT_DATA_DIR, metadata={
        "help": "folder with the data set (torchvision layout, or a folder of raw IDX files)"})
    download: bool = field(default=True, metadata={
        "help": "download the data set if it is missing (--no-download to forbid)"})
    out: str = field(default="", metadata={"help": "checkpoint folder (default: checkpoints/DATASET)"})
    overwrite: bool = field(default=False, metadata={
        "help": "start afresh in an --out that already holds a run or a finished checkpoint, "
                "removing its files"})
    epochs: int = field(default=20, metadata={"help": "passes over the training set"})
    batch_size: int = field(default=128, metadata={"help": "images per optimiser step"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate of AdamW"})
    min_lr: float = field(default=1e-5, metadata={"help": "learning rate at the end of the cosine"})
    weight_decay: float = field(default=0.05, metadata={
        "help": "AdamW weight decay, applied to weight matrices only"})
    warmup_epochs: float = field(default=2.0, metadata={"help": "linear warm-up length, in epochs"})
    label_smoothing: float = field(default=0.1, metadata={"help": "cross-entropy label smoothing"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm (0 = off)"})
    augment: bool = field(default=True, metadata={
        "help": "random affine augmentation as the data set's spec says: rotation, scale, shift, "
                "shear, and left-right flips for fashion-mnist (--no-augment: off)"})
    val_size: int = field(default=5000, metadata={
        "help": "training images held out (the same ones for every seed) to choose best/, fit the "
                "confidence temperature and the 'not a digit' threshold: never the test set"})
    serve_view: float = field(default=0.5, metadata={
        "help": "share of training images shown as the app's preprocessing lays them out "
                "(vit.preprocessing), so that serving sees what training saw"})
    negatives: int = field(default=20000, metadata={
        "help": "synthetic non-digit drawings (letters, scribbles, dots, dashes, shapes, two digits) "
                "trained towards a flat answer, 1 per 8 digits in a batch (digit data sets only; "
                "0 = off)"})
    oe_weight: float = field(default=0.25, metadata={
        "help": "weight of the flat-answer loss on those drawings (outlier exposure)"})
    distill: float = field(default=0.5, metadata={
        "help": "weight of soft distillation from a small CNN trained first (vit/teacher.py); "
                "0 = off"})
    teacher_epochs: int = field(default=5, metadata={"help": "epochs of that CNN teacher"})
    teacher_width: int = field(default=32, metadata={
        "help": "channels of the teacher's first conv block (the second has twice as many)"})
    policy: str = field(default="none", metadata={
        "help": "an augmentation policy after the affine one: trivialaugment = TrivialAugment "
                "(Wide), one random operation per image, of 14 (shear, shift, rotation, brightness, "
                "colour, contrast, sharpness, posterize, solarize, autocontrast, equalize), at a "
                "random strength (none = off)", "choices": ["none", "trivialaugment"]})
    init: str = field(default="", metadata={
        "help": "start from this checkpoint folder's weights (fine-tuning): its architecture, a new "
                "head for this data set's classes, position embeddings resized when --image-size "
                "changes the grid"})
    erase: float = field(default=0.0, metadata={
        "help": "probability of random erasing: a rectangle of 2-25 %% of the image replaced by "
                "noise, after the affine augmentation (0 = off)"})
    ema: float = field(default=0.999, metadata={
        "help": "decay of an exponential moving average of the weights, which is what gets tested "
                "and saved (0 = off; 0.999 averages ~1000 steps)"})
    seed: int = field(default=0, metadata={"help": f"random seed, 0 to {MAX_SEED}"})
    device: str = field(default="auto", metadata={"help": "auto (cuda, then mps, then cpu), cpu, cuda, mps"})
    threads: int = field(default=0, metadata={"help": "CPU threads for torch (0 = torch's default)"})
    eval_batch_size: int = field(default=1000, metadata={"help": "images per batch when testing"})
    resume: bool = field(default=False, metadata={
        "help": "continue the interrupted or finished run in --out exactly where it stopped"})
    max_steps: int = field(default=0, metadata={
        "help": "stop (resumably) after this many optimiser steps in this invocation; for tests"})
    dist_timeout: float = field(default=300.0, metadata={
        "help": "under torchrun: seconds a process waits for the others at a collective before "
                "the run stops, naming the process that fell behind"})


def config_problems(tc: TrainConfig, mc: ViTConfig) -> list[str]:
    """Every problem with the settings, one line each (empty: all fine)."""
    spec = get_spec(tc.dataset)
    if spec is None:
        if tc.dataset == FOLDER:
            return ["--dataset folder: describe the folder first (vit.datasets.use_folder)"]
        return [f"unknown --dataset {tc.dataset!r}: choose one of {', '.join([*SPECS, FOLDER])}"]
    max_threads = 4 * (os.cpu_count() or 1)       # far past any speed-up; 100000 crashes OpenMP
    S, C = spec.image_size, spec.channels
    checks = [
        (1 <= tc.epochs <= MAX_EPOCHS, f"--epochs must be between 1 and {MAX_EPOCHS:,}"),
        (1 <= tc.batch_size <= MAX_BATCH, f"--batch-size must be between 1 and {MAX_BATCH:,}"),
        (1 <= tc.eval_batch_size <= MAX_BATCH,
         f"--eval-batch-size must be between 1 and {MAX_BATCH:,}"),
        (math.isfinite(tc.dist_timeout) and 1 <= tc.dist_timeout <= 86_400,
         "--dist-timeout must be between 1 and 86400 seconds"),
        (math.isfinite(tc.lr) and 0 < tc.lr <= MAX_LR, f"--lr must be in (0, {MAX_LR:g}]"),
        (0 <= tc.min_lr <= tc.lr, "--min-lr must be between 0 and --lr"),     # NaN fails too
        (math.isfinite(tc.weight_decay) and tc.weight_decay >= 0,
         "--weight-decay must be a finite number >= 0"),
        (math.isfinite(tc.warmup_epochs) and tc.warmup_epochs >= 0,
         "--warmup-epochs must be a finite number >= 0"),
        (0 <= tc.label_smoothing < 1, "--label-smoothing must be in [0, 1)"),
        (math.isfinite(tc.grad_clip) and tc.grad_clip >= 0,
         "--grad-clip must be a finite number >= 0 (0 = off)"),
        (0 <= tc.seed <= MAX_SEED, f"--seed must be between 0 and {MAX_SEED} (2**63 - 1)"),
        (0 <= tc.threads <= max_threads,
         f"--threads must be between 0 (torch's default) and {max_threads} (4 per CPU core here)"),
        (tc.max_steps >= 0, "--max-steps must be >= 0"),
        (tc.val_size >= 0, "--val-size must be >= 0"),
        (0 <= tc.serve_view <= 1, "--serve-view must be in [0, 1]"),
        (0 <= tc.negatives <= MAX_NEGATIVES, f"--negatives must be between 0 and {MAX_NEGATIVES:,}"),
        (math.isfinite(tc.oe_weight) and tc.oe_weight >= 0, "--oe-weight must be a finite number >= 0"),
        (0 <= tc.ema < 1, "--ema must be in [0, 1) (0 = off)"),
        (0 <= tc.distill <= 1, "--distill must be in [0, 1] (0 = off)"),
        (1 <= tc.teacher_epochs <= MAX_EPOCHS,
         f"--teacher-epochs must be between 1 and {MAX_EPOCHS:,}"),
        (1 <= tc.teacher_width <= 1024, "--teacher-width must be between 1 and 1024"),
        (0 <= tc.erase <= 1, "--erase must be in [0, 1] (0 = off)"),
        (not (tc.resume and tc.overwrite),
         "--resume continues the run in --out and --overwrite replaces it: pass only one"),
        ((mc.image_size, mc.channels) == (S, C),
         f"{spec.name} images are {S}x{S} with {C} channel(s): "
         f"keep --image-size {S} --channels {C}"),
        (mc.num_classes == spec.num_classes,
         f"{spec.name} has {spec.num_classes} classes, not {mc.num_classes}"),
    ]
    problems = [message for ok, message in checks if not ok]
    problems += [f"--{k.replace('_', '-')} is {getattr(mc, k):,}: the limit is {limit:,}"
                 for k, limit in MODEL_FLAG_LIMITS.items() if getattr(mc, k) > limit]
    try:                                  # the model the flags describe, by the loader's limits
        check_model_size(mc, "the model these flags describe")
    except CheckpointError as e:
        problems.append(f"{e}: choose a smaller --dim, --depth, --mlp-dim or image/patch size")
    return problems


def memory_bytes(device: torch.device) -> int | None:
    """The memory a run on `device` can have at most: the GPU's, or the machine's (None: unknown)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu":
        from .imagefolder import machine_memory
        return machine_memory()
    return None


def sizes_text(a: float, b: float) -> tuple[str, str]:
    """Two byte counts as GB with as many decimals as it takes to tell them apart: "50.3 GB" and
    "50 GB", never "50 GB" and "50 GB" for sizes that differ."""
    for places in range(1, 4):
        x, y = f"{a / 1e9:.{places}f}", f"{b / 1e9:.{places}f}"
        if x != y:
            break
    else:
        return f"{a:,.0f} bytes", f"{b:,.0f} bytes"
    return (x.rstrip("0").rstrip(".") + " GB", y.rstrip("0").rstrip(".") + " GB")


def memory_problem(tc: TrainConfig, mc: ViTConfig, device: torch.device,
                   world: int = 1, sharing: int = 1) -> str | None:
    """One line when a training (or test) step of this model and batch can't fit in `device`'s
    memory, before anything is allocated: a typo such as --batch-size 60000 ended in an
    allocation failure and a traceback, or the kernel's OOM killer. The estimate is a lower bound
    (the weights, their gradients, AdamW's moments and the moving average, plus the activations
    autograd keeps for backward: per block and token 8 of width --dim — both LayerNorms' inputs
    and outputs, q, k, v, the attention's output — and 2 of width --mlp-dim, the MLP's hidden
    layer before and after its GELU; the conv stem's outputs. Measured on a CPU: ~560 MB for the
    default model at --batch-size 256, estimated 457), so a refused run could not have run.
    `world`: processes sharing the global batch; `sharing`: of them, those on this memory."""
    total = memory_bytes(device)
    if total is None:
        return None
    from .checkpoint import implied_shapes
    elem = 2 if device.type == "cuda" else 4            # bf16 activations under CUDA autocast
    tokens = mc.num_patches + 1
    params = sum(math.prod(shape) for shape in implied_shapes(mc).values())
    fixed = params * 4 * (4 + (1 if tc.ema else 0)) * sharing
    train_image = elem * (mc.depth * tokens * (8 * mc.dim + 2 * mc.mlp_dim)
                          + (mc.stem_layers * mc.stem_channels * 2 * mc.image_size ** 2
                             if mc.stem_channels else 0))
    test_image = elem * tokens * (mc.dim + max(3 * mc.dim, mc.mlp_dim))
    where = "the GPU's memory" if device.type == "cuda" else "this machine's memory"
    if fixed >= total:
        need, have = sizes_text(fixed, total)
        return (f"the model these flags describe needs {need} for its weights, gradients and "
                f"AdamW state alone, more than {where} ({have}): choose a smaller --dim, --depth "
                f"or --mlp-dim")
    for flag, batch, per_image, per_rank in (
            ("--batch-size", tc.batch_size, train_image, math.ceil(tc.batch_size / world)),
            ("--eval-batch-size", tc.eval_batch_size, test_image, tc.eval_batch_size)):
        need = fixed + per_rank * per_image * sharing
        if need > total:
            fit = int((total - fixed) // (per_image * sharing)) * (world if per_rank < batch else 1)
            need_s, have = sizes_text(need, total)
            return (f"{flag} {batch:,} needs at least {need_s} for one step of this model, more "
                    f"than {where} ({have}): choose a smaller {flag} (below {max(fit, 1):,} at "
                    f"the very least), or a smaller model")
    return None


def is_out_of_memory(e: BaseException) -> bool:
    """An allocation that failed: torch's CPU allocator and CUDA word it so, numpy raises
    MemoryError."""
    text = str(e).lower()
    return isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text))


# --- random streams ---------------------------------------------------------------------------
_MASK64 = 2**64 - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def mix_seed(*values: int) -> int:
    """A 63-bit seed from integers, by chaining splitmix64 over them: neighbouring inputs give
    unrelated seeds, and (unlike hash()) the same ones on every platform and Python version."""
    h = 0
    for v in values:
        h = _splitmix64(h ^ (v & _MASK64))
    return h >> 1


def _generator(*values: int) -> torch.Generator:
    return torch.Generator().manual_seed(mix_seed(*values))


# --- schedule and optimiser -------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """The schedule's arithmetic, fixed by the training set's size and the flags."""
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int


def make_plan(tc: TrainConfig, n_train: int) -> Plan:
    per_epoch = math.ceil(n_train / tc.batch_size)
    return Plan(per_epoch, tc.epochs * per_epoch, int(tc.warmup_epochs * per_epoch))


def lr_at(step: int, plan: Plan, tc: TrainConfig) -> float:
    """Linear warm-up to tc.lr, then cosine down to tc.min_lr: a pure function of the step."""
    if step < plan.warmup_steps:
        return tc.lr * (step + 1) / plan.warmup_steps
    t = (step - plan.warmup_steps) / max(1, plan.total_steps - plan.warmup_steps)
    return tc.min_lr + 0.5 * (tc.lr - tc.min_lr) * (1 + math.cos(math.pi * t))


def param_groups(model: ViT, weight_decay: float) -> list[dict]:
    """Weight decay on matrices (linear and conv weights) only: not on biases, norms, the position
    embeddings or the [CLS] token, which decay would pull towards zero for no benefit."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_matrix = p.ndim >= 2 and name not in ("pos_embed", "cls_token")
        (decay if is_matrix else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


# --- the run's state: what --resume needs -----------------------------------------------------
@dataclass
class EpochTotals:
    """Running sums of the epoch in progress. Saved with a mid-epoch state, so that a resumed
    epoch's metrics row covers the whole epoch, not just the part after the resume."""
    seen: int = 0
    correct: int = 0
    loss_sum: float = 0.0
    seconds: float = 0.0


@dataclass
class RunState:
    """Everything about a run besides its tensors; JSON in the state file's metadata."""
    step: int = 0                                        # optimiser steps done
    wall_seconds: float = 0.0
    best_acc: float = -1.0                               # best validation accuracy so far
    command: str = ""                                    # how the run was started
    commits: list[str] = field(default_factory=list)     # code it ran, one entry per version
    devices: list[str] = field(default_factory=list)     # where it ran, one entry per change
    config: dict = field(default_factory=dict)           # {"train": {...}, "model": {...}}
    train_images: int = 0
    data_digest: str = ""                                # SHA-256 of the training images and labels
    metrics: list[dict] = field(default_factory=list)    # one row per finished epoch
    partial: EpochTotals = field(default_factory=EpochTotals)   # over all ranks

    @classmethod
    def from_json(cls, text: str) -> RunState:
        """Parse and type-check (the file may have been edited); ValueError names the field."""
        d = json.loads(text)
        if not isinstance(d, dict) or not isinstance(d.get("partial"), dict):
            raise ValueError("run record is not an object with a 'partial' object")
        run = cls(**{**d, "partial": EpochTotals(**d["partial"])})
        ints = {"step": run.step, "train_images": run.train_images,
                "partial.seen": run.partial.seen, "partial.correct": run.partial.correct}
        nums = {"wall_seconds": run.wall_seconds, "best_acc": run.best_acc,
                "partial.loss_sum": run.partial.loss_sum, "partial.seconds": run.partial.seconds}
        for name, v in ints.items():
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                raise ValueError(f"{name} is {v!r}, not a whole number >= 0")
        for name, v in nums.items():
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)):
                raise ValueError(f"{name} is {v!r}, not a number")
        if not (isinstance(run.metrics, list) and all(isinstance(r, dict) for r in run.metrics)):
            raise ValueError("metrics is not a list of rows")
        for name in ("commits", "devices"):
            v = getattr(run, name)
            if not (isinstance(v, list) and all(isinstance(c, str) for c in v)):
                raise ValueError(f"{name} is not a list of strings")
        if not isinstance(run.data_digest, str):
            raise ValueError("data_digest is not a string")
        if not (isinstance(run.config, dict) and isinstance(run.config.get("train"), dict)
                and isinstance(run.config.get("model"), dict) and isinstance(run.command, str)):
            raise ValueError("config/command are not what a run writes")
        return run


@dataclass
class SavedState:
    run: RunState
    tensors: dict[str, torch.Tensor]     # "model.NAME" and "opt.INDEX.NAME"
    param_groups: list[dict]             # AdamW's, "params" as indices


def save_state(path: Path, model: ViT, opt: torch.optim.Optimizer, run: RunState,
               ema: ViT | None = None) -> None:
    """One safetensors file: the model's and AdamW's tensors, with the run (and AdamW's param
    groups) as JSON in its metadata. Written by atomic_write, so a kill at any moment leaves the
    previous state or this one, never the weights of one step with the record of another."""
    opt_sd = opt.state_dict()
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    if ema is not None:
        tensors.update({f"ema.{k}": v for k, v in ema.state_dict().items()})
    for idx, st in opt_sd["state"].items():
        for k, v in st.items():
            tensors[f"opt.{idx}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    save_tensors(path, tensors, metadata={"format": STATE_FORMAT,
                                          "run": json.dumps(asdict(run)),
                                          "param_groups": json.dumps(opt_sd["param_groups"])})


def read_state(path: Path) -> SavedState:
    """The state save_state wrote; TrainingError (one line) if it is missing or damaged."""
    if (path.parent / OLD_STATE_JSON.name).exists():
        raise TrainingError(f"{path.parent} holds a resumable state in the two-file form of an "
                            f"earlier version, which this one can't resume: finish it with that "
                            f"version, or start afresh with --overwrite")
    if not path.is_file():
        raise TrainingError(f"nothing to resume: {path} not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, not {STATE_FORMAT!r}")
        run, groups = RunState.from_json(meta["run"]), json.loads(meta["param_groups"])
        if not (isinstance(groups, list) and all(isinstance(g, dict) for g in groups)):
            raise ValueError("param_groups is not a list of objects")
        return SavedState(run, tensors, groups)
    except (SafetensorError, OSError, ValueError, KeyError, TypeError) as e:
        reason = " ".join(str(e).split())
        raise TrainingError(f"can't resume: {path} is damaged ({reason})") from None


def restore(saved: SavedState, model: ViT, opt: torch.optim.Optimizer, ema: ViT | None = None) -> None:
    """Load the saved tensors into the model and AdamW; TrainingError if they don't fit (a state
    file edited by hand, or one from another model)."""
    try:
        model.load_state_dict({k[6:]: v for k, v in saved.tensors.items() if k.startswith("model.")})
        if ema is not None:
            ema.load_state_dict({k[4:]: v for k, v in saved.tensors.items() if k.startswith("ema.")})
        opt_state: dict[int, dict] = {}
        for k, v in saved.tensors.items():
            if k.startswith("opt."):
                _, idx, name = k.split(".", 2)
                opt_state.setdefault(int(idx), {})[name] = v
        params = [p for g in opt.param_groups for p in g["params"]]
        for idx, st in opt_state.items():       # AdamW would fail mid-step on a wrong shape
            for name in ("exp_avg", "exp_avg_sq"):
                if name in st and st[name].shape != params[idx].shape:
                    raise ValueError(f"optimiser state {idx}.{name} has shape "
                                     f"{tuple(st[name].shape)}, its parameter {tuple(params[idx].shape)}")
        # Which implementation runs (fused or not) is this process's choice, not the saved run's
        # (set before loading, which puts AdamW's step counts where that implementation wants them).
        impl = [{k: g[k] for k in ("fused", "foreach") if k in g} for g in opt.param_groups]
        groups = [{**g, **kept} for g, kept in zip(saved.param_groups, impl)]
        opt.load_state_dict({"state": opt_state, "param_groups": groups + saved.param_groups[len(impl):]})
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
        reason = " ".join(str(e).split())[:200]
        raise TrainingError(f"can't resume: the saved state does not fit this model ({reason})") from None


# --- before any data is read ------------------------------------------------------------------
def check_writable(out: Path) -> None:
    """Refuse an --out that can't be created or written, before minutes of loading and training
    end in a failed save: the first folder that exists on the way up must be a writable folder,
    and a file must really be creatable in --out (which this creates)."""
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise TrainingError(f"can't write --out {out}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise TrainingError(f"can't write --out {out}: {probe} is not writable")
    try:      # os.access can say yes where a write fails (root, /sys, read-only mounts): try one
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise TrainingError(f"can't write --out {out}: {e.strerror or e}") from None


def flag_text(name: str, value) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def check_same_settings(saved: dict, tc: TrainConfig, mc: ViTConfig, out: Path) -> None:
    """--resume continues a run with the settings it was started with; anything else would
    silently mix two runs (AdamW's saved param groups would even keep the old weight decay while
    config.json recorded the new one). Refuse, naming every flag that differs."""
    now = {**{k: v for k, v in asdict(tc).items() if k not in RUNTIME_FIELDS}, **mc.to_dict()}
    before = {**LATER_TRAIN_KEYS, **saved.get("train", {}), **saved.get("model", {})}
    changed = [k for k in now if before.get(k) != now[k]]
    if changed:
        raise TrainingError(
            f"--resume: the run in {out} was started with "
            + ", ".join(f"{flag_text(k, before.get(k))} (now {flag_text(k, now[k])})" for k in changed)
            + ": resume with the saved values, or start afresh with --overwrite")


def preflight(tc: TrainConfig, mc: ViTConfig) -> SavedState | None:
    """The checks that need no data (after check_writable, under the folder's lock): --out holds
    no run or finished checkpoint unless --resume or --overwrite says what to do with it; a
    resumed run's settings match. Returns the saved state to resume from (None: a fresh start)."""
    out = Path(tc.out)
    if tc.resume:
        saved = read_state(out / STATE_FILE)
        check_same_settings(saved.run.config, tc, mc, out)
        return saved
    if tc.overwrite:
        return None
    if (out / STATE_FILE).exists() or (out / OLD_STATE_JSON).exists():
        raise TrainingError(f"{out} already holds a run: pass --resume to continue it, "
                            f"--overwrite to start afresh, or choose another --out")
    finished = [name for name in FINISHED_FILES if (out / name).exists()]
    if finished:
        raise TrainingError(f"{out} already holds a finished checkpoint ({', '.join(finished)}): "
                            f"pass --overwrite to replace it, or choose another --out")
    return None


def set_aside_run_files(out: Path) -> list[str]:
    """--overwrite: move the files a previous run wrote in `out` (by name) into `out/SET_ASIDE`,
    where they stay until the new run's first checkpoint is saved, so that stopping the new run
    early never leaves the folder with neither model. Returns the names moved."""
    moved = [name for name in RUN_FILES if (out / name).is_file()]
    for name in moved:
        target = out / SET_ASIDE / name
        if target.exists():      # set aside by an earlier --overwrite that never saved: keep that,
            (out / name).unlink()    # the older, finished work; this file is the partial run's
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(out / name, target)
    for sub in ("best", "train_state"):
        with contextlib.suppress(OSError):      # only if nothing else is in it
            (out / sub).rmdir()
    return moved


# --- one invocation: model, optimiser, batches, steps -----------------------------------------
@dataclass
class Session:
    """What the steps of one invocation share."""
    tc: TrainConfig
    spec: DatasetSpec
    d: distributed.Dist
    device: torch.device
    model: ViT
    net: torch.nn.Module              # what a step calls: the model, or its DDP wrapper
    opt: torch.optim.Optimizer
    plan: Plan
    train_split: Split
    data: TrainData | None = None
    ema_model: ViT | None = None      # the weights' moving average (--ema), else None
    teacher: torch.nn.Module | None = None   # the CNN distilled from (--distill), else None

    @property
    def augment(self):
        return self.spec.augment if self.tc.augment else None

    @property
    def eval_model(self) -> ViT:
        """What is tested, calibrated and saved: the moving average if there is one."""
        return self.ema_model if self.ema_model is not None else self.model


def new_session(tc: TrainConfig, mc: ViTConfig, train_split: Split,
                d: distributed.Dist = distributed.Dist(),
                device: torch.device = torch.device("cpu"), data: TrainData | None = None,
                fresh: bool = True) -> Session:
    """`fresh`: a new run (--init's weights are read); a resumed one gets its state instead."""
    torch.manual_seed(tc.seed)                         # the initial weights
    model = ViT(mc)
    if tc.init and fresh:                              # all but the head from a checkpoint
        from .finetune import InitError, load_pretrained
        try:
            load_pretrained(model, tc.init)
        except InitError as e:
            raise TrainingError(str(e)) from None
    model = model.to(device)
    net = model
    if d.enabled:   # averages gradients across processes during backward()
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    # The fused AdamW kernel (one pass over all parameters) where torch has one: on a 2-core CPU
    # it takes a third of the for-loop implementation's time, and gives the same weights up to
    # float rounding.
    opt = torch.optim.AdamW(param_groups(model, tc.weight_decay), lr=tc.lr, betas=(0.9, 0.999),
                            fused=device.type in ("cpu", "cuda"))
    ema = copy.deepcopy(model).requires_grad_(False).eval() if tc.ema else None
    return Session(tc, get_spec(tc.dataset), d, device, model, net, opt,
                   make_plan(tc, len(train_split)), train_split, data, ema)


# --- what a run trains on besides the digits themselves -----------------------------------------
@dataclass
class TrainData:
    """The training split's companions, all uint8 like the split (on the training device):
    `served` — each training image as the app's preprocessing lays it out; `val`/`val_served` —
    the held-out validation images (raw and laid out); `negatives`/`held_out` — synthetic
    non-digit drawings to train on / to measure with (None when off)."""
    served: torch.Tensor | None
    val: Split | None
    val_served: torch.Tensor | None
    negatives: torch.Tensor | None
    held_out: torch.Tensor | None


def carve_validation(split: Split, size: int) -> tuple[Split, Split | None]:
    """(training part, validation part): `size` images drawn by a fixed generator, the same for
    every seed, so runs with different seeds are compared on the same held-out images."""
    if size == 0:
        return split, None
    if size > len(split) // 5:
        raise TrainingError(f"--val-size {size} is more than a fifth of the {len(split):,} "
                            f"training images: choose at most {len(split) // 5}")
    perm = torch.randperm(len(split), generator=_generator(STREAM_VAL))
    val_idx, train_idx = perm[:size].sort().values, perm[size:].sort().values
    return (Split(split.images[train_idx], split.labels[train_idx], split.source),
            Split(split.images[val_idx], split.labels[val_idx], split.source))


def as_served(images: torch.Tensor, style: str, size: int) -> torch.Tensor:
    """uint8 images -> the same images laid out by vit.preprocessing.to_model_image, as the app
    does to every drawing and upload (an image it can't lay out, e.g. a blank one, stays as is)."""
    from .preprocessing import PreprocessError, to_model_image
    out = images.clone()
    for i, img in enumerate(images.numpy()):
        try:
            out[i] = torch.from_numpy(np.round(to_model_image(img, style, size) * 255).astype(np.uint8))
        except PreprocessError:
            pass
    return out


def prepare_data(tc: TrainConfig, spec: DatasetSpec, split: Split, say: Callable) -> tuple[Split, TrainData]:
    """Carve the validation split and build the laid-out views and the non-digit bank. Pure
    functions of the data and the seed-independent streams: a resumed run rebuilds the same."""
    from .negatives import make_bank
    train_split, val = carve_validation(split, tc.val_size)
    grey = spec.channels == 1
    served = val_served = negatives = held_out = None
    if grey and (tc.serve_view > 0 or val is not None):
        t0 = time.time()
        served = as_served(train_split.images, spec.style, spec.image_size) if tc.serve_view else None
        val_served = as_served(val.images, spec.style, spec.image_size) if val is not None else None
        say(f"Laid out {len(split):,} images as the app would in {time.time() - t0:.0f} s", flush=True)
    if tc.negatives and spec.style == "digits":
        t0 = time.time()
        digits = train_split.images[:5000]        # for "two digits side by side": training images only
        negatives = make_bank(tc.negatives, mix_seed(STREAM_NEG, 0), digits, spec.image_size)
        held_out = make_bank(min(HELD_OUT_NEGATIVES, max(1, tc.negatives // 10)),
                             mix_seed(STREAM_NEG, 1), digits, spec.image_size)
        say(f"Drew {len(negatives) + len(held_out):,} non-digit drawings in "
            f"{time.time() - t0:.0f} s", flush=True)
    return train_split, TrainData(served, val, val_served, negatives, held_out)


@dataclass
class Batch:
    x: torch.Tensor       # (b + n, C, S, S) normalised: this rank's digits, then its non-digits
    y: torch.Tensor       # (b,) labels of the digits
    size: int             # digits in the global batch, all ranks together
    negatives: int = 0    # non-digits in the global batch (this rank's: len(x) - len(y))


def epoch_order(tc: TrainConfig, n: int, epoch: int) -> torch.Tensor:
    """The epoch's shuffle of the training set: the same on every rank."""
    return torch.randperm(n, generator=_generator(tc.seed, STREAM_ORDER, epoch))


def make_batch(s: Session, order: torch.Tensor, step: int) -> Batch:
    """The batch of global step `step` (in the epoch `order` shuffles), this rank's share of it."""
    i = step % s.plan.steps_per_epoch
    batch = order[i * s.tc.batch_size:(i + 1) * s.tc.batch_size]    # the global batch
    mine = distributed.shard(s.d, len(batch))                        # this rank's rows of it
    idx = batch[mine]
    images = s.train_split.images[idx]
    data = s.data
    if data is not None and data.served is not None:     # some images as the app lays them out
        view = torch.rand(len(batch), generator=_generator(s.tc.seed, STREAM_VIEW, step))[mine]
        images = torch.where(view.to(images.device)[:, None, None] < s.tc.serve_view,
                             data.served[idx], images)
    n_neg, neg_mine = 0, slice(0, 0)
    if data is not None and data.negatives is not None:
        n_neg = max(1, len(batch) // 8)
        pick = torch.randint(len(data.negatives), (n_neg,),
                             generator=_generator(s.tc.seed, STREAM_NEG, step))
        neg_mine = distributed.shard(s.d, n_neg)
        images = torch.cat([images, data.negatives[pick[neg_mine]]])
    x = to_unit_float(images, s.spec.channels)                       # (b + n, C, S, S) in [0, 1]
    if s.augment is not None:   # drawn for the global batch: every rank draws the same numbers
        theta = s.augment.draw(len(batch) + n_neg, _generator(s.tc.seed, STREAM_AUGMENT, step))
        x = s.augment.apply(x, torch.cat([theta[:len(batch)][mine], theta[len(batch):][neg_mine]]))
    if s.tc.policy == "trivialaugment":     # the digits only, like erasing
        drawn = trivial_augment.draw(len(batch), _generator(s.tc.seed, STREAM_POLICY, step))
        x[:len(idx)] = trivial_augment.apply(x[:len(idx)], drawn.rows(mine))
    if s.tc.erase:              # the digits only: a non-digit with a hole is still one
        gen = _generator(s.tc.seed, STREAM_ERASE, step)
        S = s.spec.image_size
        mask = draw_erasing(len(batch), S, s.tc.erase, gen)           # for the global batch
        noise = torch.rand(len(batch), s.spec.channels, S, S, generator=gen)
        x[:len(idx)] = erase(x[:len(idx)], mask[mine], noise[mine])
    x = normalize(x, s.spec.mean, s.spec.std)
    return Batch(x.to(s.device, non_blocking=True),
                 s.train_split.labels[idx].to(s.device, non_blocking=True), len(batch), n_neg)


def _autocast(device: torch.device):
    # bf16 on CUDA; float32 on the CPU, where bf16 is ~5x slower.
    return (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
            else contextlib.nullcontext())


@dataclass
class StepResult:
    loss_sum: float       # summed loss over this rank's images
    correct: int          # of them, classified right
    stop: bool            # some rank was asked to stop after this step


def train_step(s: Session, batch: Batch, step: int, stop_requested: bool = False) -> StepResult:
    """One AdamW step at global step `step`. Raises TrainingError on every rank, before updating
    anything, when the loss is not finite on any of them."""
    tc = s.tc
    for g in s.opt.param_groups:
        g["lr"] = lr_at(step, s.plan, tc)
    # Dropout draws from torch's global generator: a stream per rank, since each rank drops units
    # of its own images (batch order and augmentation are the same on every rank).
    torch.manual_seed(mix_seed(tc.seed, STREAM_DROPOUT, step, s.d.rank))
    with _autocast(s.device):
        logits = s.net(batch.x)
        # This rank's share of the global batch's mean loss: DDP averages gradients over ranks,
        # so the optimiser sees the single-process gradient whatever the number of processes.
        digits = logits[:len(batch.y)].float()
        loss = F.cross_entropy(digits, batch.y, label_smoothing=tc.label_smoothing,
                               reduction="sum") * (s.d.world / batch.size)
        digit_loss = loss.detach()
        if s.teacher is not None:
            with torch.no_grad():
                taught = s.teacher(batch.x[:len(batch.y)]).float()
            kd = distillation_loss(digits, taught) * (s.d.world / batch.size)
            loss = (1 - tc.distill) * loss + tc.distill * kd
        if batch.negatives:
            # Outlier exposure: cross-entropy against the uniform answer on the non-digits.
            flat = -logits[len(batch.y):].float().log_softmax(1).mean(1).sum()
            loss = loss + tc.oe_weight * flat * (s.d.world / batch.negatives)
    bad, stop = distributed.any_rank(s.d, [not bool(torch.isfinite(loss)), stop_requested],
                                     s.device)
    if bad:
        epoch, i = divmod(step, s.plan.steps_per_epoch)
        raise TrainingError(
            f"loss became non-finite at epoch {epoch + 1}, step {i + 1}: training diverged; "
            f"try a lower --lr (now {tc.lr}) or a --grad-clip (now {tc.grad_clip})")
    s.opt.zero_grad(set_to_none=True)
    loss.backward()
    if tc.grad_clip:
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), tc.grad_clip)
    s.opt.step()
    if s.ema_model is not None:
        update_ema(s.ema_model, s.model, tc.ema, step)
    correct = (digits.argmax(1) == batch.y).sum().item()
    return StepResult(digit_loss.item() * batch.size / s.d.world, correct, stop)


@torch.no_grad()
def update_ema(ema: ViT, model: ViT, decay: float, step: int) -> None:
    """ema <- d * ema + (1 - d) * model, with d ramping up from 0.1 over the first steps so that
    the average does not drag the random initial weights along (as timm's ModelEmaV3 warms up)."""
    d = min(decay, (1 + step) / (10 + step))
    torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - d)


# --- an epoch ---------------------------------------------------------------------------------
def train_epoch(s: Session, run: RunState, stop_at: int | None,
                should_stop: Callable[[], bool]) -> tuple[str | None, EpochTotals]:
    """Steps from run.step to the end of its epoch, with a progress bar. Returns (None, totals)
    when the epoch is done, or ("interrupted" | "max_steps", totals) when it stopped early.
    Totals are over all ranks."""
    from tqdm import tqdm
    per_epoch = s.plan.steps_per_epoch
    epoch, first = divmod(run.step, per_epoch)
    order = epoch_order(s.tc, len(s.train_split), epoch)
    saved = run.partial if first else EpochTotals()
    # The saved sums are over all ranks: rank 0 carries them on, the others start from zero.
    t = replace(saved) if s.d.main else EpochTotals(seconds=saved.seconds)
    bar = tqdm(range(first, per_epoch), desc=f"epoch {epoch + 1}/{s.tc.epochs}", initial=first,
               total=per_epoch, leave=True, dynamic_ncols=True,
               disable=None if s.d.main else True, file=sys.stderr)
    t0, seconds0, reason = time.time(), t.seconds, None
    for _ in bar:
        batch = make_batch(s, order, run.step)
        r = train_step(s, batch, run.step, should_stop())
        run.step += 1
        t.seen += len(batch.y)
        t.correct += r.correct
        t.loss_sum += r.loss_sum
        t.seconds = seconds0 + time.time() - t0
        bar.set_postfix(loss=f"{t.loss_sum / t.seen:.4f}", acc=f"{100 * t.correct / t.seen:.2f}%",
                        img_s=f"{t.seen / max(t.seconds, 1e-9):.0f}")
        if r.stop:
            reason = "interrupted"
        elif stop_at is not None and run.step >= stop_at:
            reason = "max_steps"
        if reason:
            break
    bar.close()
    seen, correct, loss_sum = distributed.sum_all(s.d, [t.seen, t.correct, t.loss_sum], s.device)
    return reason, EpochTotals(int(seen), int(correct), loss_sum, t.seconds)


def test_pass(s: Session, split: Split) -> tuple[float, float]:
    """(loss, accuracy) on the whole test set; under torchrun each rank tests a share of it."""
    mine = distributed.shard(s.d, len(split))
    labels = split.labels[mine]
    loss, acc, _ = evaluate(s.eval_model, split.images[mine], labels, s.spec.mean, s.spec.std,
                            s.tc.eval_batch_size)
    if not s.d.enabled:
        return loss, acc
    n = len(labels)
    loss_sum, correct, total = distributed.sum_all(s.d, [loss * n, round(acc * n), n], s.device)
    return loss_sum / total, correct / total


@dataclass
class Validation:
    loss: float
    accuracy: float
    calibration: dict     # config.json's "calibration" object


def validate(s: Session) -> Validation | None:
    """Score the held-out validation images, as stored and as the app lays them out, and fit the
    confidence temperature on both and the "not one of these" threshold on the laid-out ones
    (what the app will see). Every rank computes the same (the images are few)."""
    data = s.data
    if data is None or data.val is None:
        return None
    val, m = data.val, s.eval_model
    logits = predict_logits(m, val.images, s.spec.mean, s.spec.std, s.tc.eval_batch_size)
    labels = val.labels
    loss, acc, _ = score(logits, labels)
    served = (predict_logits(m, data.val_served, s.spec.mean, s.spec.std, s.tc.eval_batch_size)
              if data.val_served is not None else logits[:0])
    both, both_labels = torch.cat([logits, served]), torch.cat([labels, labels[:len(served)]])
    t = cal.fit_temperature(both, both_labels)
    probs = cal.calibrated(both, t)
    in_app = cal.calibrated(served if len(served) else logits, t)
    reject = cal.fit_reject_threshold(in_app)
    record = {"temperature": round(t, 4), "reject_below": round(reject, 4),
              "fitted_on": f"validation split: {len(val):,} training images held out of training"
                           + (", each as stored and as the app lays it out" if len(served) else ""),
              "validation_ece_before": round(cal.ece(torch.softmax(both, 1), both_labels), 5),
              "validation_ece_after": round(cal.ece(probs, both_labels), 5),
              "validation_refused": round((in_app.max(1).values < reject).float().mean().item(), 5)}
    if data.held_out is not None:
        neg = cal.calibrated(predict_logits(m, data.held_out, s.spec.mean, s.spec.std,
                                            s.tc.eval_batch_size), t)
        record["held_out_negatives_flagged"] = round((neg.max(1).values < reject).float().mean().item(), 5)
    return Validation(loss, acc, record)


def end_epoch(s: Session, run: RunState, test_split: Split, totals: EpochTotals, out: Path,
              say: Callable) -> dict:
    """Validate, test, record, save. The epoch's metrics row goes into run.metrics; rank 0 writes
    the checkpoint (the folder: the latest epoch, what the app loads; best/: the best validation
    accuracy so far — chosen on held-out training images, never on the test set), metrics.csv
    (from run.metrics, whole: a replayed epoch never duplicates a row) and curves.png."""
    epoch = run.step // s.plan.steps_per_epoch            # 1-based: the epoch just finished
    v = validate(s)
    test_loss, test_acc = test_pass(s, test_split)
    seen = max(totals.seen, 1)
    row = {"epoch": epoch, "step": run.step, "lr": f"{s.opt.param_groups[0]['lr']:.3g}",
           "train_loss": f"{totals.loss_sum / seen:.5f}", "train_acc": f"{totals.correct / seen:.5f}",
           "val_loss": f"{v.loss:.5f}" if v else "", "val_acc": f"{v.accuracy:.5f}" if v else "",
           "test_loss": f"{test_loss:.5f}", "test_acc": f"{test_acc:.5f}",
           "epoch_seconds": f"{totals.seconds:.1f}",
           "images_per_second": f"{totals.seen / max(totals.seconds, 1e-9):.0f}"}
    run.metrics.append(row)
    say(f"epoch {epoch}: test accuracy {100 * test_acc:.2f}% (loss {test_loss:.4f})"
        + (f"; validation accuracy {100 * v.accuracy:.2f}%, temperature "
           f"{v.calibration['temperature']:.2f}" if v else ""), flush=True)
    check_in_sync(s)
    if s.d.main:
        meta = checkpoint_meta(s, run, test_acc, epoch)
        if v:
            meta["calibration"] = v.calibration
        save_checkpoint(out, s.eval_model, meta)
        if v and v.accuracy > run.best_acc:
            save_checkpoint(out / "best", s.eval_model, meta)
        write_metrics(out / "metrics.csv", run.metrics)
        plot_curves(run.metrics, out / "curves.png")
        if (out / SET_ASIDE).is_dir():        # this run now has a checkpoint of its own
            shutil.rmtree(out / SET_ASIDE, ignore_errors=True)
    if v:
        run.best_acc = max(run.best_acc, v.accuracy)
    return row


def checkpoint_meta(s: Session, run: RunState, test_acc: float, epoch: int) -> dict:
    """config.json's contents besides the model: data set, classes, normalisation (per-channel
    lists), the recipe and where the weights came from."""
    commits = run.commits
    return {"dataset": s.spec.name, "class_names": list(s.spec.class_names),
            "normalization": {"mean": list(s.spec.mean), "std": list(s.spec.std)},
            "test_accuracy": test_acc,
            "training": {k: v for k, v in asdict(s.tc).items()
                         if k not in RUNTIME_FIELDS or k == "eval_batch_size"},
            "provenance": {"command": run.command, "commit": commits[0],
                           **({"resumed_with_commits": commits[1:]} if len(commits) > 1 else {}),
                           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                           "epochs": epoch, "seed": s.tc.seed,
                           "wall_time_seconds": round(run.wall_seconds, 1),
                           "device": _devices(run.devices),
                           "torch": torch.__version__}}


def _devices(entries: list[str]) -> str:
    """"cuda (…)" for a run that ran on one device; "cuda (…) from epoch 1, then cpu (2 threads)
    from epoch 23" for one resumed elsewhere."""
    if len(entries) == 1:
        return entries[0].rsplit(" from epoch ", 1)[0]
    return ", then ".join(entries)


def check_in_sync(s: Session) -> str:
    """Data-parallel ranks must hold bit-identical weights; saving one of two diverged copies
    would hide a bug, so stop instead. Returns the weights' digest ('' for one process)."""
    if not s.d.enabled:
        return ""
    same, digest = distributed.digests_agree(s.d, s.model, s.device)
    if same and s.ema_model is not None:      # the digest printed is the saved model's
        same, digest = distributed.digests_agree(s.d, s.ema_model, s.device)
    if not same:
        raise TrainingError("the processes' weights differ: data-parallel training went out of sync")
    return digest


# --- a whole run ------------------------------------------------------------------------------
def data_digest(split: Split) -> str:
    """SHA-256 of a split's images and labels, bit for bit (~0.3 s for CIFAR-10's 150 MB)."""
    h = hashlib.sha256()
    for t in (split.images, split.labels):
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def start_or_resume(s: Session, saved: SavedState | None, argv: list[str] | None, out: Path,
                    say: Callable, digest: str) -> RunState:
    """The run to continue: the saved one, loaded into the model and optimiser, or a new one.
    `digest`: the training data's (data_digest), which a resumed run must have trained on."""
    if saved is not None:
        run = saved.run
        if run.train_images != len(s.train_split):
            raise TrainingError(f"--resume: the run in {out} trained on {run.train_images:,} "
                                f"images, --data-dir {s.tc.data_dir} has {len(s.train_split):,}: "
                                f"point --data-dir at the same data, or start afresh with "
                                f"--overwrite")
        if run.data_digest and run.data_digest != digest:      # (states before it had none)
            raise TrainingError(f"--resume: the training images in --data-dir {s.tc.data_dir} are "
                                f"not the ones the run in {out} started on (same number, other "
                                f"pictures or labels): point --data-dir at that data, or start "
                                f"afresh with --overwrite")
        if run.step > s.plan.total_steps:
            raise TrainingError(f"can't resume: the saved state is at step {run.step}, past the "
                                f"run's {s.plan.total_steps} steps (the state file is damaged)")
        run.data_digest = run.data_digest or digest
        restore(saved, s.model, s.opt, s.ema_model)
        say(f"Resuming {out} at step {run.step} of {s.plan.total_steps}", flush=True)
    else:
        run = RunState(command=distributed.launch_command(s.d) + " "
                       + shlex.join(sys.argv[1:] if argv is None else argv),
                       train_images=len(s.train_split), data_digest=digest)
        distributed.barrier(s.d)              # every rank has run preflight before rank 0 writes
        if s.d.main and s.tc.overwrite:
            moved = set_aside_run_files(out)
            if moved:
                say(f"--overwrite: moved the previous run's {', '.join(moved)} to "
                    f"{out / SET_ASIDE} (deleted when this run saves its first epoch)",
                    file=sys.stderr, flush=True)
    run.config = {"train": asdict(s.tc) | {"out": str(out)}, "model": s.model.cfg.to_dict()}
    # The code this process runs is the code at start-up: record that commit, not HEAD at save time.
    commit = git_commit()
    if commit not in run.commits:
        run.commits.append(commit)
    # A run started on a GPU and resumed on a CPU says so: "device" must not name the last alone.
    here = describe_device(s.device) + (f" × {s.d.world} processes" if s.d.enabled else "")
    if not run.devices or not run.devices[-1].startswith(here + " from epoch"):
        run.devices.append(f"{here} from epoch {run.step // s.plan.steps_per_epoch + 1}")
    return run


def train(tc: TrainConfig, mc: ViTConfig, argv: list[str] | None = None,
          should_stop: Callable[[], bool] = lambda: False) -> dict:
    """Run or resume training; returns the last epoch's metrics row, or {"stopped": True,
    "reason": "interrupted" | "max_steps", "step": N}. Raises TrainingError, DataError,
    CheckpointError or OSError, each with a one-line message. Under torchrun every process calls
    this; they train one model together (vit/distributed.py). `should_stop()` true (e.g. after
    Ctrl-C) ends the run after the current step with a resumable state."""
    if tc.dataset == FOLDER:
        problem = folder_size_problem(mc.image_size)
        if problem:
            raise TrainingError(problem)
        describe_folder(tc.data_dir, mc.image_size)
    problems = config_problems(tc, mc)
    if problems:
        raise TrainingError(problems[0])
    tc = replace(tc, out=tc.out or f"checkpoints/{tc.dataset}")
    try:
        device = pick_device(tc.device)
    except ValueError as e:
        raise TrainingError(str(e)) from None
    d = distributed.from_environment()
    problem = memory_problem(tc, mc, device, d.world, local_processes(d, device))
    if problem:
        raise TrainingError(problem)
    check_writable(Path(tc.out))
    with exclusive(Path(tc.out), d.main):
        saved = preflight(tc, mc)
        device = distributed.setup(d, device, tc.dist_timeout)
        try:
            result = _train(tc, mc, argv, d, device, saved, should_stop)
        except (RuntimeError, MemoryError) as e:
            if d.enabled and distributed.is_stall(e):
                raise TrainingError(distributed.stall_message(d, tc.dist_timeout)) from None
            if is_out_of_memory(e):
                # --eval-batch-size may change on --resume; the batch size and model may not.
                resumable = (Path(tc.out) / STATE_FILE).is_file()
                raise TrainingError(
                    f"out of memory on the {device.type}: "
                    + (f"--resume with a smaller --eval-batch-size (now {tc.eval_batch_size}), "
                       f"or start afresh (--overwrite) " if resumable else "run again ")
                    + f"with a smaller --batch-size (now {tc.batch_size}) or model") from None
            raise
        distributed.teardown(d)
        return result


def local_processes(d: distributed.Dist, device: torch.device) -> int:
    """How many of the job's processes share this process's memory: its machine's, on CPUs."""
    if device.type != "cpu" or not d.enabled:
        return 1
    return int(os.environ.get("LOCAL_WORLD_SIZE", d.world))


def folder_size_problem(image_size: int) -> str | None:
    """`--dataset folder` decodes every picture at --image-size before any other check can run."""
    limit = MODEL_FLAG_LIMITS["image_size"]
    if not 1 <= image_size <= limit:
        return f"--image-size must be between 1 and {limit:,} for --dataset folder"
    return None


def describe_folder(data_dir, image_size: int) -> DatasetSpec:
    """`--dataset folder`: read the folder's classes and normalisation (vit.datasets.use_folder)."""
    from .imagefolder import FolderError
    try:
        return use_folder(data_dir, image_size)
    except (FolderError, OSError) as e:
        raise DataError(str(e)) from None


@contextlib.contextmanager
def exclusive(out: Path, main: bool):
    """Hold a lock on `out` for the whole run: two trainers writing one folder would leave the
    weights of one beside the best/ and state of the other. (POSIX flock; released even if the
    process is killed. Only the main process locks; on Windows there is no lock.)"""
    try:
        import fcntl
    except ImportError:                       # pragma: no cover - Windows
        fcntl = None
    if not main or fcntl is None:
        yield
        return
    fd = os.open(out, os.O_RDONLY)            # the folder itself: no lock file left behind
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TrainingError(f"another trainer is writing to {out}: wait for it to finish, "
                                f"or choose another --out") from None
        yield
    finally:
        os.close(fd)                          # closing releases the lock


def _train(tc: TrainConfig, mc: ViTConfig, argv, d: distributed.Dist, device: torch.device,
           saved: SavedState | None, should_stop: Callable[[], bool]) -> dict:
    say = print if d.main else (lambda *a, **k: None)    # one voice, one writer: rank 0
    if tc.threads:
        torch.set_num_threads(tc.threads)
    out = Path(tc.out)
    full_train = load_split(tc.dataset, tc.data_dir, True, tc.download)
    test_split = load_split(tc.dataset, tc.data_dir, False, tc.download)
    train_split, data = prepare_data(tc, get_spec(tc.dataset), full_train, say)
    digest = data_digest(full_train)
    if device.type == "cuda":       # a few hundred MB at most: batches are then cut on the GPU
        train_split = replace(train_split, images=train_split.images.to(device),
                              labels=train_split.labels.to(device))
        data = replace(data, served=_to(data.served, device), negatives=_to(data.negatives, device))
    s = new_session(tc, mc, train_split, d, device, data, fresh=saved is None)
    run = start_or_resume(s, saved, argv, out, say, digest)  # (--overwrite sets old files aside)
    if saved is None and d.main:
        # A resumable state before any checkpoint file exists: a kill at any later moment (even
        # between the first epoch's checkpoint and its state) leaves a run --resume continues.
        save_state(out / STATE_FILE, s.model, s.opt, run, s.ema_model)
    if tc.distill:
        s.teacher = get_teacher(s, out, say, resuming=saved is not None)
    stop_at = run.step + tc.max_steps if tc.max_steps else None
    t_call, wall0 = time.time(), run.wall_seconds
    last_row = None
    while run.step < s.plan.total_steps:
        reason, totals = train_epoch(s, run, stop_at, should_stop)
        run.wall_seconds = wall0 + time.time() - t_call
        if run.step % s.plan.steps_per_epoch == 0:
            last_row = end_epoch(s, run, test_split, totals, out, say)
            run.partial = EpochTotals()
            run.wall_seconds = wall0 + time.time() - t_call
        else:
            run.partial = totals
        if d.main:
            save_state(out / STATE_FILE, s.model, s.opt, run, s.ema_model)
        distributed.barrier(d)                    # nobody runs ahead of a half-written state
        if reason and run.step < s.plan.total_steps:
            again = shlex.join(w for w in shlex.split(run.command) if w != "--overwrite")
            say(f"Stopped at step {run.step} of {s.plan.total_steps} "
                f"(epoch {run.step // s.plan.steps_per_epoch + 1}); continue with:\n"
                f"  {again} --resume", file=sys.stderr, flush=True)
            return {"stopped": True, "reason": reason, "step": run.step}
    if d.enabled:
        digest = check_in_sync(s)
        say(f"Weights identical on all {d.world} processes (sha256 {digest[:16]})", flush=True)
    say(f"Done in {run.wall_seconds / 60:.1f} min: {out}", flush=True)
    return last_row or {"step": run.step}


def get_teacher(s: Session, out: Path, say: Callable, resuming: bool) -> torch.nn.Module:
    """The CNN to distil from: when resuming, the one this run trained before (in its state
    folder); else a new one trained now on the run's own batches (DeiT's recipe: teacher first,
    then the student) — a teacher file left by a run that never saved a state may come from
    other settings or another data set, so a fresh run never reads it.
    Under torchrun every process trains it on the whole global batch, alone: its batch norms
    then see what one process would see, and every process holds the same teacher (a DDP-trained
    one kept per-process batch statistics, so the processes distilled from different teachers)."""
    from .checkpoint import CheckpointError, load_tensors
    torch.manual_seed(mix_seed(s.tc.seed, STREAM_TEACHER))
    teacher = Teacher(s.spec.channels, s.spec.num_classes, s.tc.teacher_width).to(s.device)
    path = out / TEACHER_FILE
    if resuming and path.is_file():
        try:
            teacher.load_state_dict(load_tensors(path))
        except (CheckpointError, RuntimeError) as e:
            raise TrainingError(f"can't resume: {path} is damaged ({' '.join(str(e).split())[:200]})"
                                ) from None
        return teacher.eval().requires_grad_(False)
    alone = replace(s, d=distributed.Dist())      # batches: the whole global batch
    opt = torch.optim.AdamW(teacher.parameters(), lr=2e-3, weight_decay=5e-4)
    plan = replace(s.plan, total_steps=s.tc.teacher_epochs * s.plan.steps_per_epoch,
                   warmup_steps=s.plan.steps_per_epoch // 2)
    t0 = time.time()
    for step in range(plan.total_steps):
        epoch, i = divmod(step, plan.steps_per_epoch)
        if i == 0:
            order = torch.randperm(len(s.train_split),
                                   generator=_generator(s.tc.seed, STREAM_TEACHER, epoch))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, plan, replace(s.tc, lr=2e-3, min_lr=1e-5))
        batch = make_batch(alone, order, step)
        with _autocast(s.device):
            logits = teacher(batch.x[:len(batch.y)])
            loss = F.cross_entropy(logits.float(), batch.y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    teacher.eval().requires_grad_(False)
    v = s.data.val if s.data is not None and s.data.val is not None else None
    if v is not None:
        _, acc, _ = evaluate(teacher, v.images, v.labels, s.spec.mean, s.spec.std,
                             s.tc.eval_batch_size)
        say(f"Teacher CNN: {s.tc.teacher_epochs} epochs in {time.time() - t0:.0f} s, validation "
            f"accuracy {100 * acc:.2f}%", flush=True)
    if s.d.main:
        save_tensors(path, teacher.state_dict())
    return teacher


def _to(t: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if t is None else t.to(device)


# --- records ----------------------------------------------------------------------------------
def write_metrics(path: Path, rows: list[dict]) -> None:
    """metrics.csv, all rows, replacing the file atomically."""
    def write(tmp):
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=METRIC_FIELDS)
            w.writeheader()
            w.writerows(rows)
    atomic_write(path, write)


def read_metrics(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_curves(rows: list[dict], path: Path) -> None:
    """Loss and accuracy per epoch, as a PNG (matplotlib's object API: no pyplot state)."""
    from matplotlib.figure import Figure
    ep = [int(r["epoch"]) for r in rows]
    fig = Figure(figsize=(9, 3.5), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(ep, [float(r["train_loss"]) for r in rows], "o-", label="train")
    ax1.plot(ep, [float(r["test_loss"]) for r in rows], "o-", label="test")
    ax1.set(xlabel="epoch", ylabel="loss", title="Loss")
    ax2.plot(ep, [100 * float(r["train_acc"]) for r in rows], "o-", label="train (augmented)")
    ax2.plot(ep, [100 * float(r["test_acc"]) for r in rows], "o-", label="test")
    ax2.set(xlabel="epoch", ylabel="accuracy (%)", title="Accuracy")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))


def git_commit() -> str:
    """HEAD's hash, with '-dirty' when tracked files differ from it ('unknown' outside git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "vit"],
                               cwd=root, capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        n = torch.get_num_threads()
        return f"cpu ({n} thread{'' if n == 1 else 's'})"
    return device.type
