"""What a run records about the code that made it (vit/training/records.py): the commit, and
the code itself by content, so that a checkpoint trained on a machine whose .git is older than
its files (a GPU machine's copy of a working tree) still names the code that ran."""
import json
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from vit.training import records
from vit.training.records import git_commit, source_tree
from vit.training.state import EpochTotals, RunState

ROOT = Path(__file__).resolve().parent.parent


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_code_is_named_by_the_tree_git_gives_its_commit(tmp_path):
    """The package copied into a fresh repository and committed there: `git rev-parse
    HEAD:vit` is what source_tree computes without git, with caches and stubs beside the code
    (ignored by git) and after a change (then it differs, as the commit would)."""
    shutil.copytree(ROOT / "vit", tmp_path / "vit")
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    (tmp_path / "vit" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "vit" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "vit" / "ui" / "stub.pyi").write_text("x: int\n")
    git("init", "-q", cwd=tmp_path)
    git("add", "-A", cwd=tmp_path)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code", cwd=tmp_path)
    assert source_tree(tmp_path / "vit") == git("rev-parse", "HEAD:vit", cwd=tmp_path)
    before = source_tree(tmp_path / "vit")
    head = git("rev-parse", "HEAD", cwd=tmp_path)
    assert git_commit(tmp_path) == head
    (tmp_path / "vit" / "train.py").write_text("# changed\n")
    assert source_tree(tmp_path / "vit") != before
    assert git_commit(tmp_path) == head + "-dirty"         # the commit alone would be a lie
    assert (records.PROJECT / "vit" / "training" / "records.py").is_file()   # the default root


def test_a_command_names_its_commit_and_nothing_else_passes(monkeypatch):
    monkeypatch.setenv("VIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    assert git_commit() == "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("VIT_COMMIT", "$(rm -rf /)")
    with pytest.raises(ValueError, match="VIT_COMMIT"):
        git_commit()


def test_a_run_state_keeps_its_sources_and_an_older_one_still_resumes():
    run = RunState(command="python -m vit.train", commits=["abc1234"], sources=["f" * 40],
                   config={"train": {}, "model": {}}, partial=EpochTotals())
    text = json.dumps(asdict(run))                 # as the state file holds it
    assert RunState.from_json(text).sources == ["f" * 40]
    older = json.loads(text)
    older.pop("sources")
    assert RunState.from_json(json.dumps(older)).sources == []
    older["sources"] = "f" * 40
    with pytest.raises(ValueError, match="sources"):
        RunState.from_json(json.dumps(older))
