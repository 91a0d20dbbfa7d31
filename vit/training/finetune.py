"""Starting a run from another checkpoint (`python -m vit.train --init CHECKPOINT`): transfer
learning, the way the ViT paper uses a pretrained model on a small data set.

Every weight is copied except the classifier head, which is new (initialised as a fresh model's)
for the new data set's classes. When the image size differs from the checkpoint's, the patch grid
does too: the position embeddings of the patches are resized as a 2-D grid (bicubic, as the paper
does for fine-tuning at a higher resolution, sec. 3.2); [CLS]'s own embedding is kept.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from vit.model import ViT, ViTConfig

# What --init takes from the checkpoint: the architecture. Image size may change (the grid then
# follows); the classes come from the new data set.
ARCHITECTURE = ("channels", "patch_size", "stem_channels", "stem_layers", "dim", "depth", "heads",
                "mlp_dim", "norm_eps")


class InitError(ValueError):
    """--init can't be used as asked; one line saying why."""


def init_config(folder) -> ViTConfig:
    """The checkpoint's model config (validated, without reading its weights)."""
    from vit.checkpoint import CheckpointError, read_config
    try:
        return read_config(Path(folder)).model
    except CheckpointError as e:
        raise InitError(f"--init: {e}") from None


def resize_pos_embed(pos: torch.Tensor, grid: int) -> torch.Tensor:
    """(1, 1 + g*g, D) -> (1, 1 + grid*grid, D): [CLS]'s row kept, the g x g patch rows
    resized as an image with D channels."""
    cls, patches = pos[:, :1], pos[:, 1:]
    g = math.isqrt(patches.shape[1])
    if g == grid:
        return pos
    img = patches.reshape(1, g, g, -1).permute(0, 3, 1, 2)               # (1, D, g, g)
    img = F.interpolate(img.float(), size=(grid, grid), mode="bicubic", align_corners=False)
    return torch.cat([cls, img.permute(0, 2, 3, 1).reshape(1, grid * grid, -1).to(pos.dtype)], 1)


def load_pretrained(model: ViT, folder, class_names=None) -> list[str]:
    """Copy a checkpoint's weights into `model` (built with the same architecture), except the
    head unless the checkpoint has these `class_names` (a fine-tune of the same data set: the
    head it learnt is the best start); position embeddings resized to the model's grid. Returns
    the names not copied (the head's, or none). Raises InitError."""
    from vit.checkpoint import CheckpointError, open_checkpoint
    try:
        opened = open_checkpoint(Path(folder), "cpu")
    except CheckpointError as e:
        raise InitError(f"--init: {e}") from None
    source = opened.model
    theirs, ours = source.cfg, model.cfg
    differ = [k for k in ARCHITECTURE if getattr(theirs, k) != getattr(ours, k)]
    if differ:
        k = differ[0]
        raise InitError(f"--init {folder} has {k.replace('_', '-')} {getattr(theirs, k)}, this "
                        f"run {getattr(ours, k)}: leave the model flags out to take its own")
    state = source.state_dict()
    state["pos_embed"] = resize_pos_embed(state["pos_embed"], ours.grid)
    same = class_names is not None and list(class_names) == list(opened.class_names)
    kept = {k: v for k, v in state.items() if same or not k.startswith("head.")}
    missing, unexpected = model.load_state_dict(kept, strict=False)
    assert not unexpected and all(k.startswith("head.") for k in missing), (missing, unexpected)
    return sorted(missing)
