"""A small CNN teacher for soft distillation (DeiT, Touvron et al. 2021, sec. 5.2).

A ViT has to learn from data what a CNN is built with: that nearby pixels belong together. On a
small data set trained for few epochs it learns that slowly; a CNN trained first in a few epochs
passes it on through its soft answers, which the ViT then matches beside the labels. The teacher is
trained by the trainer at the start of a run (`--distill`), with the run's own batches and
augmentation, and kept in the run's state folder so that --resume does not train it again.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Teacher(nn.Sequential):
    """Two conv blocks (two 3x3 convs + BN + GELU, then 2x2 pooling) and a two-layer head:
    ~0.3 M parameters at width 32 (~99.5 % on MNIST after 4 epochs), ~0.9 M at width 64."""

    def __init__(self, channels: int, num_classes: int, width: int = 32):
        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(),
                    nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(),
                    nn.MaxPool2d(2)]
        super().__init__(*block(channels, width), *block(width, 2 * width),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Dropout(0.2),
                         nn.Linear(2 * width * 16, 256), nn.GELU(), nn.Linear(256, num_classes))


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, tau: float = 2.0) -> torch.Tensor:
    """Summed KL(teacher || student) of the softened answers, times tau² (Hinton et al. 2015), so
    that its gradient keeps the scale of a cross-entropy whatever tau is."""
    return F.kl_div(F.log_softmax(student / tau, 1), F.log_softmax(teacher / tau, 1),
                    reduction="sum", log_target=True) * tau * tau
