"""Train one model per combination of settings, then tabulate and plot them.

    python -m vit.sweep --data mnist --vary heads=1,2,4 dim=32,64 --epochs 1 --subset 2000 --out DIR

Every run is a normal checkpoint folder, DIR/<setting-value_...>/, that `python app.py
--checkpoints DIR` opens. DIR/results.csv has one row per run (the varied settings, parameters,
training time, test accuracy on the whole test set, the run's folder), and DIR/*.png plot the
accuracy against each varied setting and against training time. Flags after `--` go to every
run's `python -m vit.train` (e.g. `-- --distill 0 --negatives 0`). Run the same command again
after a stop: finished runs are kept, interrupted ones resume where they stopped.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from vit.data.specs import SPECS
from vit.storage import out_problem
from vit.sweep import backends, grid, report
from vit.sweep.runs import Plan, absolute_paths, refusal
from vit.training.config import FOLDER

RECORD = "sweep.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vit.sweep", description=__doc__.split("\n\n")[0],
                                epilog="Flags after -- go to every run's trainer.")
    p.add_argument("--data", default="mnist", choices=[*SPECS, FOLDER], help="the data set")
    p.add_argument("--data-dir", default="data", help="where it is (as for vit.train)")
    p.add_argument("--download", action=argparse.BooleanOptionalAction, default=True,
                   help="download the data set if it is missing")
    p.add_argument("--vary", nargs="+", required=True, metavar="SETTING=V1,V2",
                   help="trainer settings to vary, e.g. heads=1,2,4 dim=32,64 patch-size=2,4")
    p.add_argument("--epochs", type=int, default=1, help="epochs per run")
    p.add_argument("--subset", type=int, default=0,
                   help="train each run on this many training images (0 = all); tested on all")
    p.add_argument("--out", required=True, help="the sweep's folder")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--jobs", type=int, default=0,
                   help="runs at once (default: the CPU cores divided by --threads)")
    p.add_argument("--backend", choices=backends.BACKENDS, default="processes",
                   help="processes: on this machine; ray: Ray tasks (pip install ray)")
    p.add_argument("--ray-address", default=None,
                   help="a Ray cluster's address (default: start a local Ray instance)")
    return p


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the sweep's own flags, the flags after -- for every trainer)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def check_record(out: Path, record: dict) -> str | None:
    """Why `out` can't take this sweep (it holds one with other shared settings), or None."""
    path = out / RECORD
    if not path.is_file():
        return None
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return None
    changed = [k for k in ("data", "epochs", "subset", "trainer_flags") if old.get(k) != record[k]]
    if changed:
        return (f"{out} holds a sweep with other {', '.join(changed)} "
                f"({', '.join(f'{k}: {old.get(k)}' for k in changed)}): use another --out")
    return None


def plan_sweep(argv: list[str]) -> tuple[argparse.Namespace, Plan, list[grid.Run], dict, dict]:
    """The sweep's flags -> (its arguments, the plan, the runs, the settings varied, the record
    for sweep.json), every check done: a bad flag, a bad --vary, an --out that is refused or
    holds another sweep or a model the sweep did not start exit with one line (status 2) before
    anything is written or trained. Every path in the plan is absolute, in this working folder."""
    own, trainer_flags = split_argv(argv)
    parser = build_parser()
    args = parser.parse_args(own)
    if args.epochs < 1 or args.subset < 0 or args.threads < 1 or args.jobs < 0:
        parser.error("--epochs and --threads must be at least 1; --subset and --jobs at least 0")
    problem = out_problem(args.out)       # not the app's folder of models, /, or home itself
    if problem:
        parser.error(problem)
    out = Path(os.path.abspath(args.out))
    base = absolute_paths(
        ["--dataset", args.data, "--data-dir", args.data_dir, "--epochs", str(args.epochs),
         "--subset", str(args.subset), "--download" if args.download else "--no-download",
         *trainer_flags])
    try:
        vary = grid.parse_vary(args.vary)
        runs = grid.expand(vary)
        grid.check_runs(runs, [*base, "--out", str(out / "check")])
    except grid.GridError as e:
        parser.error(str(e))
    record = {"data": args.data, "epochs": args.epochs, "subset": args.subset,
              "trainer_flags": trainer_flags, "vary": {k: list(v) for k, v in vary.items()},
              "command": "python -m vit.sweep " + shlex.join(argv)}
    problem = check_record(out, record)
    plan = Plan(out, base, args.epochs, args.threads)
    problem = problem or next(filter(None, (refusal(plan, run) for run in runs)), None)
    if problem:
        parser.error(problem)
    return args, plan, runs, vary, record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, plan, runs, vary, record = plan_sweep(argv)
    out = plan.out
    out.mkdir(parents=True, exist_ok=True)
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n")

    jobs = args.jobs or max(1, (os.cpu_count() or 1) // args.threads)
    where = (f"Ray ({args.ray_address or 'a local instance'})" if args.backend == "ray"
             else f"{min(jobs, len(runs))} at a time")
    print(f"{len(runs)} runs of {args.epochs} epoch(s) on {args.data}"
          + (f" ({args.subset:,} training images)" if args.subset else "")
          + f", {where}, {args.threads} thread(s) each: {out}", flush=True)
    done = []
    started = time.monotonic()

    def said(result: dict) -> None:
        done.append(result)
        r = report.row(plan, next(run for run in runs if run.name == result["name"]))
        how = (f"{100 * r['test_accuracy']:.2f} % test accuracy, {r['parameters']:,} parameters, "
               f"{r['train_seconds']:.0f} s of training" if result["ok"] and r else result["said"])
        print(f"[{len(done)}/{len(runs)}] {result['name']}: {how}", flush=True)

    try:
        if args.backend == "ray":
            results = backends.run_ray(plan, runs, args.ray_address, said, jobs)
        else:
            results = backends.run_processes(plan, runs, jobs, said)
    except KeyboardInterrupt:
        print(f"\nStopped with {sum(r['ok'] for r in done)} of {len(runs)} runs finished; the same "
              "command continues the others where they stopped.", file=sys.stderr)
        return 130
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rows = report.write_table(plan, runs, list(vary))
    title = SPECS[args.data].title if args.data in SPECS else args.data
    pictures = report.write_plots(plan, rows, vary, title) if rows else []
    failed = [r for r in results if not r["ok"]]
    print(f"Done in {time.monotonic() - started:.0f} s. Wrote {out / 'results.csv'} ({len(rows)} runs) and "
          + ", ".join(p.name for p in pictures) + ".")
    print(f"Open the models: python app.py --checkpoints {out}")
    if failed:
        print(f"error: {len(failed)} run(s) failed: "
              + "; ".join(f"{r['name']}: {r['said']}" for r in failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
