"""The CUDA paths, run where a GPU is: `python -m pytest -m gpu` (CI has none; there every test but
the first is skipped). The trainer on `--device cuda` (eager and `--compile reduce-overhead`), its
checkpoint answering the same on the CPU, the app's Predictor giving the CPU's answers on CUDA, and
`torchrun` with NCCL: one process per GPU, or one line saying why not."""
import csv
import json

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, run_module
from test_distributed import torchrun

from vit.data.examples import render_digit
from vit.inference import Predictor
from vit.training import distributed

pytestmark = pytest.mark.gpu

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
ARGS = ["--no-download", "--epochs", "2", "--batch-size", "32", "--lr", "3e-3",
        "--eval-batch-size", "40", "--val-size", "40", "--negatives", "16", *TINY_MODEL]


def test_more_processes_than_gpus_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    d = distributed.Dist(rank=1, world=2, local_rank=1)
    problem = distributed.gpu_problem(d, torch.device("cuda"))
    assert "2 processes" in problem and "1 GPU" in problem and "--nproc_per_node=1" in problem
    assert distributed.gpu_problem(distributed.Dist(0, 2, 0), torch.device("cuda")) is None
    assert distributed.gpu_problem(d, torch.device("cpu")) is None


def _test_accuracy_on_cpu(folder, data) -> float:
    from vit.checkpoint import open_checkpoint
    from vit.data.loading import load_split
    ck = open_checkpoint(folder, "cpu")
    test = load_split("mnist", data, train=False, download=False)
    x = test.images.float().div(255).unsqueeze(1)
    mean, std = ck.config.mean[0], ck.config.std[0]
    with torch.no_grad():
        pred = ck.model((x - mean) / std).argmax(1)
    return (pred == test.labels).float().mean().item()


@needs_cuda
@pytest.mark.parametrize("compile_mode", ["none", "reduce-overhead"])
def test_trains_on_cuda_and_the_checkpoint_answers_alike_on_the_cpu(tiny_data, tmp_path, compile_mode):
    out = tmp_path / "ck"
    r = run_module("vit.train", "--data-dir", tiny_data, "--out", out, *ARGS, "--device", "cuda",
                   "--compile", compile_mode, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["provenance"]["device"].startswith("cuda")
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    # The GPU tested in bf16; the CPU in float32: at most a couple of test images may flip.
    on_cpu = _test_accuracy_on_cpu(out, tiny_data)
    assert abs(on_cpu - cfg["test_accuracy"]) <= 0.05, (on_cpu, cfg["test_accuracy"])


@needs_cuda
@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "cifar10"])
def test_the_app_answers_the_same_on_cuda(name):
    cpu, gpu = Predictor(f"checkpoints/{name}", "cpu"), Predictor(f"checkpoints/{name}", "cuda")
    assert gpu.device.type == "cuda"
    picture = np.asarray(render_digit("7").convert("RGB" if name == "cifar10" else "L"))
    a, b = cpu.analyse(picture), gpu.analyse(picture)
    assert a.probs.argmax() == b.probs.argmax()
    assert np.abs(a.probs - b.probs).max() < 1e-3
    assert np.abs(a.explanation.attn - b.explanation.attn).max() < 1e-3


@needs_cuda
def test_torchrun_with_nccl_one_process_per_gpu(tiny_data, tmp_path):
    gpus = torch.cuda.device_count()
    r = torchrun(tiny_data, tmp_path / "ck", "--device", "cuda", nproc=2)
    if gpus >= 2:
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Weights identical on all 2 processes" in r.stdout
    else:      # NCCL puts one process on one GPU: the job stops with one line
        assert r.returncode != 0
        assert ("error: torchrun started 2 processes on this machine, which has 1 GPU(s): NCCL "
                "needs a GPU per process" in r.stderr), r.stderr[-3000:]


@needs_cuda
def test_torchrun_of_one_process_trains_on_cuda(tiny_data, tmp_path):
    r = torchrun(tiny_data, tmp_path / "ck", "--device", "cuda", nproc=1)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "ck" / "model.safetensors").is_file()

