"""What a run is asked to do: `TrainConfig` (the trainer's flags), and every check that the
flags make sense and fit in memory before anything is allocated.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch

from vit.checkpoint import CheckpointError, check_model_size
from vit.data.loading import DEFAULT_DATA_DIR
from vit.data.specs import FOLDER, SPECS, DatasetSpec, builtin_spec
from vit.model import ViTConfig
from vit.training import distributed

MAX_SEED = 2**63 - 1                  # torch.manual_seed overflows beyond what fits an int64
MAX_LR = 1e6                          # far past any useful rate; 1e308 overflows AdamW's float

# TrainConfig fields that say where and how a run executes, not what it computes: --resume may
# change them.
RUNTIME_FIELDS = frozenset({"device", "threads", "max_steps", "eval_batch_size", "data_dir",
                            "download", "out", "resume", "overwrite", "dist_timeout", "cache_dir",
                            "compile", "snapshots"})


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
LATER_TRAIN_KEYS = {"teacher_width": 32, "erase": 0.0, "degrade": 0.0, "norm_eps": 1e-5, "policy": "none",
                    "init": "", "subset": 0, "filled": 0.0, "stretch": 0.0,
                    "thicken": 0.0, "coarse": 0.0}


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
    subset: int = field(default=0, metadata={
        "help": "train on only this many of the training images (after the validation split is "
                "held out): the same draw for every seed and run, for quick experiments such as "
                "python -m vit.sweep; test accuracy is still on the whole test set (0 = all)"})
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
    outliers: str = field(default="", metadata={
        "help": "the kinds of those drawings, comma-separated, of: scribble, dots, dash, shape, "
                "letter, two digits, digit (pen-drawn), handwritten digit (MNIST's, from "
                "--data-dir), photo (CIFAR-10's training photos, from --data-dir); default: the "
                "data set's own (a clothing model's: scribble, shape, letter, digit)"})
    oe_weight: float = field(default=0.25, metadata={
        "help": "weight of the flat-answer loss on those drawings (outlier exposure)"})
    distill: float = field(default=0.5, metadata={
        "help": "weight of soft distillation from a small CNN trained first (vit/training/teacher.py); "
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
        "help": "start from this checkpoint folder's weights (fine-tuning): its architecture, its "
                "head if it has this data set's classes (else a new one), position embeddings "
                "resized when --image-size changes the grid"})
    degrade: float = field(default=0.0, metadata={
        "help": "probability that a training image is degraded as uploads are: shrunk to 7 px "
                "up to half its size and enlarged back, few grey levels, blur, contrast, noise "
                "(vit/data/degrade.py; 0 = off)"})
    stretch: float = field(default=0.0, metadata={
        "help": "with the affine augmentation: make each training image up to 1 + STRETCH times "
                "wider and shorter, or narrower and taller, its area kept, as writers whose "
                "digits were normalised to a square send them (0 = off)"})
    thicken: float = field(default=0.0, metadata={
        "help": "probability that a training digit is shown written with a thicker pen, every "
                "stroke widened by a pixel each side (vit/data/thicken.py; 0 = off)"})
    coarse: float = field(default=0.0, metadata={
        "help": "probability that a training digit is shown as a form reader stores it: its box "
                "scaled to full height and half to four fifths of that wide, 8x8 cells of 17 grey "
                "levels, enlarged and laid out as an upload (vit/data/coarse.py; 0 = off)"})
    filled: float = field(default=0.0, metadata={
        "help": "probability that a training image is shown as a flat silhouette, as a garment "
                "drawn and filled on the page is (vit/data/filled.py; 0 = off)"})
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
    snapshots: str = field(default="0.01,0.1,0.5", metadata={
        "help": "keep the weights after these fractions of the run's steps in OUT/snapshots/ "
                "(float16, half a checkpoint each), so the app can show how attention and the "
                "answer changed during training; none = keep none"})
    compile: str = field(default="none", metadata={
        "help": "torch.compile the model for training: default = fuse its small operations into "
                "fewer kernels; reduce-overhead = also replay each step as a CUDA graph (on a GPU, "
                "where a small model's step waits on kernel launches); none = eager. Costs a "
                "compile at the start", "choices": ["none", "default", "reduce-overhead"]})
    resume: bool = field(default=False, metadata={
        "help": "continue the interrupted or finished run in --out exactly where it stopped"})
    max_steps: int = field(default=0, metadata={
        "help": "stop (resumably) after this many optimiser steps in this invocation; for tests"})
    dist_timeout: float = field(default=300.0, metadata={
        "help": "under torchrun: seconds a process waits for the others at a collective before "
                "the run stops, naming the process that fell behind"})
    cache_dir: str = field(default="", metadata={
        "help": "where the data laid out as the app would, the non-digit drawings and the CNN "
                "teacher are kept for the next run of the same data and settings (default: "
                "$VIT_CACHE_DIR, else ~/.cache/vit-explorer/runs; 'none': keep nothing)"})


def outlier_kinds(tc: TrainConfig, style) -> tuple[str, ...]:
    """The kinds of non-class drawings a run shows: --outliers, else its data set's style's."""
    return tuple(k.strip() for k in tc.outliers.split(",")) if tc.outliers.strip() else style.outliers


def _outliers_problem(spec: str) -> str | None:
    from vit.data.negatives import KINDS
    kinds = [k.strip() for k in spec.split(",")] if spec.strip() else []
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or len(spec) > 200:
        return f"--outliers takes kinds among: {', '.join(KINDS)} (comma-separated)"
    return None


def _snapshots_problem(spec: str) -> str | None:
    from vit.training import snapshots
    try:
        snapshots.parse(spec)
    except ValueError as e:
        return str(e)
    return None


def config_problems(tc: TrainConfig, mc: ViTConfig, spec: DatasetSpec | None = None) -> list[str]:
    """Every problem with the settings, one line each (empty: all fine). `spec`: the data set's
    (an image folder's, from `folder_spec`); a built-in data set's by default."""
    spec = spec or builtin_spec(tc.dataset)
    if spec is None:
        if tc.dataset == FOLDER:
            return ["--dataset folder: describe the folder first (vit.data.folders.folder_spec)"]
        return [f"unknown --dataset {tc.dataset!r}: choose one of {', '.join([*SPECS, FOLDER])}"]
    max_threads = 4 * (os.cpu_count() or 1)       # far past any speed-up; 100000 crashes OpenMP
    snapshots_problem = _snapshots_problem(tc.snapshots)
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
        (tc.subset >= 0, "--subset must be >= 0 (0 = every training image)"),
        (snapshots_problem is None, snapshots_problem or ""),
        (0 <= tc.serve_view <= 1, "--serve-view must be in [0, 1]"),
        (0 <= tc.negatives <= MAX_NEGATIVES, f"--negatives must be between 0 and {MAX_NEGATIVES:,}"),
        (_outliers_problem(tc.outliers) is None, _outliers_problem(tc.outliers) or ""),
        (math.isfinite(tc.oe_weight) and tc.oe_weight >= 0, "--oe-weight must be a finite number >= 0"),
        (0 <= tc.ema < 1, "--ema must be in [0, 1) (0 = off)"),
        (0 <= tc.distill <= 1, "--distill must be in [0, 1] (0 = off)"),
        (1 <= tc.teacher_epochs <= MAX_EPOCHS,
         f"--teacher-epochs must be between 1 and {MAX_EPOCHS:,}"),
        (1 <= tc.teacher_width <= 1024, "--teacher-width must be between 1 and 1024"),
        (0 <= tc.erase <= 1, "--erase must be in [0, 1] (0 = off)"),
        (0 <= tc.degrade <= 1, "--degrade must be in [0, 1] (0 = off)"),
        (0 <= tc.stretch <= 1, "--stretch must be in [0, 1] (0 = off)"),
        (0 <= tc.filled <= 1, "--filled must be in [0, 1] (0 = off)"),
        (0 <= tc.thicken <= 1, "--thicken must be in [0, 1] (0 = off)"),
        (0 <= tc.coarse <= 1, "--coarse must be in [0, 1] (0 = off)"),
        (not tc.coarse or spec.style.name == "digits",
         f"--coarse reads digits as a form reader stores them; {spec.name} is not digits"),
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
        from vit.data.folders import machine_memory
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
    from vit.checkpoint import implied_shapes
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


def flag_text(name: str, value) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


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
