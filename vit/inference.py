"""From an input image to everything the app shows, for one loaded checkpoint.

`Predictor` wraps a checkpoint: it preprocesses the way the checkpoint's data set was made, runs
the model once with attention, and renders the pictures. The app calls it; so can a notebook.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import explain as ex
from .checkpoint import CheckpointError, load_checkpoint, read_config, resolve_device
from .preprocess import normalize_image, to_model_image


@dataclass
class Analysis:
    img28: np.ndarray             # (28, 28) in [0, 1]: what the model sees
    explanation: ex.Explanation

    @property
    def probs(self) -> np.ndarray:
        return self.explanation.probs


def find_checkpoints(root="checkpoints") -> dict[str, Path]:
    """name -> folder for every sub-folder of `root` holding a config.json, MNIST first."""
    root = Path(root)
    found = {p.parent.name: p.parent for p in sorted(root.glob("*/config.json"))}
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != "mnist", kv[0])))


class Predictor:
    def __init__(self, folder, device=None):
        self.folder = Path(folder)
        self.device = resolve_device(device)
        self.model = load_checkpoint(self.folder, self.device)
        self.config = self.model.config
        self.class_names: list[str] = self.model.class_names
        norm = self.config["normalization"]
        self.mean, self.std = float(norm["mean"]), float(norm["std"])
        self.style = "objects" if self.config.get("dataset") == "fashion-mnist" else "digits"
        self.grid = self.model.cfg.grid

    def analyse(self, image) -> Analysis:
        """Any image the preprocessor accepts -> Analysis. Raises PreprocessError."""
        img28 = to_model_image(image, self.style)
        return self.analyse_28(img28)

    def analyse_28(self, img28: np.ndarray) -> Analysis:
        x = normalize_image(img28, self.mean, self.std)
        return Analysis(img28, ex.explain(self.model, x))

    def label(self, probs: np.ndarray) -> dict[str, float]:
        """gr.Label's value: class name -> probability."""
        return {name: float(p) for name, p in zip(self.class_names, probs)}

    def card(self) -> str:
        """Markdown: what this model is and how it was made."""
        c, prov = self.config, self.config.get("provenance", {})
        m = c["model"]
        acc = c.get("test_accuracy")
        rows = [
            ("Data set", c.get("dataset", "?")),
            ("Test accuracy", f"{100 * acc:.2f} %" if acc is not None else "not recorded"),
            ("Parameters", f"{c.get('num_parameters', self.model.num_parameters()):,}"),
            ("Architecture", f"{m['depth']} layers × {m['heads']} heads, width {m['dim']}, "
                             f"MLP {m['mlp_dim']}, "
                             + (f"3×3 conv stem ({self.model.cfg.stem_channels} channels: each token "
                                f"also sees a 1-px rim around its patch), "
                                if self.model.cfg.stem_channels else "")
                             + f"{m['patch_size']}-px patches "
                             f"({self.grid}×{self.grid} grid + [CLS] = {self.grid ** 2 + 1} tokens)"),
            ("Trained with", f"`{prov.get('command', '?')}`"),
            ("Commit", f"`{prov.get('commit', '?')}`"),
            ("Trained on", f"{prov.get('date', '?')}, {prov.get('epochs', '?')} epochs, "
                           f"{prov.get('wall_time_seconds', 0) / 60:.0f} min on {prov.get('device', '?')}"),
            ("Running on", str(self.device)),
        ]
        return "\n".join(["| | |", "|---|---|"] + [f"| **{k}** | {v} |" for k, v in rows])
