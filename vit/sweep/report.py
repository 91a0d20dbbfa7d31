"""A sweep's table and plots, read back from its runs' checkpoint folders: `results.csv` (one row
per run) and `accuracy-vs-SETTING.png` for each varied setting plus `accuracy-vs-time.png`."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from vit.sweep.grid import Run
from vit.sweep.runs import Plan, finished

COLUMNS = ["parameters", "train_seconds", "wall_seconds", "test_accuracy", "checkpoint"]


def row(plan: Plan, run: Run) -> dict | None:
    """A finished run's figures from its config.json and metrics.csv; None for a run that has not
    trained all its epochs (config.json is written after every epoch) or whose files can't be
    read."""
    folder = plan.folder(run)
    if not finished(plan, run):
        return None
    try:
        cfg = json.loads((folder / "config.json").read_text())
        epochs = list(csv.DictReader(open(folder / "metrics.csv")))
        return {**run.settings,
                "parameters": cfg["num_parameters"],
                # The epochs' own seconds (steps only), and the whole invocation's (data, teacher,
                # evaluation included; a resumed run's counts the last invocation).
                "train_seconds": round(sum(float(r["epoch_seconds"]) for r in epochs), 1),
                "wall_seconds": cfg["provenance"]["wall_time_seconds"],
                "test_accuracy": cfg["test_accuracy"],
                "checkpoint": run.name}
    except (OSError, ValueError, KeyError, TypeError):
        return None
def write_table(plan: Plan, runs: list[Run], keys: list[str]) -> list[dict]:
    rows = [r for r in (row(plan, run) for run in runs) if r is not None]
    with open(plan.out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*keys, *COLUMNS])
        w.writeheader()
        w.writerows(rows)
    return rows


def _label(r: dict, keys: list[str]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {r[k]}" for k in keys) or "all"


MIN_SPAN = 10.0       # percentage points: the accuracy axis never zooms in closer than this


def _honest_axis(ax) -> None:
    """An accuracy axis at least MIN_SPAN points tall: a zoomed axis turns a difference of a point,
    within one seed's noise, into a cliff."""
    lo, hi = ax.get_ylim()
    if hi - lo < MIN_SPAN:
        mid = (lo + hi) / 2
        lo = min(max(0.0, mid - MIN_SPAN / 2), 100.0 - MIN_SPAN)
        ax.set_ylim(lo, lo + MIN_SPAN)


def write_plots(plan: Plan, rows: list[dict], vary: dict[str, list], title: str) -> list[Path]:
    """Accuracy against each varied setting (a line per combination of the others) and against
    training time (a point per run, labelled). When `seed` is varied, it is not a setting to plot
    against: each line is the mean over the seeds, with a bar from the lowest to the highest.
    Returns the files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    keys = list(vary)
    seeds = "seed" in vary and len(vary["seed"]) > 1
    for key in (k for k in keys if not (seeds and k == "seed")):
        others = [k for k in keys if k != key and not (seeds and k == "seed")]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vary[key])
        position = {v: (v if numeric else i) for i, v in enumerate(vary[key])}
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        groups: dict[tuple, dict] = {}
        for r in rows:
            groups.setdefault(tuple(r[k] for k in others), {}).setdefault(r[key], []).append(
                100 * r["test_accuracy"])
        for group, by_value in groups.items():
            xs = sorted(by_value, key=lambda v: position[v])
            means = [float(np.mean(by_value[v])) for v in xs]
            label = _label(dict(zip(others, group)), others)
            if seeds:
                low = [m - min(by_value[v]) for m, v in zip(means, xs)]
                high = [max(by_value[v]) - m for m, v in zip(means, xs)]
                ax.errorbar([position[v] for v in xs], means, yerr=[low, high], marker="o",
                            capsize=4, label=f"{label} (mean of {len(vary['seed'])} seeds, range)")
            else:
                ax.plot([position[v] for v in xs], means, marker="o", label=label)
        if numeric and len(vary[key]) > 2 and min(vary[key]) > 0 and max(vary[key]) / min(vary[key]) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(list(position.values()), [str(v) for v in vary[key]])
        ax.set_xlabel(key.replace("_", " "))
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{title}: accuracy against {key.replace('_', ' ')}", fontsize=10)
        ax.grid(alpha=0.3)
        _honest_axis(ax)
        if others or seeds:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = plan.out / f"accuracy-vs-{key.replace('_', '-')}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    ax.scatter([r["train_seconds"] for r in rows], [100 * r["test_accuracy"] for r in rows])
    for r in rows:
        ax.annotate(_label(r, keys), (r["train_seconds"], 100 * r["test_accuracy"]), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel("training time (s, the epochs' steps)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{title}: accuracy against training time", fontsize=10)
    ax.grid(alpha=0.3)
    _honest_axis(ax)
    fig.tight_layout()
    path = plan.out / "accuracy-vs-time.png"
    fig.savefig(path)
    plt.close(fig)
    return [*written, path]
