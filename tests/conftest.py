"""Shared fixtures: a tiny IDX data set written by the tests themselves, and helpers."""
from __future__ import annotations

import atexit
import functools
import gzip
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Nothing in the tests may reach the network: the Hub (vit/hub.py) is read from caches the tests
# lay out. Set before huggingface_hub is imported (it reads this once); subprocesses inherit it.
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
HAS_MNIST = (SHARED_DATA / "MNIST" / "raw" / "t10k-images-idx3-ubyte").is_file()

# The bundled models' test-set passes, kept for the whole run in one folder that every xdist
# worker shares: each worker is a process of its own, and each computed the passes again (the
# clothing model's alone is ~70 s of one core). The controller, or a run without workers, makes
# the folder; the workers it starts inherit its name.
if "VIT_TEST_PASSES" not in os.environ:
    os.environ["VIT_TEST_PASSES"] = tempfile.mkdtemp(prefix="vit-test-passes-")
    atexit.register(shutil.rmtree, os.environ["VIT_TEST_PASSES"], ignore_errors=True)


@functools.lru_cache(maxsize=None)
def bundled_test_pass(name: str):
    """(logits (N, C), [CLS] tokens (N, D), labels (N,)) of bundled checkpoint `name` on its
    data set's full test split from ../shared/data, on the CPU: computed once per test run
    (several test modules, on either worker, score the same). Raises DataError without the data."""
    from filelock import FileLock
    kept = Path(os.environ["VIT_TEST_PASSES"]) / f"{name}.npz"
    with FileLock(f"{kept}.lock"):         # the other worker waits for it, not computes it again
        if not kept.is_file():
            logits, features, labels = _test_pass(name)
            np.savez(kept.with_suffix(".tmp.npz"), logits=logits.numpy(), features=features,
                     labels=labels.numpy())
            kept.with_suffix(".tmp.npz").rename(kept)
        with np.load(kept) as f:
            return torch.from_numpy(f["logits"]), f["features"], torch.from_numpy(f["labels"])


def _test_pass(name: str):
    from vit.checkpoint import open_checkpoint
    from vit.data.loading import load_split
    from vit.explain.typical import cls_features
    ck = open_checkpoint(ROOT / "checkpoints" / name, "cpu")
    test = load_split(ck.config.dataset, SHARED_DATA, train=False)
    c = ck.config
    features = cls_features(ck.model, test.images, c.mean, c.std, 1000)
    with torch.no_grad():
        logits = ck.model.head(torch.from_numpy(features)).float()
    return logits, features, test.labels


def bundled_test_logits(name: str):
    """(logits, labels) of `bundled_test_pass`."""
    logits, _, labels = bundled_test_pass(name)
    return logits, labels


# Arguments for a model small enough to train in seconds: a narrow conv stem, and a CNN teacher of
# 4 channels trained one epoch (the default, 32 channels for 5 epochs, was half of each tiny run's
# time: docs/benchmarks.md, "The test suite"). Every part of a real run still runs.
TINY_MODEL = ["--dim", "16", "--depth", "2", "--heads", "2", "--mlp-dim", "32", "--stem-channels", "8",
              "--teacher-width", "4", "--teacher-epochs", "1"]


class Lazy:
    """A module imported when a test first uses it, not when the tests are collected: every run
    (every xdist worker) collects every module, and torchvision alone takes ~4 s to import."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        import importlib
        return getattr(importlib.import_module(self._name), attr)


# pytest-xdist's controller loads this file too, and runs no test: torch (~3 s) waits for a test.
torch = Lazy("torch")


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> None:
    """IDX: 0x00 0x00 0x08 ndim, big-endian int32 sizes, then uint8 data."""
    data = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape) \
        + array.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def synthetic_digits(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n 28x28 white-on-black renderings of the project's own stroke digits, jittered."""
    from vit.data.examples import render_digit
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = np.empty((n, 28, 28), np.uint8)
    for i, d in enumerate(labels):
        im = render_digit(str(d), size=28, width=int(rng.integers(2, 4)),
                          offset=tuple(rng.uniform(-8, 8, 2)), angle=float(rng.uniform(-12, 12)))
        images[i] = 255 - np.asarray(im)
    return images, labels


def write_dataset(root: Path, folder: str = "MNIST", n_train: int = 320, n_test: int = 80,
                  flat: bool = False, compress: bool = False) -> Path:
    """A tiny data set in torchvision's layout (root/folder/raw/...) or flat in root."""
    raw = root if flat else root / folder / "raw"
    for train, n, seed in ((True, n_train, 1), (False, n_test, 2)):
        images, labels = synthetic_digits(n, seed)
        prefix = "train" if train else "t10k"
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images, compress)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels, compress)
    return root


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"))


# The trainer's prepared-data cache (vit/training/prepared.py): one per test session, never the
# user's own, so no test reads what another session (or a person) left there.
os.environ["VIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="vit-test-cache-")
atexit.register(shutil.rmtree, os.environ["VIT_CACHE_DIR"], ignore_errors=True)

# create_app sets torch's thread count for the whole process (one per request, VIT_THREADS):
# each test starts from torch's own default instead of whatever an earlier test's app left (the
# full test sets were scored on one thread of two after any app test: ~1.8x slower).
# Under pytest-xdist each worker is a process of its own: one thread each, or two workers on two
# cores would run four threads that fight.
@pytest.fixture(scope="session", autouse=True)
def _default_threads() -> int:
    """Read before any other fixture of the first test (a session fixture comes first), so
    before any app a module's fixture builds has changed it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)
    return torch.get_num_threads()


@pytest.fixture(autouse=True)
def _torch_threads(_default_threads):
    torch.set_num_threads(_default_threads)
    yield


def run_module(module: str, *args, timeout: float = 300, cwd=None, **kw) -> subprocess.CompletedProcess:
    """`python -m module args…` from the project root, as a user would type it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env, **kw)


# Where `python -m package`'s main() is (pyproject.toml's [project.scripts]): vit/data/__main__.py
# runs the command when imported.
MAINS = {"vit.data": "vit.data.loading", "vit.sweep": "vit.sweep.__main__"}


def run_main(capsys, module: str, *args, cwd=None) -> subprocess.CompletedProcess:
    """What `run_module(module, *args)` answers (returncode, stdout, stderr), from the command's
    own main(argv) in this process: milliseconds, not the seconds a new Python takes to import
    torch. For the checks of what a command refuses; each command keeps one test of the real
    process. argparse's exit is the exit status, as in the process; an exception is not caught
    (the test fails with it, as the process would print a traceback). What a command may change
    for the whole process is put back: the working folder (the project root meanwhile, as for
    run_module), os.environ, torch's threads and random state, the Ctrl-C and SIGTERM handlers."""
    import importlib
    import signal
    command = importlib.import_module(MAINS.get(module, module))
    folder, environ, threads = os.getcwd(), dict(os.environ), torch.get_num_threads()
    rng = torch.random.get_rng_state()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    capsys.readouterr()                                   # only this command's output
    os.chdir(cwd or ROOT)
    try:
        try:
            code = command.main([str(a) for a in args])
        except SystemExit as e:                           # argparse: 2, --help: 0
            code = e.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)              # as Python does with sys.exit("words")
                code = 1
        code = 0 if code is None else code
    finally:
        os.chdir(folder)
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
        torch.set_num_threads(threads)
        torch.random.set_rng_state(rng)
        for s, h in handlers.items():
            signal.signal(s, h)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([module, *map(str, args)], code, out, err)


ARTIFACTS = ROOT / "artifacts"        # CI keeps this folder's contents in its log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(args: list[str], env: dict, out=subprocess.DEVNULL, where: str = "") -> tuple:
    """`python app.py *args` on a free loopback port with `env` added, once it accepts
    connections: (process, url). Fails the test if it has not started within 120 s."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_ANALYTICS_ENABLED": "False", **env}
    proc = subprocess.Popen([sys.executable, "app.py", *args], cwd=ROOT, env=env, stdout=out,
                            stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}/"
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"python app.py {' '.join(args)} did not start within 120 s; {where}")
            time.sleep(0.5)


@pytest.fixture(scope="module")
def browser():
    """One Playwright and one headless Chromium for a test module (a second sync Playwright in
    the same thread is refused). Screenshots go to artifacts/browser/."""
    from playwright.sync_api import sync_playwright
    (ARTIFACTS / "browser").mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                              args=["--headless", "--no-sandbox", "--disable-gpu",
                                    "--disable-background-networking"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def app_data(tmp_path_factory) -> Path:
    """The tests' server's data: the tiny MNIST, and a tiny Fashion-MNIST (of the same digits)
    beside it. Without one here the server read Debian's Fashion-MNIST, where installed, and
    scored its 10,000 test images before it was ready: ~70 s of a core in each worker's server,
    at every start in a fresh checkout (the answers' cache is not committed)."""
    root = write_dataset(tmp_path_factory.mktemp("appdata"))
    return write_dataset(root, "FashionMNIST")


@pytest.fixture(scope="session")
def app_server(app_data):
    """`python app.py` on a free port, as the README starts it. Yields (process, url).
    Its test-set tab browses the tiny data sets (80 images: quick to test the first time)."""
    ARTIFACTS.mkdir(exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER")            # one server per xdist worker
    name = f"app-server-{worker}.log" if worker else "app-server.log"
    log = open(ARTIFACTS / name, "w")
    # The suite uploads far more a minute than a person (the limit: tests/test_attacks.py).
    proc, url = start_app([], {"VIT_DATA_DIR": str(app_data), "VIT_UPLOADS_PER_MINUTE": "10000"},
                          log, f"see artifacts/{name}")
    # Its start-up work first, as a visitor a minute later finds it: a first request sent during
    # it once waited past the client's 5 s timeout on a busy CI machine.
    deadline = time.time() + 120
    while "* Warm:" not in (ARTIFACTS / name).read_text() and time.time() < deadline:
        time.sleep(0.5)
    yield proc, url
    proc.terminate()
    proc.wait(timeout=20)
    log.close()
    # The server must never print a traceback at a user, whatever the tests sent it. (uvicorn
    # logs a browser that closes mid-upload as ClientDisconnect: the client left, nothing broke.)
    blocks = (ARTIFACTS / name).read_text().split("Traceback (most recent call last)")
    crashes = [b for b in blocks[1:] if "starlette.requests.ClientDisconnect" not in b]
    assert not crashes, crashes[0][-2000:]


# Python source defining peak(): this process's peak resident memory in KB. (VmHWM belongs to
# the process's own address space; ru_maxrss would carry pytest's peak into a child process.)
PEAK = ("def peak():\n"
        "    return int(next(l for l in open('/proc/self/status')"
        " if l.startswith('VmHWM')).split()[1])\n")


# --- lanes ------------------------------------------------------------------------------------
# Plain `python -m pytest` runs the fast lane (pyproject.toml deselects the marks below);
# `python -m pytest -m ""` runs every lane, as CI does; `-m browser` (or server, train, data) one
# lane. A test says its lane with a mark (`pytestmark = pytest.mark.data` for a whole module):
# what it does, never guessed from its source. browser: drives Chromium; server: starts
# `python app.py`; train: trains for real; data: needs the full data sets or scores a bundled
# model on a whole test set or held-out family; package: builds and installs the wheel; process:
# starts a new Python process (seconds of imports each: a command as typed, a fresh import, a
# memory bound); gpu: the CUDA paths.
LANES = ("browser", "server", "train", "data", "package", "process", "gpu")
# What starts a new Python process in a test's own source: such a test left in the fast lane
# fails collection (helpers it calls are not read; run_main runs a command in this process).
STARTS_PROCESS = ("run_module(", "sys.executable", "subprocess.run(", "subprocess.Popen(",
                  "subprocess.check_")
# Fixtures that start a server or train, and the lanes a test using one may be in (the browser
# drives the server): a test that uses one without such a mark fails collection, so a new test
# cannot land in the fast lane (or another lane) by mistake.
FIXTURE_LANES = {"app_server": ("server", "browser"), "trained": ("train",), "ddp_run": ("train",),
                 "snapped": ("train",), "swept": ("train",)}


# Module fixtures that train or install (tens of seconds each): the tests that use one are one
# xdist group, run by one worker (`--dist loadgroup`, pyproject.toml), or each worker that ran
# one of them built its own copy (the sweep's fixture was trained twice in a run).
BUILT_ONCE = ("trained", "ddp_run", "snapped", "swept", "venv")


@pytest.hookimpl(tryfirst=True)            # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    import inspect
    wrong = []
    for item in items:
        built = [f for f in BUILT_ONCE if f in getattr(item, "fixturenames", ())]
        if built:
            item.add_marker(pytest.mark.xdist_group(built[0]))
        marks = {m.name for m in item.iter_markers()} & set(LANES)
        function = getattr(item, "function", None)
        if not marks and function is not None:
            source = inspect.getsource(function)
            if any(s in source for s in STARTS_PROCESS):
                wrong.append(f"{item.nodeid} starts a Python process: mark it process")
        for fixture, lanes in FIXTURE_LANES.items():
            if fixture in getattr(item, "fixturenames", ()) and not marks & set(lanes):
                wrong.append(f"{item.nodeid} uses the {fixture} fixture: mark it {lanes[0]}")
    if wrong:
        raise pytest.UsageError("tests without their lane's mark:\n" + "\n".join(wrong))
