"""Add "looks like nothing it was trained on" to a checkpoint (vit/explain/typical.py): its
training images' [CLS] tokens fitted, the threshold set on its validation split (the one the
trainer held out, carved the same way), written as typical.safetensors and config.json's
`calibration.far_above` with how it was fitted. `python -m vit.fit_typical` is the command.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from vit.checkpoint import CONFIG, CheckpointError, open_checkpoint, read_config
from vit.data.loading import folder_split, load_split
from vit.data.specs import FOLDER
from vit.explain.typical import FAR_SHARE, TYPICAL_FILE, cls_features, fit
from vit.hub import CARD, model_card
from vit.storage import save_json, save_tensors, save_text
from vit.training.batches import carve_validation
from vit.training.records import git_commit


def fit_typical(folder, data_dir, share: float = FAR_SHARE, command: str | None = None,
                say=print, device: str | None = "cpu") -> dict:
    """Fit and write the checkpoint's typical.safetensors and calibration.far_above; returns
    what config.json's calibration now records of it. `device`: where the [CLS] tokens are
    computed (None: a GPU where there is one). Raises CheckpointError, DataError."""
    started = time.time()
    folder = Path(folder)
    from vit.device import pick_device
    ck = open_checkpoint(folder, pick_device(device))
    c = ck.config
    train, val = own_splits(c, data_dir, folder)
    torch.manual_seed(0)
    with torch.inference_mode():
        feats = cls_features(ck.model, train.images, c.mean, c.std)
        val_feats = cls_features(ck.model, val.images, c.mean, c.std)
    typical = fit(feats, train.labels.numpy(), c.model.num_classes)
    far = typical.distance(val_feats)
    threshold = float(np.quantile(far, 1 - share))
    record = {"far_above": round(threshold, 3),
              "typical": {"fitted_on": f"[CLS] tokens of the {len(train):,} training images "
                                       f"trained on; threshold: {100 * share:g} % of the "
                                       f"{len(val):,} validation images lie beyond it",
                          "validation_far": round(float((far > round(threshold, 3)).mean()), 5),
                          "command": command, "commit": git_commit()}}
    save_tensors(folder / TYPICAL_FILE, typical.tensors(), metadata={"format": "vit-typical/1"})
    config = read_config(folder).to_dict()
    config["calibration"] = {**config.get("calibration", {}), **record}
    save_json(folder / CONFIG, config)
    save_text(folder / CARD, model_card(config))
    open_checkpoint(folder, "cpu")                       # reads back, or raises
    say(f"{folder}: far_above {threshold:.1f}; {len(train):,} training images, "
        f"{time.time() - started:.0f} s")
    return record


def own_splits(c, data_dir, folder) -> tuple:
    """A checkpoint's training images and the validation split its trainer held out (carved the
    same way), from `data_dir`. Raises CheckpointError, DataError."""
    if c.dataset == FOLDER:               # an image folder's model: its own train/ folder
        split = folder_split(data_dir, True, c.model.image_size, c.model.channels, c.class_names)
    elif c.spec is not None:
        split = load_split(c.spec, data_dir, train=True)
    else:
        raise CheckpointError(f"{folder}: its data set ({c.dataset}) is neither a built-in one "
                              f"nor an image folder")
    train, val = carve_validation(split, int(c.training.get("val_size", 5000)))
    if val is None:
        raise CheckpointError(f"{folder}: trained without a validation split (--val-size 0)")
    return train, val
