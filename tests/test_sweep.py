"""`python -m vit.sweep` on the tiny IDX data set the tests write: one checkpoint per combination,
the table and plots, the app opening the runs, an interrupted sweep resuming, Ray on a local
instance, and a bad --vary refused in one line before anything trains (in this process, and
once as the real command). The tests that sweep are in the train lane; the others are fast."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, run_main, run_module
from test_distributed import SLOW

from vit.sweep import grid

TINY = ["--", "--depth", "2", "--mlp-dim", "32", "--val-size", "40", "--negatives", "16",
        "--batch-size", "32", "--eval-batch-size", "40"]


def sweep(data, out, *flags, trainer=(), timeout=600):
    return run_module("vit.sweep", "--data", "mnist", "--data-dir", data, "--no-download",
                      "--out", out, *flags, *TINY, *trainer, timeout=timeout)


def rows(out):
    return list(csv.DictReader(open(out / "results.csv")))


@pytest.fixture(scope="module")
def swept(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "heads-dim"
    r = sweep(tiny_data, out, "--vary", "heads=1,2", "dim=16,32", "--epochs", "2", "--subset", "200")
    assert r.returncode == 0, r.stderr[-3000:]
    return out, r


@pytest.mark.train
def test_one_checkpoint_per_combination_with_a_row_each(swept):
    out, r = swept
    table = rows(out)
    assert [(t["heads"], t["dim"]) for t in table] == [("1", "16"), ("1", "32"), ("2", "16"), ("2", "32")]
    assert list(table[0]) == ["heads", "dim", "parameters", "train_seconds", "wall_seconds",
                              "test_accuracy", "checkpoint"]
    for t in table:
        cfg = json.loads((out / t["checkpoint"] / "config.json").read_text())
        assert cfg["model"]["heads"] == int(t["heads"]) and cfg["model"]["dim"] == int(t["dim"])
        assert float(t["test_accuracy"]) == cfg["test_accuracy"]
        assert int(t["parameters"]) == cfg["num_parameters"]
        assert cfg["training"]["subset"] == 200 and float(t["train_seconds"]) > 0
    # width costs parameters; heads do not
    assert table[1]["parameters"] > table[0]["parameters"] == table[2]["parameters"]
    assert "[4/4]" in r.stdout and "python app.py --checkpoints" in r.stdout


@pytest.mark.train
def test_the_plots_are_written(swept):
    out, _ = swept
    for name in ("accuracy-vs-heads.png", "accuracy-vs-dim.png", "accuracy-vs-time.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


@pytest.mark.train
def test_the_app_opens_every_run(swept):
    from vit.ui.models import Models
    out, _ = swept
    models = Models(out, warn=pytest.fail)
    assert sorted(models.names) == sorted(t["checkpoint"] for t in rows(out))
    labels = [label for label, _ in models.choices()]
    assert len(set(labels)) == 4 and all("heads-" in label for label in labels)


@pytest.mark.train
def test_a_finished_sweep_is_not_trained_again(swept, tiny_data, capsys):
    out, _ = swept
    before = {p: p.stat().st_mtime_ns for p in out.glob("*/model.safetensors")}
    r = run_main(capsys, "vit.sweep", "--data", "mnist", "--data-dir", tiny_data, "--no-download",
                 "--out", out, "--vary", "heads=1,2", "dim=16,32", "--epochs", "2", "--subset", "200",
                 *TINY)
    assert r.returncode == 0, r.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/model.safetensors")} == before
    assert len(rows(out)) == 4


@pytest.mark.train
def test_other_shared_settings_need_another_folder(swept, tiny_data, capsys):
    out, _ = swept
    r = run_main(capsys, "vit.sweep", "--data", "mnist", "--data-dir", tiny_data, "--no-download",
                 "--out", out, "--vary", "heads=1,2", "--epochs", "3", "--subset", "200", *TINY)
    assert r.returncode == 2
    assert "holds a sweep with other epochs" in r.stderr and "use another --out" in r.stderr


@pytest.mark.train
def test_an_interrupted_sweep_resumes_where_it_stopped(tiny_data, tmp_path):
    out = tmp_path / "sw"
    (tmp_path / "sitecustomize.py").write_text(SLOW)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    args = ["--data", "mnist", "--data-dir", str(tiny_data), "--no-download", "--out", str(out),
            "--vary", "heads=1,2", "--epochs", "3", "--jobs", "1", *TINY, "--dim", "16"]
    proc = subprocess.Popen([sys.executable, "-m", "vit.sweep", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    log = out / "logs" / "heads-1.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "epoch 1:" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)             # Ctrl-C in the terminal: the whole group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "the same command continues the others" in err
    assert (out / "heads-1" / "train_state").is_dir() and not (out / "heads-2" / "config.json").exists()
    again = run_module("vit.sweep", *args, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "--resume" in log.read_text()           # continued, not started afresh
    assert [t["heads"] for t in rows(out)] == ["1", "2"]
    metrics = list(csv.DictReader(open(out / "heads-1" / "metrics.csv")))
    assert [int(m["epoch"]) for m in metrics] == [1, 2, 3]


@pytest.mark.train
def test_ray_on_a_local_instance(tiny_data, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    r = sweep(tiny_data, out, "--backend", "ray", "--vary", "heads=1,2", "--epochs", "1",
              trainer=["--dim", "16"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(t["heads"] for t in rows(out)) == ["1", "2"]
    assert all((out / t["checkpoint"] / "model.safetensors").is_file() for t in rows(out))


@pytest.mark.parametrize("vary, says", [
    (["head=1,2"], "--vary head: not a setting a sweep can vary"),
    (["heads=1,x"], "--vary heads: 'x' is not a whole number"),
    (["heads=3", "dim=16"], "run heads-3_dim-16: dim 16 is not divisible by heads 3"),
    (["heads"], "--vary 'heads': write SETTING=V1,V2"),
    (["device=cpu,cuda"], "--vary device: not a setting a sweep can vary"),
    (["lr=" + ",".join(str(i) for i in range(1, 300))], "a sweep has at most 256"),
    (["lr=" + ",".join(str(i) for i in range(1, 200)), "seed=" + ",".join(map(str, range(200)))],
     "--vary makes 39,800 runs"),
    (["init=a/b,a_b"], "two runs would share the folder 'init-a-b'"),
])
def test_a_bad_vary_is_one_line_before_anything_trains(tmp_path, vary, says, capsys):
    r = run_main(capsys, "vit.sweep", "--data", "mnist", "--out", tmp_path / "sw", "--vary", *vary)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "sw").exists()


@pytest.mark.process
def test_a_bad_vary_stops_the_real_command_with_one_line(tmp_path):
    """The one real process of the checks above: exit status and stderr as a user sees them."""
    r = run_module("vit.sweep", "--data", "mnist", "--out", tmp_path / "sw", "--vary", "head=1,2",
                   timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and not (tmp_path / "sw").exists()
    assert r.stderr.strip().splitlines()[-1].startswith(
        "python -m vit.sweep: error: --vary head: not a setting a sweep can vary; these can: ")


def test_the_grid_in_order_and_its_folder_names():
    runs = grid.expand(grid.parse_vary(["patch-size=2,4", "policy=none,trivialaugment", "lr=1e-3"]))
    assert [r.name for r in runs] == [
        "patch-size-2_policy-none_lr-0.001", "patch-size-2_policy-trivialaugment_lr-0.001",
        "patch-size-4_policy-none_lr-0.001", "patch-size-4_policy-trivialaugment_lr-0.001"]
    assert runs[1].flags() == ["--patch-size", "2", "--policy", "trivialaugment", "--lr", "0.001"]
    assert grid.expand(grid.parse_vary(["augment=true,false"]))[1].flags() == ["--no-augment"]


def test_the_accuracy_axis_never_zooms_a_point_into_a_cliff():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vit.sweep.report import MIN_SPAN, _honest_axis
    for ys, within in (([26.4, 27.3], (20, 34)), ([99.1, 99.6], (90, 100)), ([0.5, 2.0], (0, 10)),
                       ([20, 80], (17, 83))):
        fig, ax = plt.subplots()
        ax.plot([1, 2], ys)
        _honest_axis(ax)
        lo, hi = ax.get_ylim()
        assert hi - lo >= MIN_SPAN - 1e-9 and within[0] <= lo and hi <= within[1]
        assert 0 <= lo and hi <= 100                  # a percentage axis stays a percentage
        plt.close(fig)


def test_seeds_are_averaged_not_plotted_against(tmp_path):
    from vit.sweep.report import write_plots
    from vit.sweep.runs import Plan
    vary = {"heads": [1, 2], "seed": [0, 1, 2]}
    rows = [{"heads": h, "seed": s, "test_accuracy": 0.5 + 0.1 * h + 0.01 * s, "train_seconds": 1.0}
            for h in (1, 2) for s in (0, 1, 2)]
    written = write_plots(Plan(tmp_path, [], 1, 1), rows, vary, "MNIST")
    assert [p.name for p in written] == ["accuracy-vs-heads.png", "accuracy-vs-time.png"]


def test_no_waiting_run_starts_after_ctrl_c_stopped_one(monkeypatch):
    """The pool's worker took the next run as soon as the stopped trainer exited, before the
    sweep cancelled anything, and leaving the pool waited for it: after Ctrl-C a whole run was
    trained (seen once in CI). Now the sweep stops with nothing new started."""
    from vit.sweep import backends
    started = []

    def execute(plan, run):
        started.append(run.name)
        return {"name": run.name, "ok": False, "seconds": 1.0, "said": "stopped",
                "interrupted": run.name == "heads-1"}
    monkeypatch.setattr(backends, "execute", execute)
    real = backends.concurrent.futures.as_completed

    def as_completed(futures):           # the sweep's own thread a moment late to each result,
        for done in real(futures):       # as it is while the signal's handler runs
            time.sleep(0.3)
            yield done
    monkeypatch.setattr(backends.concurrent.futures, "as_completed", as_completed)
    runs = [type("Run", (), {"name": n})() for n in ("heads-1", "heads-2", "heads-3")]
    with pytest.raises(KeyboardInterrupt):
        backends.run_processes(None, runs, 1, lambda result: None)
    assert started == ["heads-1"]
