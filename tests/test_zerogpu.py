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

MARKED = {"vit.inference": ["_explain", "_glance", "_relevance", "_occlusion_maps",
                            "_deletion_curve", "_ablate"],
          "vit.ui.mechanism_panel": ["_walk_through", "_mean_attention_distance"],
          "vit.testset": ["_predict_logits"]}


def test_off_zero_gpu_every_pass_is_the_plain_function(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)

    def forward(x):
        return x + 1
    assert gpu_task(forward) is forward
    import vit.inference
    from vit.explain.attention import explain
    assert vit.inference._explain is explain and not hasattr(vit.inference._glance, "zerogpu")


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
    assert r.returncode == 0 and "wrapped 9" in r.stdout, r.stderr[-1500:]
