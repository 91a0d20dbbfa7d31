"""The project as `pip install .` leaves it: a wheel built in a temporary folder and installed into
a fresh virtual environment (its other packages from this one's, nothing downloaded) gives every
CLI as a command — vit-train, vit-evaluate, vit-predict, vit-convert, vit-export, vit-publish,
vit-data, vit-fit-typical, vit-sweep — each answering --help, vit-predict reading a digit with a bundled
checkpoint, and the page's style and canvas script inside the package (the app reads them at start-up);
the installed app finding the bundled checkpoints; every command run from a folder of the user's own
with relative paths, its files landing there."""
import shutil
import site
import subprocess
import sys

import pytest
from conftest import ROOT

from vit.data.examples import render_digit

pytestmark = pytest.mark.package

CLIS = ["vit-train", "vit-evaluate", "vit-predict", "vit-convert", "vit-export", "vit-publish",
        "vit-data", "vit-fit-typical", "vit-fit-faithfulness", "vit-digit-check", "vit-sweep"]


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    # Built from a copy of what the wheel is made of: setuptools writes build/ and *.egg-info
    # beside the sources, which must not appear in the checkout.
    source = tmp / "source"
    shutil.copytree(ROOT / "vit", source / "vit", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "checkpoints", source / "checkpoints",     # the wheel's data-files
                    ignore=shutil.ignore_patterns("best", "snapshots", "train_state"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(tmp / "dist")], check=True,
                   capture_output=True, cwd=tmp, timeout=300)
    (wheel,) = (tmp / "dist").glob("*.whl")
    # Its other packages are this interpreter's (a virtual environment's, where the tests run in
    # one, else the system's): `--system-site-packages` would reach the system's only, and a
    # venv's torch would be missing. addsitedir also reads their .pth files.
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "env")], check=True, timeout=120)
    (own,) = (tmp / "env" / "lib").glob("python*/site-packages")
    outer = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    (own / "zz_outer_packages.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in outer) + "\n")
    subprocess.run([str(tmp / "env" / "bin" / "pip"), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return tmp / "env" / "bin", tmp


# Each installed command's entry point, called with --help as its script calls it: one Python for
# all of them (a new one for each was ~4 s of imports, 11 times). Eight of the scripts also run
# for real from a user's folder (the last test).
HELP_OF_EACH = """
import contextlib, io, sys
from importlib.metadata import entry_points
for e in entry_points(group="console_scripts"):
    if e.name in sys.argv[1:]:
        out = io.StringIO()
        sys.argv[0] = e.name
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            e.load()(["--help"])
        print(e.name, out.getvalue().startswith("usage:"))
"""


def test_every_cli_is_installed(venv):
    bin_dir, tmp = venv
    assert all((bin_dir / cli).is_file() for cli in CLIS)
    r = subprocess.run([str(bin_dir / "python"), "-c", HELP_OF_EACH, *CLIS], capture_output=True,
                       text=True, cwd=tmp, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(r.stdout.split("\n")[:-1]) == sorted(f"{cli} True" for cli in CLIS), r.stdout


def test_the_installed_package_reads_a_digit_and_has_the_pages_files(venv):
    bin_dir, tmp = venv
    render_digit("4").save(tmp / "4.png")
    r = subprocess.run([str(bin_dir / "vit-predict"), str(tmp / "4.png"), "--checkpoint",
                        str(ROOT / "checkpoints" / "mnist")], capture_output=True, text=True,
                       cwd=tmp, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(f"{tmp / '4.png'}: 4 "), r.stderr[-500:]
    where = subprocess.run([str(bin_dir / "python"), "-c", "import vit.ui.app as a; "
                            "print(a.__file__, len(a.CSS) > 0)"], capture_output=True, text=True,
                           cwd=tmp, timeout=120)
    assert where.returncode == 0, where.stderr[-500:]
    path, has_css = where.stdout.split()
    assert str(ROOT) not in path and has_css == "True"


def run(bin_dir, cli, *args, cwd, timeout=300):
    r = subprocess.run([str(bin_dir / cli), *map(str, args)], capture_output=True, text=True,
                       cwd=cwd, timeout=timeout)
    assert r.returncode == 0, f"{cli} {' '.join(map(str, args))}: {r.stderr[-800:]}"
    return r.stdout


def test_the_installed_app_finds_the_bundled_checkpoints(venv):
    """Issue 37: an installed create_app() looked for checkpoints/ inside site-packages."""
    bin_dir, tmp = venv
    code = ("from vit.ui import create_app; d = create_app(device='cpu'); "
            "print(' '.join(d.page.models.names)); import vit.storage as s; print(s.BUNDLED)")
    out = run(bin_dir, "python", "-c", code, cwd=tmp).split("\n")
    assert sorted(out[0].split()) == ["cifar10", "fashion-mnist", "mnist"], out
    assert str(ROOT) not in out[1] and "share/vit-explorer/checkpoints" in out[1]


def test_every_command_works_from_the_users_folder_with_relative_paths(venv):
    """Issue 37: run from one's own folder with a relative --out, the sweep trained into the
    repository's runs/ and reported both runs failed. Each installed command, from a folder of
    the user's with relative paths: its files land there, nothing in the repository."""
    from conftest import TINY_MODEL, write_dataset
    bin_dir, tmp = venv
    work = tmp / "mine"
    write_dataset(work / "data")
    render_digit("4").save(work / "4.png")
    before = set((ROOT / "runs").rglob("*")) if (ROOT / "runs").exists() else set()
    small = ["--batch-size", "40", "--eval-batch-size", "40", "--val-size", "40",
             "--negatives", "16", "--snapshots", "none", "--threads", "1"]
    tiny = [*TINY_MODEL, "--epochs", "1", *small]
    run(bin_dir, "vit-train", "--data-dir", "data", "--out", "runs/a", *tiny, cwd=work)
    assert (work / "runs" / "a" / "model.safetensors").is_file()
    assert "accuracy" in run(bin_dir, "vit-evaluate", "--checkpoint", "runs/a", "--data-dir",
                             "data", cwd=work).lower()
    assert run(bin_dir, "vit-predict", "4.png", "--checkpoint", "runs/a", cwd=work).startswith("4.png")
    run(bin_dir, "vit-export", "runs/a", "--out", "a.onnx", cwd=work)
    assert (work / "a.onnx").is_file()
    run(bin_dir, "vit-fit-typical", "runs/a", "--data-dir", "data", cwd=work)
    run(bin_dir, "vit-publish", "card", "runs/a", cwd=work)
    assert (work / "runs" / "a" / "README.md").is_file()
    run(bin_dir, "vit-data", "--data-dir", "data", "--no-download", cwd=work)
    run(bin_dir, "vit-sweep", "--data", "mnist", "--data-dir", "data", "--vary", "heads=1,2",
        "--epochs", "1", "--out", "sw", "--threads", "1", "--jobs", "1", "--", "--dim", "16",
        "--depth", "1", "--mlp-dim", "16", *small[:-2], cwd=work, timeout=600)
    assert (work / "sw" / "results.csv").is_file()
    assert len(list((work / "sw").glob("*/model.safetensors"))) == 2
    after = set((ROOT / "runs").rglob("*")) if (ROOT / "runs").exists() else set()
    assert after == before, "a command wrote into the repository"
