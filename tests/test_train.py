"""The trainer, evaluator and predictor CLIs, run as a user runs them, on a tiny IDX data set the
tests write themselves (so the real loading code is exercised)."""
import csv
import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_MODEL, run_module, write_dataset
from vit.checkpoint import load_checkpoint
from vit.data import load_split

BASE = ["--no-download", "--epochs", "2", "--batch-size", "32", "--lr", "3e-3",
        "--eval-batch-size", "40", *TINY_MODEL]


def train(data, out, *extra, timeout=300):
    return run_module("vit.train", "--data-dir", data, "--out", out, *BASE, *extra, timeout=timeout)


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "ck"
    r = train(tiny_data, out)
    assert r.returncode == 0, r.stderr
    return out, r


def test_training_end_to_end(trained, tiny_data):
    out, r = trained
    assert "epoch 2: test accuracy" in r.stdout
    for name in ("model.safetensors", "config.json", "metrics.csv", "curves.png",
                 "best/model.safetensors", "best/config.json"):
        assert (out / name).is_file(), name
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cfg = json.loads((out / "config.json").read_text())
    prov = cfg["provenance"]
    assert prov["command"].startswith("python -m vit.train --data-dir")
    assert prov["epochs"] == 2 and prov["seed"] == 0 and prov["wall_time_seconds"] > 0
    assert prov["device"].startswith("cpu") and len(prov["commit"]) >= 7
    assert cfg["test_accuracy"] == pytest.approx(float(rows[-1]["test_acc"]), abs=1e-5)
    model = load_checkpoint(out)
    assert model.cfg.dim == 16 and model.config["num_parameters"] == model.num_parameters()


def test_evaluate_cli_matches_recorded_accuracy(trained, tiny_data):
    out, _ = trained
    r = run_module("vit.evaluate", "--checkpoint", out, "--data-dir", tiny_data)
    assert r.returncode == 0, r.stderr
    recorded = json.loads((out / "config.json").read_text())["test_accuracy"]
    assert f"test accuracy {100 * recorded:.2f}%" in r.stdout
    assert "true \\ predicted" in r.stdout and r.stdout.count("%") >= 12


def test_predict_cli(trained, tmp_path):
    from vit.examples import render_digit
    out, _ = trained
    render_digit("7").save(tmp_path / "seven.png")
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    r = run_module("vit.predict", tmp_path / "seven.png", tmp_path / "junk.png",
                   "--checkpoint", out, "--top", "2")
    assert r.returncode == 1                                # one file failed
    assert "seven.png: " in r.stdout and r.stdout.count("%") == 2
    assert "junk.png: That file is not an image" in r.stderr and "Traceback" not in r.stderr


def test_resume_gives_identical_weights(tiny_data, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert train(tiny_data, straight).returncode == 0
    r1 = train(tiny_data, split, "--max-steps", "13")      # stops mid-epoch 2 (10 steps/epoch)
    assert r1.returncode == 0 and "--resume" in r1.stderr
    r2 = train(tiny_data, split, "--resume")
    assert r2.returncode == 0, r2.stderr
    assert "Resuming" in r2.stdout
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert (list(csv.DictReader(open(straight / "metrics.csv")))[-1]["test_acc"]
            == list(csv.DictReader(open(split / "metrics.csv")))[-1]["test_acc"])


def test_refuses_to_overwrite_a_run_without_resume(trained, tiny_data):
    out, _ = trained
    r = train(tiny_data, out)
    assert r.returncode == 1 and "already holds a run" in r.stderr and "Traceback" not in r.stderr


def test_resume_with_other_settings_is_refused(trained, tiny_data):
    out, _ = trained
    r = run_module("vit.train", "--data-dir", tiny_data, "--out", out, *BASE[:-8], "--dim", "32",
                   "--depth", "2", "--heads", "2", "--mlp-dim", "32", "--resume")
    assert r.returncode == 1 and "--resume" in r.stderr and "Traceback" not in r.stderr


def test_non_finite_loss_stops_with_a_message(tiny_data, tmp_path):
    r = train(tiny_data, tmp_path / "nan", "--lr", "1e30", "--warmup-epochs", "0", "--grad-clip", "0",
              "--label-smoothing", "0")
    assert r.returncode == 1
    assert "training diverged" in r.stderr and "--lr" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("flags, message", [
    (["--epochs", "0"], "--epochs must be at least 1"),
    (["--lr", "-1"], "--lr must be a positive number"),
    (["--batch-size", "many"], "invalid int value"),
    (["--dataset", "cifar"], "invalid choice"),
    (["--patch-size", "5"], "not divisible by patch_size"),
    (["--dim", "30", "--heads", "4"], "not divisible by heads"),
    (["--device", "tpu"], "unknown device"),
    (["--device", "cuda"], "CUDA is not available"),
    (["--num-classes", "7"], "has 10 classes"),
    (["--no-such-flag"], "unrecognized arguments"),
])
def test_bad_flags_give_a_clear_message(flags, message):
    if flags == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = run_module("vit.train", *flags, timeout=60)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


def test_help_lists_every_knob():
    r = run_module("vit.train", "--help", timeout=60)
    assert r.returncode == 0
    for flag in ("--dataset", "--data-dir", "--no-download", "--epochs", "--batch-size", "--lr",
                 "--weight-decay", "--warmup-epochs", "--label-smoothing", "--no-augment", "--dim",
                 "--depth", "--heads", "--mlp-dim", "--patch-size", "--dropout", "--seed", "--device",
                 "--threads", "--out", "--resume"):
        assert flag in r.stdout, flag


def test_missing_data_is_a_clear_error(tmp_path):
    r = run_module("vit.train", "--data-dir", tmp_path, "--no-download", "--epochs", "1", timeout=60)
    assert r.returncode == 1
    assert "not found" in r.stderr and "--download" in r.stderr and "Traceback" not in r.stderr


def test_flat_gz_folder_is_read(tmp_path):
    """Debian's dataset-fashion-mnist layout: the four .gz IDX files directly in a folder."""
    write_dataset(tmp_path, flat=True, compress=True, n_train=20, n_test=10)
    split = load_split("fashion-mnist", tmp_path, train=False)
    assert split.images.shape == (10, 28, 28) and split.images.dtype == torch.uint8
    assert split.labels.dtype == torch.int64


def test_ctrl_c_saves_a_resumable_state_and_resume_matches(tiny_data, tmp_path):
    """SIGINT to a running trainer: it stops cleanly with a resumable state; --resume then ends
    with exactly the weights of an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys
    from conftest import ROOT
    args = ["--data-dir", str(tiny_data), *BASE]
    args[args.index("--epochs") + 1] = "8"
    straight = run_module("vit.train", *args, "--out", tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr
    proc = subprocess.Popen([sys.executable, "-m", "vit.train", *args, "--out", str(tmp_path / "int")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    for line in proc.stdout:                       # wait until it is really training
        if line.startswith("epoch 2:"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "saving a resumable state" in err and "--resume" in err and "Traceback" not in err
    resumed = run_module("vit.train", *args, "--out", tmp_path / "int", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(tmp_path / "straight" / "model.safetensors")
    b = load_file(tmp_path / "int" / "model.safetensors")
    for k in a:
        assert torch.equal(a[k], b[k]), k
