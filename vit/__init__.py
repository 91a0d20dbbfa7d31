"""ViT Explorer: a small Vision Transformer, its trainer, and the pieces the app shows.

    import vit
    model = vit.load_checkpoint("checkpoints/mnist")     # eval mode, on cuda / mps / cpu
    model = vit.from_pretrained("hf://user/repo")        # or a folder; vit.save_pretrained back
    x = vit.preprocess(image)                            # any picture -> (1, 1, 28, 28)
    logits, attn = model(x, return_attention=True)
"""
from vit.checkpoint import (
    Checkpoint,
    CheckpointError,
    from_pretrained,
    load_checkpoint,
    open_checkpoint,
    read_config,
    save_pretrained,
)
from vit.model import ViT, ViTConfig
from vit.preprocessing import preprocess

# `vit.preprocess` is the function; the module that holds it is `vit.preprocessing`.
from vit.preprocessing.decode import PreprocessError

__all__ = ["ViT", "ViTConfig", "load_checkpoint", "CheckpointError", "Checkpoint",
           "open_checkpoint", "read_config", "preprocess", "PreprocessError", "from_pretrained",
           "save_pretrained"]
