"""What drove the answer, beyond attention: class-specific relevance, occlusion, switching heads
off, and a faithfulness score that says which map to believe on this input.

Attention maps say where [CLS] looked, for any class alike. These say what the answer for one
class depends on:
- `relevance`: gradient-weighted attention relevance (Chefer, Gur & Wolf 2021, "Generic
  attention-model explainability", eq. 5-6): R = I, then for each layer R += mean_h((dA ⊙ A)+) R,
  where dA is the gradient of the class's logit with respect to that layer's attention A. Row 0
  of R over the patches is the map. Unlike rollout it changes with the class asked about.
- `occlusion`: each patch blanked in turn (to the background), all in one batch; the map is the
  drop in the class's calibrated probability (or, for answers too sure for that to move, in its
  log-odds).
- `ablate`: the model's answer with some heads switched off (their output zeroed before the
  block's projection).
- `deletion_auc`: patches blanked cumulatively, most important first by a map; the mean of the
  class's probability along that curve (Petsiuk et al. 2018). Lower = the map found what the
  answer really rests on. `insertion_curve`: the reverse, patches revealed most important first
  on a blank image; higher = the map found what the answer needs.

Shapes: L layers, H heads, T = 1 + G*G tokens; images (1, C, S, S), normalised as the model wants.
"""
from __future__ import annotations

import numpy as np
import torch

from vit.model import ViT, batch_within


def relevance(model: ViT, x: torch.Tensor, target: int) -> np.ndarray:
    """(G, G): how much each patch is relevant to class `target`'s logit (Chefer et al. 2021).
    Non-negative; [CLS]'s own share (R[0, 0], 1 plus what flows back to it) is left out."""
    device = next(model.parameters()).device
    with torch.enable_grad():
        tokens, maps = model.tokens_and_maps(x.to(device), return_attention=True)
        logit = model.forward_head(tokens)[0, target]
        grads = torch.autograd.grad(logit, maps)
    T = maps[0].shape[-1]
    R = torch.eye(T, dtype=torch.float64)
    for A, dA in zip(maps, grads):
        cam = (dA[0] * A[0]).clamp(min=0).mean(0).detach().cpu().double()   # (T, T)
        R = R + cam @ R
    G = model.cfg.grid
    return R[0, 1:].reshape(G, G).numpy()


def blank_patches(x: torch.Tensor, masks: torch.Tensor, grid: int, background: torch.Tensor) -> torch.Tensor:
    """x: (1, C, S, S); masks: (B, G*G) bool, True = blank that patch -> (B, C, S, S) with the
    chosen patches set to `background` (C,) — the normalised value of an empty pixel."""
    B = masks.shape[0]
    C, S = x.shape[1], x.shape[-1]
    p = S // grid
    # (B, G*G) -> (B, 1, G, G) -> pixel resolution (B, 1, S, S)
    m = masks.view(B, 1, grid, grid).repeat_interleave(p, 2).repeat_interleave(p, 3)
    return torch.where(m.to(x.device), background.view(1, C, 1, 1).to(x.device, x.dtype),
                       x.expand(B, C, S, S))


@torch.no_grad()
def _logits(model: ViT, images: torch.Tensor, temperature: float, batch: int = 256,
            head_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Calibrated logits (logits / temperature), float32 on the CPU."""
    device = next(model.parameters()).device
    batch = batch_within(model.cfg, batch)
    mask = None if head_mask is None else head_mask.to(device)
    out = [model(images[i:i + batch].to(device), head_mask=mask).float().cpu() / temperature
           for i in range(0, len(images), batch)]
    return torch.cat(out)


def _probs(model: ViT, images: torch.Tensor, temperature: float, batch: int = 256,
           head_mask: torch.Tensor | None = None) -> torch.Tensor:
    return torch.softmax(_logits(model, images, temperature, batch, head_mask), -1)


def log_odds(logits: torch.Tensor, target: int) -> torch.Tensor:
    """(B, K) calibrated logits -> (B,) log(p / (1 - p)) of class `target`, computed from the
    logits so that it stays finite (and keeps changing) where p rounds to 1."""
    others = torch.cat([logits[:, :target], logits[:, target + 1:]], 1)
    return logits[:, target] - torch.logsumexp(others, 1)


def occlusion_maps(model: ViT, x: torch.Tensor, target: int, background: torch.Tensor,
                   temperature: float = 1.0, block: int = 1) -> dict[str, np.ndarray]:
    """{"probability": (G, G), "log-odds": (G, G)}: the drop in class `target`'s calibrated
    probability, and in its log-odds, when each patch alone is blanked (negative where blanking
    makes the class more likely); one batch of blanked images for both. `block` > 1 blanks
    squares of block x block patches instead (a quarter of the images for block 2) and gives each
    patch its square's drop: for fine grids, where one tiny patch rarely matters alone.
    Log-odds rank patches as the probability does, but still tell them apart when the answer is
    so sure (p ~ 1) that no single patch moves its probability."""
    G = model.cfg.grid
    cells = torch.arange(G * G)
    square = (cells // G // block) * G + (cells % G // block)    # (G*G,) each patch's square
    squares = square.unique()
    masks = square[None, :] == squares[:, None]                  # (squares, G*G)
    logits = _logits(model, torch.cat([x, blank_patches(x, masks, G, background)]), temperature)
    where = torch.searchsorted(squares, square)
    out = {}
    for name, score in (("probability", logits.softmax(-1)[:, target]),
                        ("log-odds", log_odds(logits, target))):
        drop = score[0] - score[1:]                              # (squares,)
        out[name] = drop[where].reshape(G, G).numpy()
    return out


def occlusion(model: ViT, x: torch.Tensor, target: int, background: torch.Tensor,
              temperature: float = 1.0, block: int = 1, measure: str = "probability") -> np.ndarray:
    """(G, G): one of `occlusion_maps` ("probability" or "log-odds")."""
    return occlusion_maps(model, x, target, background, temperature, block)[measure]


def deletion_steps(n: int, steps: int | None) -> np.ndarray:
    """How many patches are blanked at each point of a deletion curve: 0 .. n, every count, or
    `steps` + 1 evenly spaced counts (16 steps cost 17 images whatever the grid)."""
    if steps is None or steps >= n:
        return np.arange(n + 1)
    return np.unique(np.round(np.linspace(0, n, steps + 1)).astype(int))


def _most_important(importance: np.ndarray, G: int, steps: int | None) -> tuple[np.ndarray, torch.Tensor]:
    """(counts, masks): for each k in deletion_steps, the k most important patches (ties broken
    by patch order)."""
    order = np.argsort(-np.asarray(importance).reshape(-1), kind="stable")
    counts = deletion_steps(G * G, steps)
    masks = torch.zeros(len(counts), G * G, dtype=torch.bool)
    for row, k in enumerate(counts):
        masks[row, order[:k]] = True
    return counts, masks


def deletion_curve(model: ViT, x: torch.Tensor, target: int, importance: np.ndarray,
                   background: torch.Tensor, temperature: float = 1.0,
                   steps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(counts, probabilities): class `target`'s probability with the k most important patches
    blanked, for k in deletion_steps (ties broken by patch order)."""
    G = model.cfg.grid
    counts, masks = _most_important(importance, G, steps)
    probs = _probs(model, blank_patches(x, masks, G, background), temperature)[:, target].numpy()
    return counts, probs


def insertion_curve(model: ViT, x: torch.Tensor, target: int, importance: np.ndarray,
                    background: torch.Tensor, temperature: float = 1.0,
                    steps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(counts, probabilities): class `target`'s probability with only the k most important
    patches kept and the rest blanked (Petsiuk et al. 2018's insertion; its area: higher = the
    map found what the answer needs)."""
    G = model.cfg.grid
    counts, masks = _most_important(importance, G, steps)
    probs = _probs(model, blank_patches(x, ~masks, G, background), temperature)[:, target].numpy()
    return counts, probs


def deletion_auc(counts: np.ndarray, curve: np.ndarray) -> float:
    """Area under a deletion curve over the share of patches blanked, 0..1 (trapezoids)."""
    share = np.asarray(counts, dtype=np.float64) / counts[-1]
    c = np.asarray(curve, dtype=np.float64)
    return float(((c[1:] + c[:-1]) / 2 * np.diff(share)).sum())


def head_mask(model: ViT, off) -> torch.Tensor:
    """(depth, H) ones, with 0 for the heads `off` ((layer, head) pairs, 0-based)."""
    mask = torch.ones(model.cfg.depth, model.cfg.heads)
    for layer, head in off:
        mask[int(layer), int(head)] = 0
    return mask


def ablate(model: ViT, x: torch.Tensor, off, temperature: float = 1.0) -> np.ndarray:
    """(classes,): calibrated probabilities with the heads `off` switched off — their output
    zeroed before the block's projection, for this call only (the model is shared)."""
    return _probs(model, x, temperature, head_mask=head_mask(model, off))[0].numpy()
