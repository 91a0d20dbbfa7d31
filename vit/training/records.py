"""What a run writes beside its checkpoint for people: metrics.csv, curves.png, and the
provenance (command, commit, device) in config.json.
"""
from __future__ import annotations

import csv
import datetime as dt
import subprocess
from dataclasses import asdict
from pathlib import Path

import torch

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
