"""The model-randomisation check as a picture: each map on the trained model above the same map
on the model whose later layers were re-initialised, with their rank correlation (ρ). Each map has its
own scale (the check compares orders, not sizes), its bar says which; attention maps reach at
least five times the even level, as the page's do, so an even spread does not glow."""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from vit.explain.scoreboard import METHODS, Scoreboard
from vit.pictures.attention_maps import load_font, single_map_picture, uniform_level
from vit.text import correlation

LABEL = 22           # pixels of each row's label above it
GAP = 8
ATTENTION = ("rollout", "raw attention")      # shares of attention, with an even level to mark


def sanity_picture(img: np.ndarray, board: Scoreboard, depth: int, tile: int = 168) -> np.ndarray:
    """(H, W, 3) uint8: a row of the trained model's maps, a row of the randomised model's."""
    rows = []
    for maps, label in ((board.maps, "trained model"),
                        (board.randomised_maps, f"layers {board.randomised_from}-{depth}, norm "
                                                f"and head re-initialised")):
        tiles = []
        for k in METHODS:
            shown = np.clip(maps[k], 0, None)       # what each map ranks first is its largest
            # rho: the rank correlation (Spearman's ρ, as the scoreboard's words name it; the
            # pictures' font has no Greek letters); the longer words cut the title short on a
            # 168-pixel tile ("rank corr. +0.99 (max 0.0…"). Occlusion's unit is in its title.
            name = "occlusion, log-odds" if k == "occlusion" else k
            title = name if maps is board.maps else f"{name}: rho {correlation(board.correlation[k])}"
            if k in ATTENTION:      # as on the page: an even spread is dark, not a full-scale glow
                tiles.append(single_map_picture(img, shown, title, size=tile,
                                                uniform=uniform_level(shown.shape[0]),
                                                titled_max=maps is board.maps))
            elif k == "occlusion":     # the drop in the answer's log-odds
                tiles.append(single_map_picture(img, shown, title, size=tile,
                                                top=max(float(shown.max()), 1e-9), unit="log-odds"))
            else:                      # relevance: no unit of its own, scaled to its max
                tiles.append(single_map_picture(img, shown, title, size=tile))
        h = max(t.shape[0] for t in tiles)
        tiles = [np.pad(t, ((0, h - t.shape[0]), (0, GAP), (0, 0)), constant_values=255) for t in tiles]
        band = Image.new("RGB", (sum(t.shape[1] for t in tiles), LABEL), "white")
        ImageDraw.Draw(band).text((4, 4), label, fill="black", font=load_font(14))
        rows += [np.asarray(band), np.concatenate(tiles, axis=1)]
    return np.concatenate(rows, axis=0)
