"""Ready for a ZeroGPU Space, tested both ways with the `spaces` package installed: off a ZeroGPU
Space every model pass is the plain function (nothing wrapped, nothing imported); on one
(SPACES_ZERO_GPU=true, in a subprocess: no real ZeroGPU here) every pass the app makes — the
forward with attention, the fused answer, relevance, occlusion, the deletion curve, heads
switched off, the step-by-step walk, attention distances, the test-set pass — is wrapped by
`spaces.GPU`, app.py imports `spaces` before torch, and the handlers that change a visitor's
page are not wrapped (ZeroGPU runs a wrapped call in a worker process)."""
import subprocess
import sys

import pytest
from conftest import ROOT

from vit.device import gpu_task

spaces = pytest.importorskip("spaces")



def marked_passes() -> dict[str, list[str]]:
    """Every `NAME = gpu_task(...)` in the library, by module: enumerated from the source, so a
    pass added later is checked too (a hand-kept list checked 9 of 12)."""
    import ast
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "vit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "id", None) == "gpu_task":
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found.setdefault(module, []).extend(t.id for t in node.targets)
    return found


MARKED = marked_passes()


def test_off_zero_gpu_every_pass_is_the_plain_function(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)

    def forward(x):
        return x + 1
    assert gpu_task(forward) is forward
    import vit.inference
    from vit.explain.attention import explain
    assert vit.inference._explain is explain and not hasattr(vit.inference._glance, "zerogpu")


@pytest.mark.process
def test_on_zero_gpu_every_pass_is_wrapped_and_no_handler_is(tmp_path):
    probe = f"""
import importlib, sys
import app
assert "spaces" in sys.modules, "app.py imports spaces first"
marked = {MARKED!r}
for module, names in marked.items():
    m = importlib.import_module(module)
    for name in names:
        f = getattr(m, name)
        assert hasattr(f, "zerogpu"), (module, name)
from vit.ui.page import Page
assert not hasattr(Page.analyse_drawing, "zerogpu")
print("wrapped", sum(map(len, marked.values())))
"""
    env = {"SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": "http://127.0.0.1:9",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    count = sum(map(len, MARKED.values()))
    assert count >= 12 and {"_lens", "_score", "_frames"} <= set(MARKED["vit.inference"])
    assert r.returncode == 0 and f"wrapped {count}" in r.stdout, r.stderr[-1500:]
