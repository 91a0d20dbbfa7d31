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


def _per_channel(v, channels: int) -> torch.Tensor:
    t = torch.as_tensor(v, dtype=torch.float32).reshape(-1)
    return t.expand(channels) if t.numel() == 1 else t


def normalize_image(img: np.ndarray, mean=0.1307, std=0.3081) -> torch.Tensor:
    """(S, S) grey or (S, S, C) in [0, 1] -> (1, C, S, S) tensor normalised per channel."""
    x = torch.from_numpy(np.ascontiguousarray(img, np.float32))
    x = x[None] if x.dim() == 2 else x.permute(2, 0, 1)                 # (C, S, S)
    C = x.shape[0]
    return ((x - _per_channel(mean, C)[:, None, None]) / _per_channel(std, C)[:, None, None])[None]


@_never_crashes
def preprocess(image, mean=0.1307, std=0.3081, style: str = "digits", size: int = 28,
               config=None) -> torch.Tensor:
    """Any image -> (1, C, S, S) float tensor normalised for a model: MNIST's layout and statistics
    by default, or those of a checkpoint's `config` (a `CheckpointConfig`: its data set's layout,
    image size, channels and per-channel normalisation). Raises PreprocessError for unusable input.
    """
    if config is not None:
        mean, std, size = config.mean, config.std, config.model.image_size
        if config.model.channels == 3:
            return normalize_image(to_rgb_image(image, size), mean, std)
        style = config.style
    return normalize_image(to_model_image(image, style, size), mean, std)
