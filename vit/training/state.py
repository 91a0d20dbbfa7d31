"""What --resume needs, in one file written atomically (`save_state`), and the checks before a
run starts (`preflight`: --out is writable, holds no run unless asked, and --resume's run was
started with these settings).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from vit.data.loading import Split
from vit.model import ViT, ViTConfig
from vit.storage import save_tensors
from vit.training.config import LATER_TRAIN_KEYS, RUNTIME_FIELDS, TrainConfig, TrainingError, flag_text
from vit.training.snapshots import FOLDER as SNAPSHOTS

STATE_FILE = Path("train_state") / "state.safetensors"
TEACHER_FILE = Path("train_state") / "teacher.safetensors"   # the CNN a --distill run learns from
OLD_STATE_JSON = Path("train_state") / "state.json"     # the two-file form of earlier versions
STATE_FORMAT = "vit-explorer-train-state/2"
FINISHED_FILES = ("config.json", "model.safetensors", "metrics.csv")

# What --overwrite sets aside: the files a run writes, by name (never a whole folder).
RUN_FILES = ("config.json", "model.safetensors", "metrics.csv", "curves.png",
             "best/config.json", "best/model.safetensors", str(STATE_FILE), str(OLD_STATE_JSON),
             str(TEACHER_FILE))


SET_ASIDE = ".replaced-by-overwrite"   # where --overwrite keeps the old run until a new epoch

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
    # The same code by content (records.source_tree), one entry per version: what identifies it
    # where .git is missing or older than the files (a GPU machine's copy of a working tree).
    sources: list[str] = field(default_factory=list)
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
        for name in ("commits", "sources", "devices"):
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
    if (out / SNAPSHOTS).is_dir():              # a folder of them, named by step
        if (out / SET_ASIDE / SNAPSHOTS).exists():
            shutil.rmtree(out / SNAPSHOTS)
        else:
            (out / SET_ASIDE).mkdir(exist_ok=True)
            os.replace(out / SNAPSHOTS, out / SET_ASIDE / SNAPSHOTS)
        moved.append(SNAPSHOTS)
    for sub in ("best", "train_state"):
        with contextlib.suppress(OSError):      # only if nothing else is in it
            (out / sub).rmdir()
    return moved


# --- a whole run ------------------------------------------------------------------------------
def data_digest(split: Split) -> str:
    """SHA-256 of a split's images and labels, bit for bit (~0.3 s for CIFAR-10's 150 MB)."""
    h = hashlib.sha256()
    for t in (split.images, split.labels):
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


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
