"""The README's library example, run exactly as written (a documented call that raises is a bug)."""
import re

import torch
from conftest import ROOT

from vit.data.examples import render_digit


def test_readme_library_example_runs_as_written():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## The library.*?```python\n(.*?)```", readme, re.S).group(1)
    scope = {"image": render_digit("3")}
    exec(compile(block, "README.md", "exec"), scope)
    assert scope["logits"].argmax().item() == 3
    assert scope["attn"].shape == (1, 6, 4, 50, 50)
    probs = scope["probs"]
    assert probs.shape == (1, 10) and torch.allclose(probs.sum(), torch.tensor(1.0))
    assert scope["ckpt"].class_names[0] == "T-shirt/top"
