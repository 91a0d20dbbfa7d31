"""The project as `pip install .` leaves it: a wheel built in a temporary folder and installed into
a fresh virtual environment (its other packages from this one's, nothing downloaded) gives every
CLI as a command — vit-train, vit-evaluate, vit-predict, vit-convert, vit-export, vit-publish,
vit-data, vit-fit-typical, vit-sweep — each answering --help, vit-predict reading a digit with a bundled
checkpoint, and the page's style and canvas script inside the package (the app reads them at start-up)."""
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from vit.data.examples import render_digit

CLIS = ["vit-train", "vit-evaluate", "vit-predict", "vit-convert", "vit-export", "vit-publish",
        "vit-data", "vit-fit-typical", "vit-sweep"]


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    # Built from a copy of what the wheel is made of: setuptools writes build/ and *.egg-info
    # beside the sources, which must not appear in the checkout.
    source = tmp / "source"
    shutil.copytree(ROOT / "vit", source / "vit", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(tmp / "dist")], check=True,
                   capture_output=True, cwd=tmp, timeout=300)
    (wheel,) = (tmp / "dist").glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp / "env")],
                   check=True, timeout=120)
    subprocess.run([str(tmp / "env" / "bin" / "pip"), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return tmp / "env" / "bin", tmp


@pytest.mark.parametrize("cli", CLIS)
def test_every_cli_is_installed(venv, cli):
    bin_dir, tmp = venv
    r = subprocess.run([str(bin_dir / cli), "--help"], capture_output=True, text=True, cwd=tmp,
                       timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr[-500:]


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
