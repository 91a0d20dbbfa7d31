"""From an input image to everything the app shows, for one loaded checkpoint.

`Predictor` wraps a `Checkpoint`: it lays any picture out the way the checkpoint's training data
was made (its data set's preprocessing style, at its image size), runs the model once with
attention, and hands back an `Analysis`. The app calls it; so do `vit.predict` and notebooks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import explain as ex
from .checkpoint import Checkpoint, open_checkpoint
from .preprocessing import normalize_image, to_model_image, to_rgb_image


@dataclass
class Analysis:
    image: np.ndarray             # (S, S) or (S, S, 3) in [0, 1]: what the model sees
    explanation: ex.Explanation

    @property
    def probs(self) -> np.ndarray:
        return self.explanation.probs


class Predictor:
    def __init__(self, checkpoint: Checkpoint | str, device=None):
        self.checkpoint = (checkpoint if isinstance(checkpoint, Checkpoint)
                           else open_checkpoint(checkpoint, device))
        self.model = self.checkpoint.model
        self.config = self.checkpoint.config                 # validated CheckpointConfig
        self.class_names: list[str] = self.checkpoint.class_names
        self.grid = self.model.cfg.grid
        self.size = self.model.cfg.image_size

    @property
    def device(self):
        return self.checkpoint.device

    def prepare(self, image) -> np.ndarray:
        """Any image the preprocessor accepts -> this model's input in [0, 1]: (S, S) for grey
        models, (S, S, 3) for colour ones. Raises PreprocessError."""
        if self.model.cfg.channels == 3:
            return to_rgb_image(image, self.size)
        return to_model_image(image, self.config.style, self.size)

    def fits(self, image: np.ndarray) -> bool:
        """Whether `image` is already this model's input shape (a test-set image, say)."""
        want = (self.size, self.size) + ((3,) if self.model.cfg.channels == 3 else ())
        return image.shape == want

    def analyse(self, image) -> Analysis:
        """Any image -> Analysis. Raises PreprocessError."""
        return self.analyse_input(self.prepare(image))

    def analyse_input(self, image: np.ndarray) -> Analysis:
        """An already prepared input (see `prepare`) -> Analysis."""
        x = normalize_image(image, self.config.mean, self.config.std)
        return Analysis(image, ex.explain(self.model, x))

    def label(self, probs: np.ndarray) -> dict[str, float]:
        """gr.Label's value: class name -> probability."""
        return {name: float(p) for name, p in zip(self.class_names, probs)}

    def card(self) -> str:
        """Markdown: what this model is and how it was made."""
        c, prov, m = self.config, self.config.provenance, self.model.cfg
        acc = c.test_accuracy
        stem = (f"3×3 conv stem ({m.stem_channels} channels: each token also sees a 1-px rim "
                f"around its patch), " if m.stem_channels else "")
        wall = prov.get("wall_time_seconds")
        rows = [
            ("Data set", c.title),
            ("Test accuracy", f"{100 * acc:.2f} %" if acc is not None else "not recorded"),
            ("Parameters", f"{self.model.num_parameters():,}"),
            ("Architecture", f"{m.depth} layers × {m.heads} heads, width {m.dim}, MLP {m.mlp_dim}, "
                             f"{stem}{m.image_size}×{m.image_size} input in {m.patch_size}-px patches "
                             f"({self.grid}×{self.grid} grid + [CLS] = {self.grid ** 2 + 1} tokens)"),
            ("Trained with", f"`{prov.get('command', '?')}`"),
            ("Commit", f"`{prov.get('commit', '?')}`"),
            ("Trained on", f"{prov.get('date', '?')}, {prov.get('epochs', '?')} epochs, "
                           + (f"{wall / 60:.0f} min" if isinstance(wall, (int, float)) else "? min")
                           + f" on {prov.get('device', '?')}"),
            ("Running on", str(self.device)),
        ]
        return "\n".join(["| | |", "|---|---|"] + [f"| **{k}** | {_cell(v)} |" for k, v in rows])


def _cell(text: str) -> str:
    """A config string inside a Markdown table cell: no line breaks or column bars from it."""
    return " ".join(str(text).split()).replace("|", "\\|")
