"""Which explanation map to trust on one input: a scoreboard of four maps.

Two tests of each map (rollout, relevance, occlusion, and the last block's raw [CLS] attention):

- **Faithfulness** (Petsiuk et al. 2018): deletion blanks the patches a map ranks first, one
  step at a time, and takes the mean probability of the class along the way (lower = better).
  Insertion starts from a blank image and reveals them in the same order (higher = better).
  Fixed random orders give the line a map must beat.
- **Model randomisation** (Adebayo et al. 2018, "Sanity checks for saliency maps"): the later
  blocks, the final norm and the head are re-initialised, and the same map is computed on that
  model for the same class. A map that stays alike (a high Spearman rank correlation) shows the
  input more than what the model learned from its data.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from vit.explain import attribution
from vit.explain.attention import explain
from vit.explain.faithful import spearman
from vit.model import ViT

METHODS = ("rollout", "relevance", "occlusion", "raw attention")
RANDOM = "random order"


@dataclass(frozen=True)
class Scoreboard:
    target: int
    deletion: dict[str, float]        # METHODS and RANDOM -> mean probability (lower = better)
    insertion: dict[str, float]       # METHODS and RANDOM -> mean probability (higher = better)
    correlation: dict[str, float]     # METHODS -> Spearman's rho against the randomised model's map
    maps: dict[str, np.ndarray]       # METHODS -> (G, G) on the trained model
    randomised_maps: dict[str, np.ndarray]   # METHODS -> (G, G) on the randomised one
    randomised_from: int              # the first re-initialised block, counted from 1


def maps_of(model: ViT, x: torch.Tensor, target: int, background: torch.Tensor,
            temperature: float, occlusion_block: int = 1) -> dict[str, np.ndarray]:
    """The four maps of one input for class `target`, each (G, G)."""
    e = explain(model, x, temperature)
    occ = attribution.occlusion_maps(model, x, target, background, temperature, occlusion_block)
    return {"rollout": e.rollout_map,
            "relevance": attribution.relevance(model, x, target),
            "occlusion": occ["log-odds"],      # ranks as the probability does, and still ranks
            "raw attention": e.cls_maps[-1].mean(0)}    # where P would not move (a sure answer)


def randomised(model: ViT, first_block: int, seed: int = 0) -> ViT:
    """A copy of `model` with blocks[first_block:], the final norm and the head re-initialised as
    a new model's are (the cascading randomisation of Adebayo et al., from the top). Drawn from a
    generator of its own: torch's global one is shared with every other request."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in [*m.blocks[first_block:].modules(), m.norm, m.head]:
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                w = torch.empty(module.weight.shape)
                # ViT._init_weights's draw: torch's truncation at ±2 (absolute) leaves std 0.02
                nn.init.trunc_normal_(w, std=0.02, generator=g)
                module.weight.copy_(w)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
    return m


def score(model: ViT, x: torch.Tensor, target: int, background: torch.Tensor,
          temperature: float = 1.0, occlusion_block: int = 1, steps: int = 16,
          random_orders: int = 3, first_block: int | None = None,
          maps: dict[str, np.ndarray] | None = None) -> Scoreboard:
    """Deletion, insertion and the randomisation check of the four maps for class `target`.
    `first_block` (0-based): where re-initialisation starts (default: the upper half). `maps`:
    the trained model's four maps when the caller has them already (maps_of's otherwise)."""
    G = model.cfg.grid
    first = model.cfg.depth // 2 if first_block is None else first_block
    maps = maps or maps_of(model, x, target, background, temperature, occlusion_block)
    rng = np.random.default_rng(0)
    orders = [rng.random(G * G) for _ in range(random_orders)]

    def area(curve, m):
        return attribution.deletion_auc(*curve(model, x, target, m, background, temperature, steps))

    deletion = {k: area(attribution.deletion_curve, m) for k, m in maps.items()}
    insertion = {k: area(attribution.insertion_curve, m) for k, m in maps.items()}
    deletion[RANDOM] = float(np.mean([area(attribution.deletion_curve, o) for o in orders]))
    insertion[RANDOM] = float(np.mean([area(attribution.insertion_curve, o) for o in orders]))
    other = maps_of(randomised(model, first), x, target, background, temperature, occlusion_block)
    return Scoreboard(target, deletion, insertion,
                      {k: spearman(maps[k], other[k]) for k in METHODS}, maps, other, first + 1)
