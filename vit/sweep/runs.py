"""One run of a sweep: where it stands (finished, resumable, new), the trainer command that
continues it, and running that command with its output kept in the sweep's logs/ folder. Each run
is a plain `python -m vit.train` checkpoint folder, so the app opens it like any other."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vit.storage import save_json
from vit.sweep.grid import Run
from vit.training.state import STATE_FILE

ROOT = Path(__file__).resolve().parents[2]
LOGS = "logs"
MARKER = ".vit-sweep-run.json"      # in a run's folder: the sweep started this run, with these settings
# A trained model's files: a folder that holds one is never --overwrite'n unless the sweep started it.
MODEL_FILES = ("config.json", "model.safetensors", "best/config.json", "best/model.safetensors",
               "metrics.csv")
# Trainer flags that name a file or folder: made absolute in the sweep's working folder.
PATH_FLAGS = ("--data-dir", "--init", "--cache-dir", "--out")


def absolute_paths(flags: list[str], cwd: Path | None = None) -> list[str]:
    """`flags` with every path a trainer flag names made absolute against `cwd` (the sweep's own
    working folder), so that where the trainers run changes nothing. A Hub model (hf://...),
    an empty value and --cache-dir none are left as they are."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    out, take = [], None

    def absolute(value: str) -> str:
        if not value or value == "none" or value.startswith("hf://"):
            return value
        return os.path.abspath(cwd / Path(value).expanduser())

    for flag in flags:
        if take:
            out.append(absolute(flag))
            take = None
            continue
        name, eq, value = flag.partition("=")
        if name in PATH_FLAGS and eq:
            out.append(f"{name}={absolute(value)}")
        else:
            out.append(flag)
            take = flag in PATH_FLAGS or None
    return out


@dataclass(frozen=True)
class Plan:
    """What every run of one sweep shares."""
    out: Path
    base: list[str]          # trainer flags every run gets (data set, epochs, subset, ...)
    epochs: int
    threads: int             # torch threads per run
    python: str = sys.executable

    def folder(self, run: Run) -> Path:
        return self.out / run.name

    def log(self, run: Run) -> Path:
        return self.out / LOGS / f"{run.name}.log"


def finished(plan: Plan, run: Run) -> bool:
    """Its checkpoint holds every epoch: config.json, written after each epoch, records the last
    one, and metrics.csv has a row for each."""
    folder = plan.folder(run)
    try:
        prov = json.loads((folder / "config.json").read_text())["provenance"]
        rows = list(csv.DictReader(open(folder / "metrics.csv")))
    except (OSError, ValueError, KeyError):
        return False
    epochs = run.settings.get("epochs", plan.epochs)          # --vary epochs=... is a setting too
    return prov.get("epochs") == epochs and len(rows) == epochs


def _marker(run: Run) -> dict:
    return json.loads(json.dumps({"run": run.name, "settings": run.settings}))


def started_here(plan: Plan, run: Run) -> bool:
    """Whether the sweep started the run in `run`'s folder, with these settings (its marker)."""
    try:
        return json.loads((plan.folder(run) / MARKER).read_text()) == _marker(run)
    except (OSError, ValueError):
        return False


def refusal(plan: Plan, run: Run) -> str | None:
    """Why the sweep must not touch `run`'s folder (one line), or None: it holds a model the
    sweep did not start, or started with other settings, and no resumable state (a finished
    checkpoint copied or trained there, or a run whose state was deleted). Starting afresh
    there would replace that model with this run's."""
    folder = plan.folder(run)
    if (folder / STATE_FILE).is_file() or started_here(plan, run):
        return None      # --resume (the trainer refuses other settings) or the sweep's own run
    held = [name for name in MODEL_FILES if (folder / name).is_file()]
    if not held:
        return None
    other = ("the sweep started with other settings" if (folder / MARKER).is_file()
             else "the sweep did not start")
    return (f"run {run.name}: {folder} holds a model {other} ({', '.join(held)}) and no "
            f"resumable state: move it away or choose another --out; the sweep replaces nothing "
            f"it did not train")


def command(plan: Plan, run: Run) -> list[str]:
    """The trainer command that starts or continues `run`: --resume where a resumable state is
    (an interrupted sweep), --overwrite where the folder holds only leftovers: of a run the
    sweep started with these settings, or no model at all (`refusal` says no to the rest). Every
    path in it is absolute."""
    folder = plan.folder(run)
    how = (["--resume"] if (folder / STATE_FILE).is_file()
           else ["--overwrite"] if folder.exists() and not refusal(plan, run) else [])
    return [plan.python, "-m", "vit.train", *absolute_paths([*plan.base, *run.flags()]),
            "--out", os.path.abspath(folder), "--threads", str(plan.threads), *how]


def execute(plan: Plan, run: Run) -> dict:
    """Train `run` to its end (nothing if finished). Returns {"name", "ok", "seconds", "said"}:
    `said` is the trainer's last error line when it failed."""
    problem = refusal(plan, run)
    if problem:
        return {"name": run.name, "ok": False, "seconds": 0.0, "said": problem}
    if finished(plan, run):
        return {"name": run.name, "ok": True, "seconds": 0.0, "said": "finished before"}
    cmd = command(plan, run)
    if not started_here(plan, run):      # before the trainer writes anything there
        save_json(plan.folder(run) / MARKER, _marker(run))
    log = plan.log(run)
    log.parent.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(plan.threads)}
    t = time.monotonic()
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd[1:]) + "\n")
        f.flush()
        # Every path in the command is absolute: the trainer may run anywhere (ROOT is on its
        # PYTHONPATH for `-m vit.train`); the sweep's folder is one that exists on every node.
        r = subprocess.run(cmd, cwd=plan.out, env=env, stdout=f,
                           stderr=subprocess.STDOUT)
    seconds = time.monotonic() - t
    if r.returncode == 0 and finished(plan, run):
        return {"name": run.name, "ok": True, "seconds": seconds, "said": ""}
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("error:")]
    said = lines[-1] if lines else (f"stopped (exit status {r.returncode}); see {log}")
    # A trainer stopped by Ctrl-C (130, or killed by SIGINT): the person stopped the sweep, which
    # the sweep must say whether the signal reached it or its trainer first.
    interrupted = r.returncode in (130, -signal.SIGINT)
    return {"name": run.name, "ok": False, "seconds": seconds, "said": said,
            "interrupted": interrupted}
