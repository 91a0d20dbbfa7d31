"""`torchrun --nproc_per_node=2 -m vit.train` on the CPU (gloo), on the tiny IDX data set the tests
write: it trains, rank 0 alone writes a checkpoint that loads, both processes end with identical
weights, and the result is the single-process run's (the global batch is the same); --resume
under torchrun is exact; a stalled process is named after --dist-timeout; a stopped job saves a
resumable state."""
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY_MODEL, run_module
from safetensors.torch import load_file

from vit.checkpoint import load_checkpoint, open_checkpoint
from vit.training.distributed import weights_digest

pytestmark = pytest.mark.train

ARGS = ["--no-download", "--epochs", "2", "--batch-size", "32", "--lr", "3e-3",
        "--eval-batch-size", "40", "--val-size", "40", "--negatives", "16", *TINY_MODEL]


def torchrun(data, out, *extra, nproc=2):
    """`torchrun --standalone --nproc_per_node=N -m vit.train …`, as docs/training.md writes it."""
    exe = Path(sys.executable).with_name("torchrun")
    launcher = [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([*launcher, "--standalone", f"--nproc_per_node={nproc}", "-m", "vit.train",
                           "--data-dir", str(data), "--out", str(out), *ARGS, *map(str, extra)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def ddp_run(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "ck"
    r = torchrun(tiny_data, out)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, r


def test_two_processes_train_one_model(ddp_run):
    out, r = ddp_run
    # Rank 0 alone reports and writes: each epoch's line appears once, not once per process.
    assert r.stdout.count("epoch 1: test accuracy") == 1
    assert r.stdout.count("epoch 2: test accuracy") == 1
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(x["epoch"]) for x in rows] == [1, 2]
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    ck = open_checkpoint(out)
    prov = ck.config.provenance
    assert prov["command"].startswith("torchrun --nproc_per_node=2 -m vit.train --data-dir")
    assert prov["device"].endswith("× 2 processes")
    assert ck.config.test_accuracy == pytest.approx(float(rows[-1]["test_acc"]), abs=1e-5)


def test_both_ranks_end_with_identical_weights(ddp_run):
    """The trainer compares both ranks' weight digests; the one it prints is the saved model's."""
    out, r = ddp_run
    line = next(x for x in r.stdout.splitlines() if x.startswith("Weights identical on all"))
    assert "all 2 processes" in line
    saved = load_checkpoint(out)
    assert line.split("sha256 ")[1].rstrip(")") == weights_digest(saved)[:16]


def test_same_result_as_one_process(ddp_run, tiny_data, tmp_path):
    """Same seed, same global batch, same learning rate: one process and two end in the same place
    (up to float summation order in the gradient all-reduce)."""
    out, _ = ddp_run
    # One thread, as torchrun gives each process (OMP_NUM_THREADS=1): the CNN teacher, trained
    # alone by every process, is then the same bits in both runs, not a float-rounding cousin.
    single = run_module("vit.train", "--data-dir", tiny_data, "--out", tmp_path / "one", *ARGS,
                        "--threads", "1")
    assert single.returncode == 0, single.stderr
    a, b = load_file(out / "model.safetensors"), load_file(tmp_path / "one" / "model.safetensors")
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=2e-4, rtol=1e-3, msg=k)


def test_resume_under_torchrun(ddp_run, tiny_data, tmp_path):
    """Stopped mid-epoch by --max-steps and resumed: the same weights as the straight run."""
    out, _ = ddp_run
    split = tmp_path / "split"
    r1 = torchrun(tiny_data, split, "--max-steps", "13")
    assert r1.returncode == 0, r1.stderr[-3000:]
    assert r1.stderr.count("Stopped at step 13") == 1
    r2 = torchrun(tiny_data, split, "--resume")
    assert r2.returncode == 0, r2.stderr[-3000:]
    a, b = load_file(out / "model.safetensors"), load_file(split / "model.safetensors")
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # One row per epoch; the resumed epoch's counts cover all of it, from both processes.
    rows = list(csv.DictReader(open(split / "metrics.csv")))
    straight = list(csv.DictReader(open(out / "metrics.csv")))
    assert [r["epoch"] for r in rows] == ["1", "2"]
    assert [r["train_acc"] for r in rows] == [r["train_acc"] for r in straight]


STALL = '''
import os
if os.environ.get("RANK") == "1":          # this test's rank 1 stops answering at step 3
    import time
    import vit.training.loop as t
    real = t.train_step
    def train_step(s, batch, step, stop_requested=False):
        if step == 3:
            time.sleep(20)
        return real(s, batch, step, stop_requested)
    t.train_step = train_step
'''


SLOW = '''
import time
import vit.training.loop as t
real = t.train_step
def train_step(*args, **kwargs):
    time.sleep(0.5)
    return real(*args, **kwargs)
t.train_step = train_step
'''


def test_a_stalled_process_is_named_after_the_timeout_not_after_30_minutes(tiny_data, tmp_path):
    """torch's default collective timeout kept the others waiting 30 minutes, then said nothing
    of which process had stopped."""
    (tmp_path / "sitecustomize.py").write_text(STALL)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    exe = Path(sys.executable).with_name("torchrun")
    launcher = [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    r = subprocess.run([*launcher, "--standalone", "--nproc_per_node=2", "-m", "vit.train",
                        "--data-dir", str(tiny_data), "--out", str(tmp_path / "ck"), *ARGS,
                        "--dist-timeout", "5"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode != 0
    assert "error: rank 1 has stopped answering: rank 0 waited 5 s (--dist-timeout)" in r.stderr, \
        r.stderr[-3000:]


@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_a_stopped_torchrun_job_saves_a_resumable_state(tiny_data, tmp_path, how):
    """Ctrl-C in the terminal (SIGINT to the whole process group: torchrun forwards it to the
    workers too), or `kill` / a job scheduler (SIGTERM to torchrun, which forwards it): every
    worker stops at the same step and rank 0 saves. SIGTERM used to kill the workers unsaved.
    Both save the state the same way once stopped: the Ctrl-C run is resumed from it (a third
    torchrun for `kill` would add its ~25 s to check the same path again)."""
    import signal
    exe = Path(sys.executable).with_name("torchrun")
    launcher = [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    args = [*ARGS]
    args[args.index("--epochs") + 1] = "4"
    out = tmp_path / "ck"
    # Steps of half a second, as real ones take: the launcher's forwarded signal then arrives
    # mid-step (with the tiny model's millisecond steps the workers were gone before it came).
    (tmp_path / "sitecustomize.py").write_text(SLOW)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*launcher, "--standalone", "--nproc_per_node=2", "-m", "vit.train",
                             "--data-dir", str(tiny_data), "--out", str(out), *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    for line in proc.stdout:                       # wait until it is really training
        if line.startswith("epoch 1:"):
            break
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)         # as the terminal does: the whole group
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert "Stopped at step" in err and "--resume" in err, err[-3000:]
    from vit.training.state import STATE_FILE, read_state
    step = read_state(out / STATE_FILE).run.step
    assert step >= 9                                # past epoch 1 (9 steps an epoch)
    if how == "ctrl-c":
        resumed = torchrun(tiny_data, out, "--resume", "--epochs", "4")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"at step {step} of" in resumed.stdout
