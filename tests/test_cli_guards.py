"""Commands never destroy a finished model nor write where they must not (issue 36's review): a
sweep refuses a run folder holding a model it did not start (it would --overwrite it); `vit.export`
writes only .onnx files, never a checkpoint's weights; a mistyped `checkpoints/mnst` is a missing
folder, never a Hub model (hf://user/repo is); no command writes into the app's folder of models,
a filesystem root or the home folder itself; the trainer removes what a kill -9 mid-save left;
a sweep's paths are the caller's, not the repository's. All in-process: nothing trains."""
import os
import time

import huggingface_hub
import pytest
from conftest import ROOT
from test_app_models import tiny

import vit.sweep.__main__ as sweep_cmd
from vit.checkpoint import CheckpointError, open_checkpoint, read_config
from vit.sweep import backends, runs

SWEEP = ["--data", "mnist", "--data-dir", "no-data", "--no-download", "--vary", "heads=1,2",
         "--", "--dim", "16", "--depth", "1", "--mlp-dim", "16"]


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_a_sweep_refuses_a_model_it_did_not_start_before_anything_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(backends, "run_processes", lambda *a: pytest.fail("a run was started"))
    theirs = tiny(tmp_path / "sw" / "heads-1")                 # a finished model, no state file
    tiny(theirs / "best")
    before = {p: p.read_bytes() for p in theirs.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as e:
        sweep_cmd.main(["--out", "sw", *SWEEP])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "run heads-1:" in err and "did not start" in err, err
    assert {p: p.read_bytes() for p in theirs.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "sw" / "sweep.json").exists()        # refused before anything is written

    # What the sweep may still start afresh: its own run's leftovers, or a folder without a model.
    _, plan, planned, _, _ = sweep_cmd.plan_sweep(["--out", "other", *SWEEP])
    one, two = planned
    tiny(plan.folder(one))
    (plan.folder(one) / runs.MARKER).write_text('{"run": "heads-1", "settings": {"heads": 1}}')
    (plan.folder(two) / "logs").mkdir(parents=True)
    assert runs.command(plan, one)[-1] == "--overwrite" and runs.command(plan, two)[-1] == "--overwrite"
    (plan.folder(one) / runs.MARKER).write_text('{"run": "heads-1", "settings": {"heads": 3}}')
    assert "started with other settings" in runs.refusal(plan, one)
    assert "--overwrite" not in runs.command(plan, one)


def test_the_sweep_passes_absolute_paths_in_the_callers_folder(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runs.subprocess, "run", lambda cmd, **kw: calls.append((cmd, kw)) or
                        type("Done", (), {"returncode": 1})())       # the trainer, not run
    monkeypatch.setattr(backends, "run_processes",
                        lambda plan, planned, *a: [runs.execute(plan, planned[0])])
    monkeypatch.chdir(tmp_path)
    sweep_cmd.main(["--out", "runs/sw", *SWEEP, "--cache-dir", "c"])
    (cmd, kw), = calls
    assert flag(cmd, "--out") == str(tmp_path / "runs" / "sw" / "heads-1")
    assert flag(cmd, "--data-dir") == str(tmp_path / "no-data")
    assert flag(cmd, "--cache-dir") == str(tmp_path / "c")
    assert kw["cwd"] != ROOT and str(ROOT) in kw["env"]["PYTHONPATH"]


@pytest.mark.parametrize("out", ["model.safetensors", "config.json", "README.md", "notes.onnx",
                                 "model", "best"])
def test_export_never_writes_over_a_checkpoints_files(tmp_path, capsys, out):
    from vit.export import main
    ck = tiny(tmp_path / "ck")
    (ck / "notes.onnx").write_text("my notes")
    (ck / "best").mkdir()
    before = {p.name: p.read_bytes() for p in ck.iterdir() if p.is_file()}
    assert main([str(ck), "--out", str(ck / out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: --out ") and ".onnx" in err
    assert {p.name: p.read_bytes() for p in ck.iterdir() if p.is_file()} == before


def test_export_writes_over_its_own_onnx_file_only(tmp_path):
    pytest.importorskip("onnx")
    from vit.export import main
    ck = tiny(tmp_path / "ck")
    assert main([str(ck), "--out", str(tmp_path / "ck.onnx")]) == 0
    assert main([str(ck), "--out", str(tmp_path / "ck.onnx")]) == 0       # exported again
    (tmp_path / "theirs.onnx").write_bytes(b"\x08\x07\x12\x07pytorch")   # another tool's
    assert main([str(ck), "--out", str(tmp_path / "theirs.onnx")]) == 2
    assert (tmp_path / "theirs.onnx").read_bytes() == b"\x08\x07\x12\x07pytorch"


def test_a_path_shaped_like_user_repo_is_never_looked_up_on_the_hub(tmp_path, monkeypatch):
    import vit
    from vit.training.finetune import InitError, init_config
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda *a, **k: pytest.fail("looked up on the Hub"))
    says = "no such folder: checkpoints/mnst (for a Hub model write hf://checkpoints/mnst)"
    for load in (open_checkpoint, read_config, vit.from_pretrained):
        with pytest.raises(CheckpointError) as e:
            load("checkpoints/mnst")
        assert str(e.value) == says
    with pytest.raises(InitError, match="for a Hub model write hf://runs/x"):
        init_config("runs/x")
    monkeypatch.chdir(tmp_path)                                 # an existing "user/repo" folder
    tiny(tmp_path / "someone" / "model")
    assert read_config("someone/model").class_names[0] == "0"


def test_no_command_writes_into_the_apps_folder_a_root_or_home(tmp_path, monkeypatch, capsys):
    from vit.convert import main as convert
    from vit.export import main as export
    from vit.train import parse_args
    served, home = tmp_path / "served", tmp_path / "home"
    served.mkdir()
    home.mkdir()
    monkeypatch.setenv("VIT_CHECKPOINTS", str(served))
    monkeypatch.setenv("HOME", str(home))
    bundled = ROOT / "checkpoints"
    for out in (bundled, served, "/", home, bundled / ".." / "checkpoints"):
        with pytest.raises(SystemExit) as e:
            parse_args(["--out", str(out), "--no-download"])
        assert e.value.code == 2
        with pytest.raises(SystemExit) as e:
            sweep_cmd.plan_sweep(["--out", str(out), *SWEEP])
        assert e.value.code == 2
        assert convert(["timm:vit_tiny_patch16_224", "--random", "--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "the bundled checkpoints folder the app serves" in err and "$VIT_CHECKPOINTS" in err
    assert "a filesystem root" in err and "home folder itself" in err
    ck = tiny(tmp_path / "ck")
    for out in (bundled / "mnist.onnx", served / "x.onnx", "/x.onnx"):
        assert export([str(ck), "--out", str(out)]) == 2
    assert not (bundled / "mnist.onnx").exists() and list(served.iterdir()) == []
    assert parse_args(["--out", str(bundled / "mine"), "--no-download"])[0].out   # a model of its own


def test_the_trainer_removes_what_a_kill_mid_save_left(tmp_path, monkeypatch):
    from vit.train import parse_args
    from vit.training import loop
    out = tmp_path / "run"
    (out / "train_state").mkdir(parents=True)
    stale = [out / ".model.safetensors.k3x_9a1b.tmp", out / "train_state" / ".state.safetensors.0aq7zz2m.tmp"]
    fresh = out / ".config.json.p0o9i8u7.tmp"                  # an atomic_write may be writing it
    kept = [out / ".notes.tmp", out / "model.abcdefgh.tmp", fresh]
    hour_ago = time.time() - 3600
    for p in stale + kept:
        p.write_bytes(b"half")
        if p is not fresh:
            os.utime(p, (hour_ago, hour_ago))
    monkeypatch.setattr(loop, "_train", lambda *a: {"step": 0})      # no data, no epochs
    tc, mc = parse_args(["--out", str(out), "--no-download", "--device", "cpu"])
    loop.train(tc, mc, [])
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)
