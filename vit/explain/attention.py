"""What the model looks at: every head's attention maps, [CLS]'s view of the patches, and
attention rollout (Abnar & Zuidema 2020). Numbers only (torch in, numpy out); vit/pictures/
draws them.

Shapes: depth L, heads H, tokens T = 1 + N ([CLS] first), patch grid G x G with N = G*G.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vit.model import ViT


@dataclass
class Explanation:
    probs: np.ndarray        # (classes,) softmax(logits / temperature): calibrated probabilities
    attn: np.ndarray         # (L, H, T, T) attention weights, rows sum to 1
    grid: int                # G
    logits: np.ndarray | None = None     # (classes,) the model's raw output
    features: np.ndarray | None = None   # (D,) the [CLS] token after the last block

    @property
    def cls_maps(self) -> np.ndarray:
        """(L, H, G, G): how much [CLS] attends to each patch, per layer and head."""
        return cls_attention(self.attn, self.grid)

    @property
    def rollout_map(self) -> np.ndarray:
        """(G, G): each patch's share of the final [CLS] by attention rollout (class-agnostic)."""
        return rollout(self.attn)[0, 1:].reshape(self.grid, self.grid)


@torch.no_grad()
def explain(model: ViT, x: torch.Tensor, temperature: float = 1.0) -> Explanation:
    """One normalised image (1, C, S, S) -> probabilities and every layer's attention.
    `temperature`: the checkpoint's fitted one (`CheckpointConfig.temperature`; 1 = raw softmax),
    so that the probabilities shown are calibrated (vit/explain/calibration.py)."""
    device = next(model.parameters()).device
    tokens, attn = model.forward_features(x.to(device), return_attention=True)
    logits = model.forward_head(tokens).float()[0].cpu()
    probs = torch.softmax(logits / temperature, -1).numpy()
    return Explanation(probs, attn[0].float().cpu().numpy(), model.cfg.grid, logits.numpy(),
                       tokens[0, 0].float().cpu().numpy())


def cls_attention(attn: np.ndarray, grid: int) -> np.ndarray:
    """(L, H, T, T) -> (L, H, G, G): row 0 ([CLS]) without its self-attention column."""
    L, H = attn.shape[:2]
    return attn[:, :, 0, 1:].reshape(L, H, grid, grid)


def rollout(attn: np.ndarray) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020): (L, H, T, T) -> (T, T), rows summing to 1.

    Heads are averaged; each layer's residual connection is modelled by adding the identity
    (0.5 A + 0.5 I) and renormalising rows; layers compose by matrix product, first layer
    rightmost. Row 0 says how much each input token contributes to the final [CLS].
    """
    T = attn.shape[-1]
    result = np.eye(T)
    for layer in attn.astype(np.float64):
        a = 0.5 * layer.mean(0) + 0.5 * np.eye(T)
        a /= a.sum(-1, keepdims=True)
        result = a @ result
    return result


def patch_attention_row(attn: np.ndarray, layer: int, head: int, patch: int, grid: int) -> np.ndarray:
    """(G, G): where patch `patch` (0-based) looks in that layer and head — its own attention row
    (token 1 + patch), restricted to the patch tokens."""
    return attn[layer, head, 1 + patch, 1:].reshape(grid, grid)
