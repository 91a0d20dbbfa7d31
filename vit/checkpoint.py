"""Checkpoint I/O: a folder in the Hugging Face layout, `model.safetensors` + `config.json`.

Weights are tensors in safetensors (never a pickle, so loading can't run code); everything else is
JSON. Every write goes to a temporary file that is renamed over the target, so killing the trainer
at any moment leaves either the old file or the new one, never half of one.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import fields
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .model import ViT, ViTConfig

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT = "vit-explorer/1"
# Top-level keys a config.json may carry; anything else is a typo or a different format.
CONFIG_KEYS = {"format", "model", "dataset", "class_names", "normalization", "test_accuracy",
               "num_parameters", "training", "provenance"}
REQUIRED_KEYS = {"model", "class_names", "normalization"}


class CheckpointError(ValueError):
    """A checkpoint folder can't be loaded; the message is one line that names the problem."""


def atomic_write(path: Path, write) -> None:
    """Call write(tmp_path), then rename tmp over `path` (atomic on POSIX and Windows)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_json(path: Path, obj: dict) -> None:
    atomic_write(Path(path), lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2) + "\n"))


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict | None = None) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    atomic_write(Path(path), lambda tmp: save_file(tensors, tmp, metadata=metadata))


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file ({e})") from None


def save_checkpoint(folder, model: ViT, meta: dict) -> None:
    """Write the model's weights and `meta` (everything but "model", which comes from the model).

    Weights first, then config: a reader never sees a config that describes weights not yet there.
    """
    folder = Path(folder)
    config = {"format": FORMAT, "model": model.cfg.to_dict(),
              "num_parameters": model.num_parameters(), **meta}
    unknown = set(config) - CONFIG_KEYS
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}")
    save_tensors(folder / WEIGHTS, model.state_dict(), metadata={"format": FORMAT})
    save_json(folder / CONFIG, config)


def read_config(folder) -> dict:
    """config.json of a checkpoint folder, validated (unknown or missing keys are errors)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    path = folder / CONFIG
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found (a checkpoint needs {CONFIG} and {WEIGHTS})")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        raise CheckpointError(f"{path}: unknown config key(s) {', '.join(unknown)}")
    missing = sorted(REQUIRED_KEYS - set(config))
    if missing:
        raise CheckpointError(f"{path}: missing config key(s) {', '.join(missing)}")
    model_keys = {f.name for f in fields(ViTConfig)}
    if not isinstance(config["model"], dict):
        raise CheckpointError(f"{path}: \"model\" must be an object")
    unknown = sorted(set(config["model"]) - model_keys)
    if unknown:
        raise CheckpointError(f"{path}: unknown model config key(s) {', '.join(unknown)}")
    return config


def resolve_device(name: str | None = None) -> torch.device:
    """'auto' / None -> cuda, then mps, then cpu; anything else is taken as given."""
    name = name or os.environ.get("VIT_DEVICE") or "auto"
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r} (use auto, cpu, cuda, cuda:N or mps)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but CUDA is not available here")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None)
                                     and torch.backends.mps.is_available()):
        raise ValueError(f"device {name!r} asked for, but MPS is not available here")
    return device


def load_checkpoint(path, device=None) -> ViT:
    """Load a checkpoint folder -> ViT in eval mode on `device`, with `.config` (the whole
    config.json) and `.class_names` attached. Raises CheckpointError with a one-line message."""
    folder = Path(path)
    config = read_config(folder)
    try:
        cfg = ViTConfig(**config["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{folder / CONFIG}: invalid model config ({e})") from None
    model = ViT(cfg)
    weights = load_tensors(folder / WEIGHTS)
    expected = model.state_dict()
    for name, tensor in expected.items():
        if name not in weights:
            raise CheckpointError(
                f"{folder}: config.json does not match the weights: tensor {name} "
                f"(shape {tuple(tensor.shape)}) is missing from {WEIGHTS}")
        if weights[name].shape != tensor.shape:
            raise CheckpointError(
                f"{folder}: config.json does not match the weights: {name} has shape "
                f"{tuple(weights[name].shape)} in {WEIGHTS} but the config implies "
                f"{tuple(tensor.shape)}")
    extra = sorted(set(weights) - set(expected))
    if extra:
        raise CheckpointError(f"{folder}: config.json does not match the weights: unexpected "
                              f"tensor {extra[0]} in {WEIGHTS}")
    model.load_state_dict(weights)
    names = config["class_names"]
    if len(names) != cfg.num_classes:
        raise CheckpointError(f"{folder / CONFIG}: {len(names)} class names for "
                              f"{cfg.num_classes} classes")
    model.config = config
    model.class_names = list(names)
    return model.to(resolve_device(device) if not isinstance(device, torch.device) else device).eval()
