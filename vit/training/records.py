"""What a run writes beside its checkpoint for people: metrics.csv, curves.png, and the
provenance (command, commit, device) in config.json.
"""
from __future__ import annotations

import csv
import datetime as dt
import fnmatch
import hashlib
import re
import subprocess
from dataclasses import asdict
from pathlib import Path

import torch

from vit.settings import Settings
from vit.storage import atomic_write
from vit.training.config import RUNTIME_FIELDS
from vit.training.session import Session
from vit.training.state import RunState

METRIC_FIELDS = ["epoch", "step", "lr", "train_loss", "train_acc", "val_loss", "val_acc",
                 "test_loss", "test_acc", "epoch_seconds", "images_per_second"]


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
                           **({"source_trees": run.sources} if run.sources else {}),
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


# --- records ----------------------------------------------------------------------------------
def write_metrics(path: Path, rows: list[dict]) -> None:
    """metrics.csv, all rows, replacing the file atomically."""
    def write(tmp):
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=METRIC_FIELDS)
            w.writeheader()
            w.writerows(rows)
    atomic_write(path, write)


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


# The project's folder, which holds vit/. (Once vit/ itself, where `git status -- vit` found no
# vit/vit and called every run clean: two runs of a changed trainer were stamped with the commit
# before the change.)
PROJECT = Path(__file__).resolve().parents[2]


def git_commit(root: Path | None = None) -> str:
    """The commit whose code runs: $VIT_COMMIT when the command names it (a GPU machine's copy
    of the working tree may carry a .git older than its files, whose HEAD would be wrong), else
    HEAD's hash with '-dirty' when vit/ differs from it ('unknown' outside git). `root`: the
    project's folder, which holds vit/ (default: this file's)."""
    named = Settings.read("commit")
    if named:
        if not re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", named):
            raise ValueError(f"VIT_COMMIT must be a commit's hex hash, not {named[:60]!r}")
        return named
    root = root or PROJECT
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "vit"],
                               cwd=root, capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def source_tree(folder: Path | None = None) -> str:
    """The git tree hash of the vit/ package as it is on disk, computed without git: equal to
    `git rev-parse COMMIT:vit` for the commit that holds exactly this code, whatever .git (if
    any) the machine has. What .gitignore leaves out of vit/ is left out (UNTRACKED)."""
    folder = folder or Path(__file__).resolve().parent.parent
    entries = []
    for path in folder.iterdir():
        if _untracked(path):
            continue
        if path.is_dir():
            if not any(p.is_file() and not _untracked(p) for p in path.rglob("*")):
                continue                          # git keeps no empty folder
            mode, digest, key = b"40000", bytes.fromhex(source_tree(path)), path.name + "/"
        else:
            data = path.read_bytes()
            mode = b"100755" if path.stat().st_mode & 0o100 else b"100644"
            digest, key = _git_hash(b"blob", data), path.name
        entries.append((key, mode + b" " + path.name.encode() + b"\0" + digest))
    return _git_hash(b"tree", b"".join(e for _, e in sorted(entries))).hex()


UNTRACKED = ("__pycache__", "*.pyc", "*.pyi", "*.tmp")      # .gitignore's patterns that meet vit/


def _untracked(path: Path) -> bool:
    return path.is_symlink() or any(fnmatch.fnmatch(path.name, p) for p in UNTRACKED)


def _git_hash(kind: bytes, data: bytes) -> bytes:
    return hashlib.sha1(kind + b" %d\0" % len(data) + data).digest()


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        n = torch.get_num_threads()
        return f"cpu ({n} thread{'' if n == 1 else 's'})"
    return device.type
