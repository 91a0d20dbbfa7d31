"""The trainer, evaluator and predictor CLIs, run as a user runs them, on a tiny IDX data set the
tests write themselves (so the real loading code is exercised): in a new Python where the process
is what a test checks (a signal, the exit, --compile), else the command's own main() in this
process (conftest.run_main), which saves each run the seconds of a new Python's imports.

End to end, then `vit.evaluate` / `vit.predict`; bit-identical resume (mid-epoch, after
Ctrl-C/SIGINT, after a kill while saving) with unique, whole-epoch metrics rows; no overwrite
without `--overwrite`; `--resume` refused with changed settings, other data or a tampered state;
a second trainer on the same `--out` refused; a diverging loss; bad flags, a step that cannot fit
in memory, an unwritable `--out`, bad, missing or gzip-bomb data files, Debian's flat `.gz`
folder; each data set's defaults and the presets; random erasing; random streams mixed from
integers and shared across ranks; a full disk during a save. (docs/training.md describes these.)"""
import csv
import hashlib
import json
import shutil
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT, TINY_MODEL, run_main, run_module, synthetic_digits, write_dataset, write_idx
from safetensors.torch import load_file

from vit.checkpoint import open_checkpoint
from vit.data.loading import DataError, check_split, load_split
from vit.data.specs import builtin_spec
from vit.training.batches import epoch_order, make_batch
from vit.training.config import TrainConfig
from vit.training.seeds import STREAM_DROPOUT, mix_seed
from vit.training.session import TrainData, new_session

BASE = ["--no-download", "--epochs", "2", "--batch-size", "32", "--lr", "3e-3",
        "--eval-batch-size", "40", "--val-size", "40", "--negatives", "16", *TINY_MODEL]


def train_process(data, out, *extra, timeout=300):
    """`python -m vit.train` as a user types it, in a new Python: for the `trained` run, and where
    the process itself is what a test checks (its signals, its exit, --compile)."""
    return run_module("vit.train", "--data-dir", data, "--out", out, *BASE, *extra, timeout=timeout)


def train(capsys, data, out, *extra):
    """The same command run in this process (conftest.run_main): the same exit status, output and
    files, without the seconds a new Python takes to import torch (more than a tiny run's
    training) — for what it refuses, and for the runs a test only needs to have been made."""
    return run_main(capsys, "vit.train", "--data-dir", data, "--out", out, *BASE, *extra)


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "ck"
    r = train_process(tiny_data, out)
    assert r.returncode == 0, r.stderr
    return out, r


@pytest.mark.train
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
    # What a data set is comes from its spec; normalisation is written per channel.
    assert cfg["dataset"] == "mnist" and cfg["class_names"] == list(builtin_spec("mnist").class_names)
    assert cfg["normalization"] == {"mean": [0.1307], "std": [0.3081]}
    ck = open_checkpoint(out)
    assert ck.model.cfg.dim == 16 and ck.config.num_parameters == ck.model.num_parameters()


@pytest.mark.train
def test_evaluate_cli_matches_recorded_accuracy(trained, tiny_data):
    out, _ = trained
    r = run_module("vit.evaluate", "--checkpoint", out, "--data-dir", tiny_data)
    assert r.returncode == 0, r.stderr
    recorded = json.loads((out / "config.json").read_text())["test_accuracy"]
    assert f"test accuracy {100 * recorded:.2f}%" in r.stdout
    assert "true \\ predicted" in r.stdout and r.stdout.count("%") >= 12


@pytest.mark.train
def test_predict_cli(trained, tmp_path):
    from vit.data.examples import render_digit
    out, _ = trained
    render_digit("7").save(tmp_path / "seven.png")
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    r = run_module("vit.predict", tmp_path / "seven.png", tmp_path / "junk.png",
                   "--checkpoint", out, "--top", "2")
    assert r.returncode == 1                                # one file failed
    # the answer (or "not a digit", with its best guess), then the top 2: "(7 81.0%, 1 9.0%)"
    assert "seven.png: " in r.stdout and r.stdout.rsplit("(", 1)[1].count("%") == 2
    assert "junk.png: That file is not an image" in r.stderr and "Traceback" not in r.stderr


def rows_of(folder):
    return list(csv.DictReader(open(folder / "metrics.csv")))


def same_numbers(a, b):
    """Metrics rows equal in everything but timing."""
    keys = ("epoch", "step", "lr", "train_loss", "train_acc", "test_loss", "test_acc")
    return [{k: r[k] for k in keys} for r in a] == [{k: r[k] for k in keys} for r in b]


def assert_same_weights(a_folder, b_folder):
    a, b = load_file(a_folder / "model.safetensors"), load_file(b_folder / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.train
def test_resume_gives_identical_weights(tiny_data, tmp_path, capsys):
    """Stopped mid-epoch 2 and resumed: the same weights, and the same metrics rows — the resumed
    epoch's train loss and accuracy cover the whole epoch, not only the part after the resume."""
    straight = tmp_path / "straight"
    assert train(capsys, tiny_data, straight, "--threads", "1").returncode == 0
    split = tmp_path / "split"
    r1 = train(capsys, tiny_data, split, "--max-steps", "13", "--threads", "1")   # mid-epoch 2
    assert r1.returncode == 0 and "--resume" in r1.stderr
    r2 = train(capsys, tiny_data, split, "--resume", "--threads", "1")
    assert r2.returncode == 0, r2.stderr
    assert "Resuming" in r2.stdout
    assert_same_weights(straight, split)
    assert same_numbers(rows_of(straight), rows_of(split))


class Killed(BaseException):
    """Stands for SIGKILL: nothing catches it, nothing after it runs."""


@pytest.mark.train
def test_a_kill_while_saving_the_state_loses_nothing(tiny_data, tmp_path, monkeypatch, capsys):
    """Killed while writing the resumable state at the end of epoch 2, after the epoch's
    checkpoint and metrics.csv were written: the state on disk is still epoch 1's, whole (one
    file, replaced atomically), so --resume replays epoch 2 and ends where an uninterrupted run
    does, with one metrics row per epoch."""
    import vit.storage
    from vit import train as cli
    # One thread everywhere: this process's torch thread count may have been changed by other
    # tests (create_app sets it), and float sums differ with it.
    straight = tmp_path / "straight"
    assert train(capsys, tiny_data, straight, "--threads", "1").returncode == 0
    out = tmp_path / "killed"
    real_save_file, state_saves = vit.storage.save_file, []

    def save_file(tensors, filename, metadata=None):
        if "state.safetensors" in str(filename):
            state_saves.append(filename)
            if len(state_saves) == 3:                # step 0, epoch 1, then end of epoch 2: die
                # half-way through
                open(filename, "wb").write(b"\x00" * 100)
                raise Killed
        real_save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(vit.storage, "save_file", save_file)
    with pytest.raises(Killed):
        cli.main(["--data-dir", str(tiny_data), "--out", str(out), *BASE, "--threads", "1"])
    monkeypatch.undo()
    assert [r["epoch"] for r in rows_of(out)] == ["1", "2"]     # written before the kill
    r = train(capsys, tiny_data, out, "--resume", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "Resuming" in r.stdout and "at step 9 of 18" in r.stdout   # (320 - 40 held out) / 32 per epoch
    assert_same_weights(straight, out)
    assert same_numbers(rows_of(straight), rows_of(out))     # epoch 2 once, not twice
    assert not list((out / "train_state").glob(".*.tmp"))     # the half-written file is gone


@pytest.mark.train
def test_refuses_to_overwrite_a_run_without_resume(trained, tiny_data, capsys):
    out, _ = trained
    r = train(capsys, tiny_data, out)
    assert r.returncode == 1 and "already holds a run" in r.stderr and "Traceback" not in r.stderr


def digest_files(folder):
    return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in folder.rglob("*") if p.is_file()}


@pytest.mark.train
def test_a_finished_checkpoint_is_replaced_only_with_overwrite(tiny_data, tmp_path, capsys):
    """`python -m vit.train --epochs 1` used to overwrite the bundled checkpoints/mnist (model,
    best/, metrics) without a word. On a copy of it: refused, untouched; --overwrite replaces it
    and says what it removed."""
    out = tmp_path / "mnist"
    shutil.copytree(ROOT / "checkpoints" / "mnist", out, ignore=shutil.ignore_patterns(".cache"))
    before = digest_files(out)
    r = train(capsys, tiny_data, out, "--epochs", "1")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "already holds a finished checkpoint" in r.stderr and "--overwrite" in r.stderr
    assert digest_files(out) == before
    # Stopped before its first epoch: the old checkpoint is kept aside, whole, not lost.
    r = train(capsys, tiny_data, out, "--epochs", "1", "--overwrite", "--max-steps", "3")
    assert r.returncode == 0, r.stderr
    assert "--overwrite: moved the previous run's config.json, model.safetensors, metrics.csv" \
        in r.stderr
    aside = digest_files(out / ".replaced-by-overwrite")
    assert {k: v for k, v in before.items() if k in aside} == aside and len(aside) >= 6
    # Run to its first epoch: the new checkpoint is in place and the old one is gone.
    r = train(capsys, tiny_data, out, "--epochs", "1", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert not (out / ".replaced-by-overwrite").exists()
    assert json.loads((out / "config.json").read_text())["model"]["dim"] == 16
    assert [row["epoch"] for row in rows_of(out)] == ["1"]
    assert json.loads((out / "best" / "config.json").read_text())["model"]["dim"] == 16


@pytest.mark.train
def test_resume_with_other_settings_is_refused(trained, tiny_data, capsys):
    """Every changed setting is named with its saved value (AdamW's saved param groups would
    otherwise keep the old weight decay while config.json records the new one)."""
    out, _ = trained
    flags = ["--data-dir", tiny_data, "--out", out, *BASE, "--resume"]
    flags[flags.index("--lr") + 1] = "1e-3"
    r = run_main(capsys, "vit.train", *flags, "--no-augment", "--weight-decay", "0", "--dim", "32")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    for saved in ("--lr 0.003 (now --lr 0.001)", "--augment (now --no-augment)",
                  "--weight-decay 0.05 (now --weight-decay 0.0)", "--dim 16 (now --dim 32)"):
        assert saved in r.stderr, saved
    # Where and how fast it runs may change: the finished run resumes (and has nothing to do).
    r = train(capsys, tiny_data, out, "--resume", "--eval-batch-size", "7", "--threads", "1")
    assert r.returncode == 0 and "Done" in r.stdout, r.stderr


def test_a_run_saved_before_the_newer_flags_existed_still_resumes(tmp_path):
    """A state written before --teacher-width and --erase existed lacks them: it was a width-32
    teacher and no erasing, so resuming with those values goes on; other values are refused."""
    from dataclasses import asdict, replace

    from vit.model import ViTConfig
    from vit.training.config import RUNTIME_FIELDS, TrainConfig, TrainingError
    from vit.training.state import check_same_settings
    tc, mc = TrainConfig(), ViTConfig()
    train_part = {k: v for k, v in asdict(tc).items()
                  if k not in RUNTIME_FIELDS | {"teacher_width", "erase"}}
    saved = {"train": train_part, "model": mc.to_dict()}
    check_same_settings(saved, tc, mc, tmp_path)                  # no refusal
    with pytest.raises(TrainingError, match=r"--erase 0.0 \(now --erase 0.5\)"):
        check_same_settings(saved, replace(tc, erase=0.5), mc, tmp_path)


def test_an_old_or_damaged_state_gets_a_clear_message(tiny_data, tmp_path, capsys):
    (tmp_path / "old" / "train_state").mkdir(parents=True)
    (tmp_path / "old" / "train_state" / "state.json").write_text("{}")
    (tmp_path / "bad" / "train_state").mkdir(parents=True)
    (tmp_path / "bad" / "train_state" / "state.safetensors").write_bytes(b"\x10" * 64)
    for out, extra, message in (("old", ["--resume"], "earlier version"),
                                ("old", [], "already holds a run"),
                                ("bad", ["--resume"], "state.safetensors is damaged"),
                                ("bad", [], "already holds a run")):
        r = train(capsys, tiny_data, tmp_path / out, *extra)
        assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.train
def test_non_finite_loss_stops_with_a_message(tiny_data, tmp_path, capsys):
    r = train(capsys, tiny_data, tmp_path / "nan", "--lr", "1e6", "--warmup-epochs", "0", "--grad-clip", "0",
              "--label-smoothing", "0")
    assert r.returncode == 1
    assert "training diverged" in r.stderr and "--lr" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("flags, message", [
    (["--epochs", "0"], "--epochs must be between 1 and 100,000"),
    (["--lr", "-1"], "--lr must be in (0, 1e+06]"),
    (["--lr", "1e308"], "--lr must be in (0, 1e+06]"),
    (["--batch-size", "many"], "invalid int value"),
    (["--dataset", "cifar"], "invalid choice"),
    (["--patch-size", "5"], "not divisible by patch_size"),
    (["--dim", "30", "--heads", "4"], "not divisible by heads"),
    (["--heads", "0"], "heads must be a positive integer"),                # was ZeroDivisionError
    (["--patch-size", "0"], "patch_size must be a positive integer"),
    (["--device", "tpu"], "unknown device"),
    (["--device", "cuda"], "CUDA is not available"),
    (["--num-classes", "7"], "has 10 classes"),
    (["--no-such-flag"], "unrecognized arguments"),
    (["--image-size", "32"], "mnist images are 28x28 with 1 channel(s)"),
    (["--channels", "3"], "keep --image-size 28 --channels 1"),
    (["--warmup-epochs", "inf"], "--warmup-epochs must be a finite number"),
    (["--warmup-epochs", "nan"], "--warmup-epochs must be a finite number"),
    (["--seed", str(2**70)], "--seed must be between 0 and"),
    (["--seed", "-1"], "--seed must be between 0 and"),
    (["--device", "meta"], "unknown device 'meta'"),
    (["--threads", "100000"], "--threads must be between 0"),
    (["--eval-batch-size", "0"], "--eval-batch-size must be between 1 and 65,536"),
    (["--batch-size", "1000000000"], "--batch-size must be between 1 and 65,536"),
    (["--dim", "1000000"], "--dim is 1,000,000: the limit is 8,192"),
    (["--stem-channels", "1000000"], "--stem-channels is 1,000,000: the limit is 1,024"),
    (["--batch-size", "1e9"], "invalid int value: '1e9'"),
    (["--negatives", "100000000"], "--negatives must be between 0 and 1,000,000"),
    (["--outliers", "scribble,cats"], "--outliers takes kinds among: scribble, dots"),
    (["--dist-timeout", "0"], "--dist-timeout must be between 1 and 86400"),
    (["--weight-decay", "inf"], "--weight-decay must be a finite number"),
    (["--resume", "--overwrite"], "pass only one"),
    (["--erase", "1.5"], "--erase must be in [0, 1]"),
    (["--coarse", "1.5"], "--coarse must be in [0, 1]"),
    (["--dataset", "fashion-mnist", "--coarse", "0.2"], "fashion-mnist is not digits"),
    (["--teacher-width", "0"], "--teacher-width must be between 1 and 1024"),
])
def test_bad_flags_give_a_clear_message(flags, message, capsys):
    """In-process (8 ms each, not 3.7 s): the command's own main(); the real process once, below."""
    if flags == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from vit import train as command
    with pytest.raises(SystemExit) as e:
        command.main(flags)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("python -m vit.train: error:")


@pytest.mark.process
def test_a_bad_flag_stops_the_real_command_with_one_line():
    """The one subprocess of the checks above: exit status and stderr as a user sees them."""
    r = run_module("vit.train", "--epochs", "0", timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == ("python -m vit.train: error: --epochs must be "
                                                 "between 1 and 100,000")


def test_help_lists_every_knob(capsys):
    from vit import train as command
    with pytest.raises(SystemExit) as e:
        command.main(["--help"])
    assert e.value.code == 0

    class r:
        stdout = capsys.readouterr().out
    for flag in ("--dataset", "--data-dir", "--no-download", "--epochs", "--batch-size", "--lr",
                 "--weight-decay", "--warmup-epochs", "--label-smoothing", "--no-augment", "--dim",
                 "--depth", "--heads", "--mlp-dim", "--patch-size", "--dropout", "--seed", "--device",
                 "--threads", "--out", "--resume", "--overwrite", "--max-steps", "--stem-channels",
                 "--eval-batch-size", "--min-lr", "--grad-clip", "--image-size", "--num-classes",
                 "--erase", "--teacher-width", "--teacher-epochs", "--distill", "--ema"):
        assert flag in r.stdout, flag
    assert "fashion-mnist: --epochs 60 --patch-size 2" in " ".join(r.stdout.split())


def test_each_data_set_gets_its_own_defaults_unless_a_flag_says_otherwise():
    """`--dataset fashion-mnist` alone is the command of the bundled Fashion-MNIST checkpoint."""
    from vit.train import parse_args
    tc, mc = parse_args(["--dataset", "fashion-mnist"])
    assert (tc.epochs, mc.patch_size, tc.teacher_width, tc.teacher_epochs) == (60, 2, 64, 15)
    assert tc.out == "checkpoints/fashion-mnist"
    tc, mc = parse_args(["--dataset", "fashion-mnist", "--epochs", "3", "--patch-size", "4"])
    assert (tc.epochs, mc.patch_size, tc.teacher_width) == (3, 4, 64)
    tc, mc = parse_args([])
    assert (tc.dataset, tc.epochs, mc.patch_size, tc.teacher_width) == ("mnist", 20, 4, 32)
    bundled = json.loads((ROOT / "checkpoints/fashion-mnist/config.json").read_text())
    # (fine-tuned two epochs from the 60-epoch run: its own run still took the data set's
    # defaults that the command did not override)
    assert bundled["model"]["patch_size"] == 2 and bundled["training"]["teacher_width"] == 64


def test_presets_are_the_published_vit_sizes_and_flags_still_win():
    from vit.train import parse_args
    _, mc = parse_args(["--dataset", "cifar10", "--preset", "s"])
    assert (mc.dim, mc.depth, mc.heads, mc.mlp_dim, mc.stem_channels) == (384, 12, 6, 1536, 0)
    assert (mc.image_size, mc.channels, mc.patch_size, mc.norm_eps) == (32, 3, 4, 1e-6)
    _, mc = parse_args(["--preset", "b", "--depth", "4"])
    assert (mc.dim, mc.depth, mc.heads, mc.mlp_dim) == (768, 4, 12, 3072)
    _, mc = parse_args(["--dataset", "cifar10"])
    assert (mc.image_size, mc.channels, mc.num_classes, mc.grid) == (32, 3, 10, 8)


def test_random_erasing_replaces_one_rectangle_with_noise(tiny_data):
    """--erase 1: every digit of a batch has one rectangle (2-25 % of it) of noise and is
    untouched elsewhere; the non-digit rows are never erased."""
    from vit.model import ViTConfig
    split = load_split("mnist", tiny_data, True)
    order = epoch_order(TrainConfig(), len(split), 0)
    batches = []
    for erase in (0.0, 1.0):
        tc = TrainConfig(batch_size=16, erase=erase, serve_view=0)
        s = new_session(tc, ViTConfig(dim=16, depth=1, heads=2, mlp_dim=16), split)
        s.data = TrainData(None, None, None, torch.zeros(4, 28, 28, dtype=torch.uint8), None)
        batches.append(make_batch(s, order, 5).x)
    plain, erased = batches
    changed = (plain != erased).flatten(1)
    digits = changed[:16].float().mean(1)
    assert ((digits > 0.01) & (digits <= 0.27)).all(), digits
    assert not changed[16:].any()                       # the non-digits (1 per 8 digits)
    for img in (plain != erased)[:16, 0]:               # the changed pixels lie in one rectangle
        rows, cols = img.any(1).nonzero().flatten(), img.any(0).nonzero().flatten()
        box = img[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
        assert box.float().mean() > 0.9                 # noise can equal the pixel only rarely


def test_missing_data_is_a_clear_error(tmp_path, capsys):
    from vit import train as command
    code = command.main(["--data-dir", tmp_path, "--no-download", "--epochs", "1",
                         "--out", tmp_path / "out"])
    err = capsys.readouterr().err
    assert code == 1
    assert "not found" in err and "--download" in err and "Traceback" not in err


@pytest.mark.parametrize("dataset, where", [("mnist", "MNIST/raw"), ("cifar10", "cifar-10-batches-py")])
def test_a_data_set_not_here_is_said_without_torchvision(tmp_path, monkeypatch, dataset, where):
    """The app asks for every model's test set at start-up; one not on the machine is one line,
    naming where it was looked for, without importing torchvision (~4 s on 2 cores)."""
    monkeypatch.setitem(sys.modules, "torchvision.datasets", None)      # importing it fails
    with pytest.raises(DataError, match=f"not found under {tmp_path / where} .pass --download"):
        load_split(dataset, tmp_path, train=False)


def test_flat_gz_folder_is_read(tmp_path):
    """Debian's dataset-fashion-mnist layout: the four .gz IDX files directly in a folder."""
    write_dataset(tmp_path, flat=True, compress=True, n_train=20, n_test=10)
    split = load_split("fashion-mnist", tmp_path, train=False)
    assert split.images.shape == (10, 28, 28) and split.images.dtype == torch.uint8
    assert split.labels.dtype == torch.int64


def bad_data(root, kind):
    """A tiny data set with one thing wrong with it."""
    write_dataset(root, n_train=40, n_test=10)
    raw = root / "MNIST" / "raw"
    images, labels = synthetic_digits(40, 1)
    if kind == "truncated":
        path = raw / "train-images-idx3-ubyte"
        path.write_bytes(path.read_bytes()[:-100])
    elif kind == "images not 3-D":
        write_idx(raw / "train-images-idx3-ubyte", images.reshape(40, 28 * 28))
    elif kind == "wrong image size":
        write_idx(raw / "train-images-idx3-ubyte", np.zeros((40, 32, 32), np.uint8))
    elif kind == "no training images":
        write_idx(raw / "train-images-idx3-ubyte", np.zeros((0, 28, 28), np.uint8))
        write_idx(raw / "train-labels-idx1-ubyte", np.zeros(0, np.uint8))
    elif kind == "count mismatch":
        write_idx(raw / "train-labels-idx1-ubyte", labels[:30])
    elif kind == "label out of range":
        write_idx(raw / "train-labels-idx1-ubyte", np.where(np.arange(40) == 7, 10, labels))
    return root


@pytest.mark.parametrize("kind, message", [
    ("truncated", "is truncated"),
    ("images not 3-D", "images have shape (40, 784); mnist needs (N, 28, 28)"),
    ("wrong image size", "images have shape (40, 32, 32)"),
    ("no training images", "holds no images"),
    ("count mismatch", "40 images but 30 labels"),
    ("label out of range", "labels run from 0 to 10; mnist has 10 classes"),
])
def test_bad_data_files_give_one_line(kind, message, tmp_path, capsys):
    r = train(capsys, bad_data(tmp_path / "data", kind), tmp_path / "out")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: ") and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "out" / "config.json").exists()


def test_negative_labels_are_refused():
    """IDX labels are uint8, so only other sources can have them; the check is the same."""
    with pytest.raises(DataError, match="labels run from -1 to 3"):
        check_split(torch.zeros(4, 28, 28, dtype=torch.uint8), torch.tensor([0, -1, 3, 2]),
                    builtin_spec("mnist"), "somewhere")


def test_unwritable_out_is_refused_before_the_data_is_read(tmp_path, capsys):
    """A path under a regular file can't be created, even by root. The data folder doesn't exist
    either: the --out error comes first, so nothing was loaded."""
    (tmp_path / "a-file").write_text("not a folder")
    from vit import train as command
    code = command.main(["--data-dir", tmp_path / "no-data", "--no-download",
                         "--out", tmp_path / "a-file" / "ck"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "can't write --out" in err and "a-file is a file" in err


@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--device", "meta"], "unknown device 'meta'"),
])
def test_evaluate_refuses_bad_flags(tiny_data, flags, message, capsys):
    """Refused before the checkpoint is opened: the bundled one serves (the real process of
    vit.evaluate: test_evaluate_cli_matches_recorded_accuracy)."""
    out = ROOT / "checkpoints" / "mnist"
    r = run_main(capsys, "vit.evaluate", "--checkpoint", out, "--data-dir", tiny_data, *flags)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_random_streams_are_mixed_integers_and_shared_across_ranks(tiny_data):
    """Seeds come from splitmix64 over integers (the same on every Python: no hash()); each rank
    has its own dropout stream, while batch order and augmentation are the global batch's on
    every rank: the two ranks' rows, interleaved, are the single process's batch."""
    from dataclasses import replace

    from vit.model import ViTConfig
    from vit.training import distributed
    assert mix_seed(0, 1, 2) == 3384391416029321617          # fixed for good
    assert len({mix_seed(7, STREAM_DROPOUT, 3, r) for r in range(4)}) == 4
    tc = TrainConfig(batch_size=8, erase=0.5)
    split = load_split("mnist", tiny_data, True)
    s = new_session(tc, ViTConfig(dim=16, depth=1, heads=2, mlp_dim=16), split)
    order = epoch_order(tc, len(split), 0)
    whole = make_batch(s, order, 3)
    parts = [make_batch(replace(s, d=distributed.Dist(r, 2)), order, 3)
             for r in (0, 1)]
    assert [p.size for p in parts] == [8, 8]
    torch.testing.assert_close(torch.stack([parts[0].x, parts[1].x], 1).flatten(0, 1), whole.x)


@pytest.mark.train
def test_ctrl_c_saves_a_resumable_state_and_resume_matches(tiny_data, tmp_path, capsys):
    """SIGINT to a running trainer: it stops cleanly with a resumable state; --resume then ends
    with exactly the weights of an uninterrupted run. (The process that is stopped is a real
    one; the straight run and the resume run in this one, on the same one thread.)"""
    import os
    import signal
    import subprocess
    import sys

    from conftest import ROOT
    args = ["--data-dir", str(tiny_data), *BASE, "--threads", "1"]
    args[args.index("--epochs") + 1] = "8"
    straight = run_main(capsys, "vit.train", *args, "--out", tmp_path / "straight")
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
    resumed = run_main(capsys, "vit.train", *args, "--out", tmp_path / "int", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(tmp_path / "straight" / "model.safetensors")
    b = load_file(tmp_path / "int" / "model.safetensors")
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _tamper(state_path, run_edit=None, tensor_edit=None):
    """Rewrite a state file as a person with a text editor might: valid safetensors, odd contents."""
    import json as _json

    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(str(state_path), framework="pt") as f:
        meta, tensors = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    run = _json.loads(meta["run"])
    if run_edit:
        run_edit(run)
    if tensor_edit:
        tensor_edit(tensors)
    meta["run"] = _json.dumps(run)
    save_file(tensors, str(state_path), metadata=meta)


@pytest.mark.train
@pytest.mark.parametrize("edit, message", [
    (dict(run_edit=lambda r: r.update(step="five")), "step is 'five'"),
    (dict(run_edit=lambda r: r.update(step=10**9)), "past the run's"),
    (dict(run_edit=lambda r: r["partial"].update(seen="x")), "partial.seen"),
    (dict(run_edit=lambda r: r.update(metrics=[5])), "metrics is not a list of rows"),
    (dict(tensor_edit=lambda t: t.pop("model.head.weight")), "does not fit this model"),
    (dict(tensor_edit=lambda t: t.update({"opt.0.exp_avg": torch.zeros(3)})), "does not fit this model"),
])
def test_a_tampered_state_is_refused_in_one_line(tiny_data, tmp_path, edit, message, capsys):
    out = tmp_path / "run"
    assert train(capsys, tiny_data, out, "--max-steps", "3").returncode == 0
    _tamper(out / "train_state" / "state.safetensors", **edit)
    r = train(capsys, tiny_data, out, "--resume")
    assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.train
def test_a_second_trainer_on_the_same_out_is_refused(tiny_data, tmp_path, capsys):
    """Two runs writing one folder left one run's weights beside the other's best/ and state."""
    from vit.training.state import exclusive
    out = tmp_path / "shared"
    out.mkdir()
    with exclusive(out, True):                       # a trainer is running on `out`
        r = train(capsys, tiny_data, out)          # (flock: its own descriptor is refused too)
    assert r.returncode == 1 and "another trainer is writing to" in r.stderr
    assert not (out / "config.json").exists()
    assert train(capsys, tiny_data, out).returncode == 0     # once it has finished, the folder is free


def test_out_that_cannot_really_be_written_is_refused_before_training(tiny_data, capsys):
    """os.access says yes to root everywhere; /proc refuses the write itself."""
    r = train(capsys, tiny_data, "/proc/vit-explorer-test")
    assert r.returncode == 1 and "can't write --out" in r.stderr and "epoch 1" not in r.stdout


@pytest.mark.train
def test_checkpoint_files_get_the_usual_permissions(trained):
    """mkstemp makes owner-only files: an app server running as another user could not read them."""
    import os
    mask = os.umask(0o022)
    os.umask(mask)
    out, _ = trained
    for name in ("model.safetensors", "config.json", "metrics.csv", "curves.png", "best/config.json"):
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


def test_a_gzip_bomb_in_the_data_is_refused_without_inflating_it(tmp_path):
    """A 2 MB .gz whose header promises 60 million images (47 GB): refused from the header."""
    import gzip
    import resource
    import struct
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    with gzip.open(raw / "t10k-images-idx3-ubyte.gz", "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + struct.pack(">3i", 60_000_000, 28, 28))
        for _ in range(200):
            f.write(b"\0" * 1_000_000)
    with gzip.open(raw / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + struct.pack(">i", 10) + bytes(10))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DataError, match="more than this trainer reads"):
        load_split("mnist", tmp_path, train=False)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000      # KB


@pytest.mark.train
def test_a_run_resumed_elsewhere_names_every_device(tiny_data, tmp_path, capsys):
    """config.json's "device" must not name only the last machine of a run that moved (the bundled
    MNIST run began on a GPU and was resumed on a CPU)."""
    out = tmp_path / "moved"
    assert train(capsys, tiny_data, out, "--threads", "1", "--max-steps", "12").returncode == 0
    r = train(capsys, tiny_data, out, "--threads", "2", "--resume")
    assert r.returncode == 0, r.stderr
    device = json.loads((out / "config.json").read_text())["provenance"]["device"]
    assert device == "cpu (1 thread) from epoch 1, then cpu (2 threads) from epoch 2", device
    one = tmp_path / "one"
    assert train(capsys, tiny_data, one, "--threads", "1").returncode == 0
    assert json.loads((one / "config.json").read_text())["provenance"]["device"] == "cpu (1 thread)"


@pytest.mark.train
def test_a_teacher_file_is_only_reused_by_resume(tiny_data, tmp_path, capsys):
    """A teacher left by a run killed before its first state (maybe of other settings) is not
    distilled from by a fresh run; a damaged one on --resume gets one line, not a traceback."""
    out = tmp_path / "stale"
    (out / "train_state").mkdir(parents=True)
    (out / "train_state" / "teacher.safetensors").write_bytes(b"not a teacher")
    r = train(capsys, tiny_data, out, "--max-steps", "3")
    assert r.returncode == 0, r.stderr
    assert "Teacher CNN:" in r.stdout                       # trained afresh, file replaced
    (out / "train_state" / "teacher.safetensors").write_bytes(b"damaged")
    r = train(capsys, tiny_data, out, "--resume")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("error: can't resume:")
    assert "Traceback" not in r.stderr


def test_cifar_shifts_are_whole_pixels_so_photos_stay_sharp():
    """CIFAR-10's "pad 4, random crop": shifts of -4..4 whole pixels, each about equally likely,
    and every shifted pixel is one of the photo's own (or the black border), never a blend."""
    from vit.data.specs import SPECS
    aug = SPECS["cifar10"].augment
    x = torch.rand(900, 3, 32, 32)
    theta = aug.draw(900, torch.Generator().manual_seed(0))
    shifts = theta[:, :, 2] * 16                                # grid units -> pixels
    assert torch.allclose(shifts, shifts.round(), atol=1e-5)
    counts = torch.bincount((shifts.round() + 4).long().flatten(), minlength=9)
    assert len(counts) == 9 and counts.min() > 150             # 1800 draws over 9 values
    out = aug.apply(x, theta)
    for img, src in zip(out[:20], x[:20]):
        own = torch.cat([src.flatten(), torch.zeros(1)])
        assert torch.isclose(img.flatten()[:, None], own[None]).any(1).all()


@pytest.mark.train
def test_a_kill_between_the_first_checkpoint_and_its_state_still_resumes(tiny_data, tmp_path,
                                                                         monkeypatch, capsys):
    """Killed after epoch 1's checkpoint files, before its state: the run used to be stranded
    ("nothing to resume", and a new run refused the folder). A state is saved before any
    checkpoint file now, so --resume replays epoch 1."""
    import vit.storage
    from vit import train as cli
    straight = tmp_path / "straight"
    assert train(capsys, tiny_data, straight, "--threads", "1").returncode == 0
    out = tmp_path / "killed"
    real_save_file = vit.storage.save_file

    def save_file(tensors, filename, metadata=None):
        if "state.safetensors" in str(filename) and (out / "model.safetensors").is_file():
            raise Killed                             # the first state after a checkpoint
        real_save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(vit.storage, "save_file", save_file)
    with pytest.raises(Killed):
        cli.main(["--data-dir", str(tiny_data), "--out", str(out), *BASE, "--threads", "1"])
    monkeypatch.undo()
    assert (out / "model.safetensors").is_file()
    r = train(capsys, tiny_data, out, "--resume", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "Resuming" in r.stdout and "at step 0 of 18" in r.stdout
    assert_same_weights(straight, out)


@pytest.mark.train
def test_a_full_disk_during_a_save_is_one_line_and_the_run_resumes(tiny_data, tmp_path,
                                                                   monkeypatch, capsys):
    """safetensors reports a full disk as its own error type: it was a traceback."""
    from safetensors import SafetensorError

    import vit.storage
    from vit import train as cli
    out = tmp_path / "full"
    real_save_file, failed = vit.storage.save_file, []

    def save_file(tensors, filename, metadata=None):
        if str(filename).startswith(str(out / ".model.safetensors")) and not failed:
            failed.append(filename)
            open(filename, "wb").write(b"\0" * 10)           # part written, then the disk is full
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: '
                                  'StorageFull, message: "No space left on device" })')
        real_save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(vit.storage, "save_file", save_file)
    argv = ["--data-dir", str(tiny_data), "--out", str(out), *BASE, "--threads", "1"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    # One line: what failed, why, that the earlier files are intact, and the command to go on.
    assert err.startswith(f"error: could not write {out / 'model.safetensors'}: No space left on "
                          f"device; the files saved before are intact: free some space, then "
                          f"continue with python -m vit.train ") and "Traceback" not in err
    assert err.count("\n") == 1 and err.rstrip().endswith("--resume")
    assert not (out / "model.safetensors").exists() and not list(out.glob(".*.tmp"))
    monkeypatch.undo()
    r = train(capsys, tiny_data, out, "--resume", "--threads", "1")
    assert r.returncode == 0, r.stderr


@pytest.mark.train
def test_resuming_on_other_training_data_is_refused(tiny_data, tmp_path, capsys):
    """Same number of images, other pictures: the run used to continue as if nothing happened."""
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    out = tmp_path / "ck"
    assert train(capsys, data, out, "--max-steps", "3").returncode == 0
    images = data / "MNIST" / "raw" / "train-images-idx3-ubyte"
    raw = bytearray(images.read_bytes())
    raw[16 + 28 * 14:16 + 28 * 15] = bytes(255 - b for b in raw[16 + 28 * 14:16 + 28 * 15])
    images.write_bytes(bytes(raw))
    r = train(capsys, data, out, "--resume")
    assert r.returncode == 1 and "not the ones the run" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "65536", "--mlp-dim", "16384"], "--batch-size 65,536 needs at least"),
    (["--eval-batch-size", "65536", "--batch-size", "8", "--dim", "2048", "--heads", "8",
      "--mlp-dim", "8192"],
     "--eval-batch-size 65,536 needs at least"),
])
def test_a_step_that_cannot_fit_in_memory_is_refused_before_anything_is_allocated(
        flags, message, monkeypatch, capsys):
    """Flags within their own bounds can still ask for a step larger than the machine: that was
    an allocation traceback (or the OOM killer). Refused up front, naming the flag."""
    import vit.data.folders
    from vit.train import parse_args
    monkeypatch.setattr(vit.data.folders, "machine_memory", lambda: 8 * 10**9)
    with pytest.raises(SystemExit) as e:
        parse_args(flags)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and message in err and "than this machine's memory (8 GB)" in err
    assert "choose a smaller" in err


@pytest.mark.train
def test_running_out_of_memory_mid_run_is_one_line(tiny_data, tmp_path, monkeypatch, capsys):
    """What the estimate can't foresee (other programs' memory) still ends in one line."""
    import vit.training.loop
    from vit import train as cli

    def train_step(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 123456789 bytes.")
    monkeypatch.setattr(vit.training.loop, "train_step", train_step)
    out = tmp_path / "oom"
    assert cli.main(["--data-dir", str(tiny_data), "--out", str(out), *BASE, "--threads", "1"]) == 1
    err = capsys.readouterr().err
    assert err == ("error: out of memory on the cpu: --resume with a smaller --eval-batch-size "
                   "(now 40), or start afresh (--overwrite) with a smaller --batch-size (now 32) "
                   "or model\n")


def test_a_folder_image_size_is_bounded_before_any_picture_is_decoded(tmp_path, monkeypatch,
                                                                        capsys):
    """--dataset folder decodes every picture at --image-size before the model is checked:
    --image-size 100000 asked for 30 GB per picture."""
    from PIL import Image

    import vit.data.folders
    from vit.train import parse_args
    for split in ("train", "test"):
        for c in ("a", "b"):
            (tmp_path / split / c).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / split / c / "0.png")
    monkeypatch.setattr(vit.data.folders, "decode", lambda *a: pytest.fail("decoded"))
    for size in ("100000", "0"):
        with pytest.raises(SystemExit) as e:
            parse_args(["--dataset", "folder", "--data-dir", str(tmp_path), "--image-size", size])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert e.value.code == 2
        assert err.endswith("--image-size must be between 1 and 1,024 for --dataset folder")


@pytest.mark.train
def test_resuming_on_a_different_number_of_images_says_how_to_start_afresh(tiny_data, tmp_path,
                                                                           capsys):
    data = write_dataset(tmp_path / "data", n_train=400)
    out = tmp_path / "ck"
    assert train(capsys, tiny_data, out, "--max-steps", "1").returncode == 0
    r = train(capsys, data, out, "--resume")
    assert r.returncode == 1 and "trained on 280 images" in r.stderr
    assert "start afresh with --overwrite" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_evaluate_says_in_one_line_that_it_cannot_read_the_test_set(tmp_path, monkeypatch, capsys):
    """An image folder's model, with a --data-dir that can't be listed: a traceback."""
    import vit.evaluate
    from vit.checkpoint import save_checkpoint
    from vit.model import ViT, ViTConfig
    out = tmp_path / "folder-model"
    save_checkpoint(out, ViT(ViTConfig(image_size=8, channels=3, patch_size=4, stem_channels=0,
                                       dim=8, depth=1, heads=2, mlp_dim=8, num_classes=2)),
                    {"dataset": "folder", "class_names": ["a", "b"],
                     "normalization": {"mean": [0.5] * 3, "std": [0.25] * 3}})

    def folder_split(*args):
        raise PermissionError(13, "Permission denied", str(tmp_path / "data" / "test"))
    monkeypatch.setattr(vit.evaluate, "folder_split", folder_split)
    assert vit.evaluate.main(["--checkpoint", str(out), "--data-dir", "data"]) == 1
    err = capsys.readouterr().err
    assert err == "error: can't read the test set in --data-dir data: Permission denied\n"


@pytest.mark.train
def test_a_second_run_takes_its_preparation_from_the_cache_and_trains_the_same(tiny_data, tmp_path, capsys):
    """The laid-out view, the non-digit bank and the CNN teacher are kept (vit/training/prepared.py):
    a second run of the same data and settings takes all three from the cache, each phase saying
    so in a line with its time, and ends with exactly the weights of a run that kept nothing. A
    damaged cache file is rebuilt, never read; another --teacher-epochs trains a new teacher."""
    cache = tmp_path / "cache"
    first = train(capsys, tiny_data, tmp_path / "a", "--cache-dir", cache)
    assert first.returncode == 0, first.stderr
    assert "taken from the cache" not in first.stdout and "Done in" in first.stdout
    assert len(list(cache.glob("*.safetensors"))) == 3       # laid-out, non-digits, teacher
    second = train(capsys, tiny_data, tmp_path / "b", "--cache-dir", cache)
    assert second.returncode == 0, second.stderr
    for phase in ("Laid out", "non-digit drawings", "Teacher CNN"):
        line = next(x for x in second.stdout.splitlines() if phase in x)
        assert "taken from the cache" in line and " s" in line, line
    nothing = train(capsys, tiny_data, tmp_path / "c", "--cache-dir", "none")
    assert nothing.returncode == 0, nothing.stderr
    weights = [load_file(tmp_path / d / "model.safetensors") for d in "bc"]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    for f in cache.glob("*.safetensors"):
        f.write_bytes(f.read_bytes()[:100])                      # truncated
    again = train(capsys, tiny_data, tmp_path / "d", "--cache-dir", cache, "--max-steps", "1")
    assert again.returncode == 0, again.stderr
    assert "taken from the cache" not in again.stdout and "Traceback" not in again.stderr
    other = train(capsys, tiny_data, tmp_path / "e", "--cache-dir", cache, "--max-steps", "1",
                  "--teacher-epochs", "2")
    teacher = next(x for x in other.stdout.splitlines() if "Teacher CNN" in x)
    assert "taken from the cache" not in teacher and "2 epochs" in teacher


@pytest.mark.train
def test_a_compiled_run_trains_and_resumes_a_run_started_eagerly(tiny_data, tmp_path, capsys):
    """--compile is how a run executes, not what it computes: --resume may switch it on."""
    out = tmp_path / "ck"
    first = train(capsys, tiny_data, out, "--max-steps", "3")
    assert first.returncode == 0, first.stderr[-2000:]
    resumed = train_process(tiny_data, out, "--resume", "--compile", "default", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2]
