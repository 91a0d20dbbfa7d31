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


def test_no_module_of_the_package_imports_itself_back():
    """No import circle anywhere in vit/ (module-level imports, `from vit.ui import page` counted
    as an import of vit.ui.page): each module can be read knowing only what it imports. The
    model file imports nothing of the project; the page's package imports nothing eagerly."""
    import ast
    root = ROOT
    graph = {}
    for f in (root / "vit").rglob("*.py"):
        name = ".".join(f.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        deps = set()
        for n in ast.parse(f.read_text()).body:
            if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "vit":
                deps |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
            elif isinstance(n, ast.Import):
                deps |= {a.name for a in n.names if a.name.split(".")[0] == "vit"}
        graph[name] = deps
    circles = []

    def walk(module, path):
        for d in sorted(graph.get(module, ())):
            if d in path:
                circles.append(path[path.index(d):] + [d])
            elif d in graph and len(path) < 40:
                walk(d, path + [d])
    for m in graph:
        walk(m, [m])
    assert not circles, circles[:3]
    assert not {d for d in graph["vit.model"] if d.startswith("vit")}
