"""ViT Explorer: a small Vision Transformer, its trainer, and the pieces the app shows."""
from .checkpoint import CheckpointError, load_checkpoint
from .model import ViT, ViTConfig

__all__ = ["ViT", "ViTConfig", "load_checkpoint", "CheckpointError"]
