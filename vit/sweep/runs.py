"""One run of a sweep: where it stands (finished, resumable, new), the trainer command that
continues it, and running that command with its output kept in the sweep's logs/ folder. Each run
is a plain `python -m vit.train` checkpoint folder, so the app opens it like any other."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vit.sweep.grid import Run
from vit.training.state import STATE_FILE

ROOT = Path(__file__).resolve().parents[2]
LOGS = "logs"


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


def command(plan: Plan, run: Run) -> list[str]:
    """The trainer command that starts or continues `run`: --resume where a resumable state is
    (an interrupted sweep), --overwrite where the folder holds only leftovers of a run that never
    saved."""
    folder = plan.folder(run)
    how = (["--resume"] if (folder / STATE_FILE).is_file()
           else ["--overwrite"] if folder.exists() else [])
    return [plan.python, "-m", "vit.train", *plan.base, *run.flags(), "--out", str(folder),
            "--threads", str(plan.threads), *how]


def execute(plan: Plan, run: Run) -> dict:
    """Train `run` to its end (nothing if finished). Returns {"name", "ok", "seconds", "said"}:
    `said` is the trainer's last error line when it failed."""
    if finished(plan, run):
        return {"name": run.name, "ok": True, "seconds": 0.0, "said": "finished before"}
    log = plan.log(run)
    log.parent.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(plan.threads)}
    t = time.monotonic()
    with open(log, "a") as f:
        f.write("$ " + " ".join(command(plan, run)[1:]) + "\n")
        f.flush()
        r = subprocess.run(command(plan, run), cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - t
    if r.returncode == 0 and finished(plan, run):
        return {"name": run.name, "ok": True, "seconds": seconds, "said": ""}
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("error:")]
    said = lines[-1] if lines else (f"stopped (exit status {r.returncode}); see {log}")
    return {"name": run.name, "ok": False, "seconds": seconds, "said": said}
