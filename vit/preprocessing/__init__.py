"""From any picture to a model's input: `preprocess(image, config=...)`.

decode.py reads it (bounded), layout.py lays out a drawing, scan or photo of paper (paper.py) like
the training data, colour.py resizes colour pictures; here the model's normalisation is added.
Everything is a pure function of its input: the app, the CLIs and the tests call the same code.
"""
from __future__ import annotations

import numpy as np
import torch

from vit.preprocessing.colour import to_rgb_image
from vit.preprocessing.decode import _never_crashes
from vit.preprocessing.layout import to_model_image
from vit.preprocessing.styles import DIGITS, Style, style_of


def _per_channel(v, channels: int) -> torch.Tensor:
    t = torch.as_tensor(v, dtype=torch.float32).reshape(-1)
    return t.expand(channels) if t.numel() == 1 else t


def normalize_image(img: np.ndarray, mean=0.1307, std=0.3081) -> torch.Tensor:
    """(S, S) grey or (S, S, C) in [0, 1] -> (1, C, S, S) tensor normalised per channel."""
    x = torch.from_numpy(np.ascontiguousarray(img, np.float32))
    x = x[None] if x.dim() == 2 else x.permute(2, 0, 1)                 # (C, S, S)
    C = x.shape[0]
    return ((x - _per_channel(mean, C)[:, None, None]) / _per_channel(std, C)[:, None, None])[None]


def model_input(image, style: Style | str, size: int) -> np.ndarray:
    """Any picture -> a model's input in [0, 1] laid out in `style` (vit/preprocessing/styles.py):
    (size, size), or (size, size, 3) for a colour style. Raises PreprocessError."""
    style = style_of(style)
    return to_rgb_image(image, size) if style.colour else to_model_image(image, style, size)


@_never_crashes
def preprocess(image, mean=0.1307, std=0.3081, style: Style | str = DIGITS, size: int = 28,
               config=None) -> torch.Tensor:
    """Any image -> (1, C, S, S) float tensor normalised for a model: MNIST's layout and statistics
    by default, or those of a checkpoint's `config` (a `CheckpointConfig`: its data set's style,
    image size and per-channel normalisation). Raises PreprocessError for unusable input.
    """
    if config is not None:
        mean, std, style, size = config.mean, config.std, config.style, config.model.image_size
    return normalize_image(model_input(image, style, size), mean, std)
