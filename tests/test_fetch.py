"""The Test set tab on a fresh clone: a missing test split is fetched (vit/data/fetch.py) — here
from a local file server, as nothing here reaches the internet — checked, and then browsed; a
fetch in progress reports its progress; a file that is not the published one, or too large, is
refused and nothing is written; offline, the tab says so in one line, at once the second time."""
import gzip
import hashlib
import http.server
import shutil
import socket
import threading
from pathlib import Path

import pytest
from conftest import write_dataset

from vit.data import fetch
from vit.data.specs import builtin_spec
from vit.ui import testset_tab
from vit.ui.models import Models

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A local file server holding a tiny MNIST test split (gzipped), named as the real one, and
    fetch.FILES describing it. Yields the served folder."""
    served = write_dataset(tmp_path / "served", compress=True) / "MNIST" / "raw"
    files = []
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        data = gzip.open(served / name).read()
        files.append((name, hashlib.sha256(data).hexdigest(), len(data)))
    monkeypatch.setitem(fetch.FILES, "mnist", tuple(files))
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(served), **k)  # noqa: E731
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("VIT_DATA_URL", f"http://127.0.0.1:{server.server_address[1]}/")
    monkeypatch.setattr(testset_tab, "FETCHES", fetch.Fetches())      # nothing remembered
    yield served
    server.shutdown()


@pytest.fixture
def models(tmp_path):
    """The small bundled MNIST model, copied (its test-answer cache is written beside it)."""
    shutil.copytree(ROOT / "checkpoints" / "mnist-small", tmp_path / "ck" / "mnist-small",
                    ignore=shutil.ignore_patterns(".cache", "snapshots"))
    return Models(tmp_path / "ck")


def test_a_missing_test_split_is_fetched_checked_and_browsed(mirror, models, tmp_path):
    data = tmp_path / "fresh-clone-data"
    said = []
    answers = testset_tab.Answers(models, data)
    status, *_ = answers.view("mnist-small", "all", -1, -1,
                              progress=lambda f, desc="": said.append((f, desc)))
    assert "80 images" in status
    assert (data / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz").read_bytes() == \
        (mirror / "t10k-images-idx3-ubyte.gz").read_bytes()
    fetching = [f for f, desc in said if "fetching the MNIST test set" in str(desc)]
    assert fetching and fetching[-1] <= 1.0 and any(f < 1.0 for f in fetching)
    assert not list(data.rglob("*.tmp"))


def test_offline_the_tab_says_so_in_one_line_and_at_once_the_second_time(models, tmp_path,
                                                                         monkeypatch):
    with socket.socket() as s:                     # a port nobody listens on: no network
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("VIT_DATA_URL", f"http://127.0.0.1:{port}/")
    monkeypatch.setattr(testset_tab, "FETCHES", fetch.Fetches())
    answers = testset_tab.Answers(models, tmp_path / "data")
    status, *_ = answers.view("mnist-small", "all", -1, -1)
    assert "could not be fetched" in status and "\n" not in status
    assert str(tmp_path) not in status                      # no server path
    calls = []
    monkeypatch.setattr(fetch, "_download", lambda *a: calls.append(a))
    status2, *_ = testset_tab.Answers(models, tmp_path / "data").view("mnist-small", "all", -1, -1)
    assert status2 == status and not calls                  # remembered, not tried again


def test_a_file_that_is_not_the_published_one_is_refused_and_nothing_written(mirror, tmp_path):
    with gzip.open(mirror / "t10k-labels-idx1-ubyte.gz", "rb") as f:
        labels = bytearray(f.read())
    labels[-1] ^= 1                                        # one label changed
    with gzip.open(mirror / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(bytes(labels))
    with pytest.raises(fetch.FetchError, match="not the published file"):
        fetch.fetch_test_split(builtin_spec("mnist"), tmp_path / "data")
    assert not (tmp_path / "data" / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").exists()


def test_a_file_larger_than_the_bound_is_refused(mirror, tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "MAX_BYTES", 1000)
    with pytest.raises(fetch.FetchError, match="larger than"):
        fetch.fetch_test_split(builtin_spec("mnist"), tmp_path / "data")
