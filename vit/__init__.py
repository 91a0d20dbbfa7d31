"""ViT Explorer: a small Vision Transformer, its trainer, and the pieces the app shows."""
from .checkpoint import Checkpoint, CheckpointError, load_checkpoint, open_checkpoint, read_config
from .model import ViT, ViTConfig

__all__ = ["ViT", "ViTConfig", "load_checkpoint", "CheckpointError", "Checkpoint",
           "open_checkpoint", "read_config"]
