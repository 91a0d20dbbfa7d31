"""`python -m vit.predict` over a batch of files, some of them hostile (a bomb, an empty file):
each bad file gets one line, the others still get their answers."""
import pytest
from conftest import ROOT, run_module
from PIL import Image
from test_preprocess import _png_header_only

from vit.data.examples import render_digit


@pytest.mark.process
def test_a_bomb_in_the_batch_does_not_stop_the_others(tmp_path):
    seven = Image.new("L", (400, 400), 255)
    seven.paste(render_digit("7", 300, 24), (50, 50))
    seven.save(tmp_path / "seven.png")
    (tmp_path / "bomb.png").write_bytes(_png_header_only(60_000, 60_000))    # PIL would raise
    (tmp_path / "empty.png").write_bytes(b"")
    r = run_module("vit.predict", tmp_path / "bomb.png", tmp_path / "empty.png", tmp_path / "seven.png",
                   "--checkpoint", ROOT / "checkpoints" / "mnist", "--device", "cpu")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "seven.png: 7 " in r.stdout
    errors = r.stderr.strip().splitlines()
    assert len(errors) == 2 and "bomb.png: " in errors[0] and "limit is 40 megapixels" in errors[0]
    assert "empty.png: The file is empty" in errors[1]
