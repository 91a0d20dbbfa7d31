"""Where a sweep's runs execute. `processes`: trainer processes on this machine, `jobs` at a time.
`ray`: Ray tasks (`pip install ray`), on a local Ray instance or a cluster's (`--ray-address`); a
task asks Ray for as many CPUs as its run uses threads, so Ray packs runs onto the nodes. On a
cluster, `--out` must be a folder every node sees (a shared file system), as for torchrun."""
from __future__ import annotations

import concurrent.futures
import threading
from typing import Callable

from vit.sweep.grid import Run
from vit.sweep.runs import ROOT, Plan, execute

BACKENDS = ("processes", "ray")


def run_processes(plan: Plan, runs: list[Run], jobs: int, report: Callable[[dict], None]) -> list[dict]:
    """Each run as a `python -m vit.train` process, `jobs` at once (threads only wait on them)."""
    results = []
    # Once Ctrl-C stopped a run, no waiting run starts: a pool's worker takes the next run as
    # soon as its trainer exits, before this thread has cancelled anything, and leaving the
    # pool waits for it (one run was trained to its end after Ctrl-C).
    stop = threading.Event()

    def one(run: Run) -> dict:
        if stop.is_set():
            return {"name": run.name, "ok": False, "seconds": 0.0, "interrupted": True,
                    "said": "not started: the sweep was stopped"}
        result = execute(plan, run)
        if result.get("interrupted"):
            stop.set()
        return result

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, run) for run in runs]
        try:
            for done in concurrent.futures.as_completed(futures):
                results.append(done.result())
                if results[-1].get("interrupted"):   # Ctrl-C reached the trainer first
                    raise KeyboardInterrupt
                report(results[-1])
        except KeyboardInterrupt:
            # Ctrl-C reached the trainers too (one process group): each saves a resumable state.
            stop.set()
            for f in futures:
                f.cancel()
            raise
    return results


def run_ray(plan: Plan, runs: list[Run], address: str | None, report: Callable[[dict], None],
            jobs: int | None = None) -> list[dict]:
    """Each run as a Ray task on the instance at `address` (None: start a local one, with `jobs`
    runs' worth of CPUs)."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("--backend ray needs Ray: pip install 'ray>=2.9' (or pip install "
                           "vit-explorer[ray])") from None
    started_here = not ray.is_initialized()
    if started_here:
        kwargs = {"address": address} if address else {"num_cpus": (jobs or 1) * plan.threads}
        # Workers import vit from this checkout (on a cluster: wherever it is installed).
        ray.init(include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}}, **kwargs)
    try:
        task = ray.remote(num_cpus=plan.threads)(execute)
        pending = {task.remote(plan, run): run for run in runs}
        results = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            pending.pop(done[0])
            results.append(ray.get(done[0]))
            report(results[-1])
        return results
    finally:
        if started_here:
            ray.shutdown()
