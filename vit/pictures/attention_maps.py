"""The pictures of attention the app shows: the input cut into patches, heat maps over it,
the layers x heads grid with its colour bar, one map with a patch marked, and where a click on
them lands.

Pure functions of numpy arrays (no server, no pyplot): heat maps are composed with numpy and a
matplotlib colormap's lookup table, and labels are drawn with PIL, which keeps a full response in
a few milliseconds.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vit.text import LOW, percent

CMAP = "inferno"
GRID_COLOUR = (0, 150, 255)
MARK_COLOUR = (0, 255, 120)


@lru_cache(maxsize=4)
def _lut(name: str = CMAP) -> np.ndarray:
    from matplotlib import colormaps
    return (colormaps[name](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)  # (256, 3)


@lru_cache(maxsize=8)
def load_font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def _up(a: np.ndarray, rep: int) -> np.ndarray:
    """Nearest-neighbour upsampling of the first two axes by an integer factor."""
    return np.repeat(np.repeat(a, rep, axis=0), rep, axis=1)


def colorize(values: np.ndarray, vmax: float, vmin: float = 0.0, cmap: str = CMAP) -> np.ndarray:
    """Values -> RGB uint8 through a matplotlib colormap on [vmin, vmax]."""
    t = np.clip((values - vmin) / max(vmax - vmin, 1e-12), 0, 1)
    return _lut(cmap)[(t * 255).astype(np.uint8)]


def _rgb(img: np.ndarray) -> np.ndarray:
    """(S, S) grey or (S, S, 3) colour in [0, 1] -> float32 (S, S, 3) in 0..255."""
    img = np.clip(img, 0, 1).astype(np.float32) * 255
    return np.repeat(img[..., None], 3, axis=2) if img.ndim == 2 else img


def _rep(img: np.ndarray, size: int) -> int:
    """Integer upscale factor that brings an (S, S) image closest to `size` without exceeding it
    (at least 1: a 224-px image is shown at 224 px rather than blurred to 336)."""
    return _factor(img.shape[0], size)


def _factor(side: int, size: int) -> int:
    return max(1, size // side)


def digit_picture(img: np.ndarray, size: int) -> np.ndarray:
    """(S, S) or (S, S, 3) in [0, 1] -> RGB (about size, size, 3), nearest-neighbour so pixels
    stay visible."""
    return _up(_rgb(img).astype(np.uint8), _rep(img, size))


HEAT_ALPHA = 0.65   # how much of a heat-map pixel is colour (the rest is the digit beneath)


def heat_overlay(img: np.ndarray, grid_map: np.ndarray, vmax: float, size: int = 112,
                 alpha: float = HEAT_ALPHA) -> np.ndarray:
    """A (G, G) map, upsampled block-wise to the patches it describes, blended over the image
    (S, S) or (S, S, 3); S is a multiple of G (the patch size)."""
    G = grid_map.shape[0]
    # Blend at S x S (patch cells are whole pixels there), then upsample once: 16x less work.
    heat = _up(colorize(grid_map, vmax), img.shape[0] // G).astype(np.float32)      # (S, S, 3)
    return _up((alpha * heat + (1 - alpha) * _rgb(img)).astype(np.uint8), _rep(img, size))


def _layer_from_pil(im: Image.Image):
    """RGBA PIL image -> its visible pixels only: (index, rgb (K, 3), alpha (K, 1)). Grid lines
    and labels cover a few % of a picture, so blending just those is ~20x cheaper."""
    a = np.asarray(im, dtype=np.float32)
    idx = np.nonzero(a[..., 3] > 0)
    return idx, a[idx][:, :3], a[idx][:, 3:] / 255.0


def _composite(base: np.ndarray, layer) -> np.ndarray:
    """Blend a cached layer onto a uint8 RGB picture, in place."""
    idx, rgb, alpha = layer
    base[idx] = (base[idx] * (1 - alpha) + rgb * alpha).astype(np.uint8)
    return base


@lru_cache(maxsize=16)
def _grid_layer(size: int, grid: int, numbers: bool, colour=GRID_COLOUR):
    """Transparent layer with the patch grid and (optionally) the patch numbers 1..N."""
    im = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(im)
    cell = size / grid
    for i in range(grid + 1):
        p = min(size - 1, round(i * cell))
        draw.line([(p, 0), (p, size)], fill=colour + (255,), width=1)
        draw.line([(0, p), (size, p)], fill=colour + (255,), width=1)
    if numbers:
        font = load_font(max(9, int(cell) // 4))
        for p in range(grid * grid):
            r, c = divmod(p, grid)
            # Yellow with a black edge: readable over white ink and over the black ground alike.
            draw.text((c * cell + 3, r * cell + 2), str(p + 1), fill=(255, 200, 0, 255), font=font,
                      stroke_width=1, stroke_fill=(0, 0, 0, 255))
    return _layer_from_pil(im)


def _mark(img: np.ndarray, patch: int, grid: int, width: int = 3) -> np.ndarray:
    """Outline one patch (0-based) in place."""
    cell = img.shape[1] / grid
    r, c = divmod(patch, grid)
    y0, x0, y1, x1 = (round(v * cell) for v in (r, c, r + 1, c + 1))
    width = max(1, min(width, round(cell) // 4))
    img[y0:y0 + width, x0:x1] = img[y1 - width:y1, x0:x1] = MARK_COLOUR
    img[y0:y1, x0:x0 + width] = img[y0:y1, x1 - width:x1] = MARK_COLOUR
    return img


def patch_grid_picture(img: np.ndarray, grid: int, size: int = 336,
                       marked: int | None = None) -> np.ndarray:
    """What the model sees: the input, upscaled, with the patch grid and patch numbers
    (1..N in the order the transformer reads them). `marked` outlines one patch (0-based)."""
    base = digit_picture(img, size)
    out = _composite(base, _grid_layer(base.shape[0], grid, True))
    return out if marked is None else _mark(out, marked, grid)


@lru_cache(maxsize=4)
def _strip_template(grid: int, per_row: int, tile: int):
    """Background, [CLS] box and labels of the token strip, plus each token's top-left corner."""
    tokens = grid * grid + 1
    gap, label_h = 4, 14
    rows = -(-tokens // per_row)
    W, H = per_row * (tile + gap) + gap, rows * (tile + label_h + gap) + gap
    im = Image.new("RGB", (W, H), (250, 250, 250))
    draw = ImageDraw.Draw(im)
    font = load_font(10)
    corners = []
    for t in range(tokens):
        r, c = divmod(t, per_row)
        x, y = gap + c * (tile + gap), gap + r * (tile + label_h + gap)
        corners.append((y, x))
        if t == 0:
            draw.rectangle([x, y, x + tile - 1, y + tile - 1], fill=(30, 90, 200))
            draw.text((x + 2, y + tile // 2 - 6), "CLS", fill="white", font=font)
        else:
            draw.rectangle([x - 1, y - 1, x + tile, y + tile], outline=(180, 180, 180))
        draw.text((x + 1, y + tile + 1), "cls" if t == 0 else str(t), fill=(60, 60, 60), font=font)
    return np.asarray(im), corners


def token_strip(img: np.ndarray, grid: int, per_row: int | None = None, tile: int = 36) -> np.ndarray:
    """The token sequence the transformer reads: [CLS], then patch 1..N in row-major order.
    Tiles are whole multiples of the patch (about `tile` px); rows hold `per_row` tokens (default:
    10, or one grid row plus one for grids wider than 10, so a 14x14 grid stays 15 rows)."""
    N, p = grid * grid, img.shape[0] // grid
    tile = p * max(1, round(tile / p))
    per_row = per_row or max(10, grid + 1)
    rgb = _rgb(img).astype(np.uint8)                                     # (S, S, 3)
    # (S, S, 3) -> (G, p, G, p, 3) -> (G, G, p, p, 3) -> (N, p, p, 3): patches in reading order
    patches = rgb.reshape(grid, p, grid, p, 3).transpose(0, 2, 1, 3, 4).reshape(N, p, p, 3)
    template, corners = _strip_template(grid, per_row, tile)
    out = template.copy()
    rep = tile // p
    for t, (y, x) in enumerate(corners[1:]):
        out[y:y + tile, x:x + tile] = _up(patches[t], rep)
    return out


# A map's colour scale reaches at least VIVID times the uniform level 1/T (every token attended
# equally): a near-uniform map (max 0.03 against 1/50 = 0.02) then stays dull instead of being
# stretched until it looks decisive.
VIVID = 5


def uniform_level(grid: int) -> float:
    """1/T for a G x G grid plus [CLS]: the weight of each token when attention is spread evenly."""
    return 1.0 / (grid * grid + 1)


def scale_top(peak: float, grid: int) -> float:
    """The top of an absolute colour scale for maps whose largest value is `peak`."""
    return max(float(peak), VIVID * uniform_level(grid))


def share(v: float) -> str:
    """A share of attention (a weight) as the page writes every share and probability
    (vit/text.py percent, "5.4 %"), so a map's title, its colour bar and the strip's readout of
    the same map agree; "<0.1 %" below what one decimal shows."""
    return percent(v) if v >= 0.0005 else LOW


BAR_HEIGHT = 44      # pixels of a colour bar under a picture


def grid_picture_height(L: int, H: int, image_size: int, tile: int = 112) -> int:
    """The height of an attention_grid_picture of L x H maps of an image_size-pixel input, bar
    included: where a picture stacked under it starts."""
    tile = image_size * _factor(image_size, tile)
    return _attention_grid_template(L, H, tile)[0].shape[0] + BAR_HEIGHT


def _bar_span(width: int) -> tuple[int, int]:
    return 48, width - 68


@lru_cache(maxsize=16)
def _colorbar_template(width: int, title: str):
    im = Image.new("RGB", (width, BAR_HEIGHT), "white")
    draw = ImageDraw.Draw(im)
    x0, x1 = _bar_span(width)
    im.paste(Image.fromarray(np.repeat(colorize(np.linspace(0, 1, x1 - x0), 1.0)[None], 12, 0)),
             (x0, 18))
    draw.text((8, 17), "0", fill="black", font=load_font(12))
    xy, text, font = _fit_title(draw, title, x0, width)
    draw.text(xy, text, fill="black", font=font)
    return im, x1 + 6


def _fit_title(draw: ImageDraw.ImageDraw, title: str, x0: int, width: int):
    """((x, y), title, font=...) for a bar's title: above the bar at 12 px; a longer one starts at
    the picture's left edge, then in smaller type, and only as a last resort loses its end."""
    title = " ".join(title.split())[:width]       # one line; no glyph is under a pixel wide
    for size in (12, 11, 10):
        font = load_font(size)
        for x in (x0, 8):
            if draw.textlength(title, font=font) <= width - x - 4:
                return (x, 2), title, font
    # A trailing clause ("; 2x2 squares") goes first, then a name in parentheses (a class:
    # "drop in P(Ankle boot)") is shortened, so that the number stays whole (a trial read
    # "drop in P(Ankle boot), max 70.9…" for "max 70.9 %; 2x2 squares").
    base = title.rsplit("; ", 1)[0]
    if draw.textlength(base, font=font) <= width - 12:
        return (8, 2), base, font
    m = re.search(r"\((?!max )([^()]{4,})\)", base)          # (never the "(max …)" itself)
    if m:
        for keep in range(len(m.group(1)) - 1, 2, -1):
            short = f"{base[:m.start(1)]}{m.group(1)[:keep].rstrip()}…{base[m.end(1):]}"
            if draw.textlength(short, font=font) <= width - 12:
                return (8, 2), short, font
    # The longest start that fits, by bisection: a few measurements, not one per character.
    lo, hi = 1, len(title)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if draw.textlength(title[:mid] + "…", font=font) <= width - 12:
            lo = mid
        else:
            hi = mid - 1
    return (8, 2), title[:lo].rstrip() + "…", font


def _colorbar(width: int, top: float | str, title: str, uniform: float | None = None,
              peak: tuple[float, str] | None = None, label: str | None = None,
              marks: list[tuple] | None = None) -> np.ndarray:
    """A colour bar from 0 to `top` (a share of attention or a probability, written as one:
    "10.0 %"; or words such as "its max"), or to `label` where given (a top in another unit,
    "8.0 log-odds"). Marked on it when given: the uniform level 1/T ("even"), and the map's own
    largest value `peak` = (value, its words: "max 4.0 %") where the scale runs past it, so
    that the number is said once, where it is drawn (a trial read a title's "(max 4.0 %)" over
    a bar ending at 10.0 % as two numbers at odds). `marks`: `_bar_marks`' ticks, where the
    caller has them already."""
    template, x = _colorbar_template(width, title)
    im = template.copy()
    draw = ImageDraw.Draw(im)
    text = label if label is not None else top if isinstance(top, str) else share(top)
    draw.text((x, 17), text, fill="black", font=load_font(12))
    if isinstance(top, str):
        return np.asarray(im)
    for at, words, colour, thick, x in marks if marks is not None else _bar_marks(width, top, uniform, peak):
        draw.line([(at, 15), (at, 32)], fill=colour, width=thick)
        if x is not None:
            draw.text((x, 31), words, fill=colour, font=load_font(11))
    return np.asarray(im)


# The strip's colours (pipeline.css): blue for a map's largest value, green for an even spread.
PEAK_INK, EVEN_INK = (29, 78, 216), (21, 128, 61)


def _bar_marks(width: int, top: float, uniform: float | None,
               peak: tuple[float, str] | None) -> list[tuple]:
    """The ticks under a bar: (x, words, colour, line width, where its words start or None). The
    peak's "max 4.0 %", then the even level's "even", each go right of their tick, else left,
    where they clear each other and the scale's end; words that fit nowhere are left out (the
    peak's first: on a small tile its number matters more; `peak_said` then has the title carry
    it)."""
    x0, x1 = _bar_span(width)
    at = lambda v: x0 + round(v / top * (x1 - x0 - 1))       # noqa: E731
    font, taken, marks = load_font(11), [], []
    for value, words, colour, thick in ((*(peak or (None, "")), PEAK_INK, 2),
                                        (uniform, "even", EVEN_INK, 2)):
        if value is None or not 0 < value <= top or (colour == PEAK_INK and value >= top):
            continue
        w, t = font.getlength(words), at(value)
        for x in (t + 3, t - 3 - w):
            if x >= 0 and x + w <= x1 + 4 and all(x + w + 3 <= a or x - 3 >= b for a, b in taken):
                taken.append((x, x + w))
                marks.append((t, words, colour, thick, x))
                break
        else:
            marks.append((t, words, colour, thick, None))
    return marks


def peak_said(top: float, peak: float, marks: list[tuple]) -> bool:
    """Whether the bar itself says the map's largest value: beside its tick (`_bar_marks`), or as
    the bar's end (a scale that ends at the peak)."""
    return peak >= top or any(m[2] == PEAK_INK and m[4] is not None for m in marks)


def tile_caption(peak: float, cls_share: float | None, shared_scale: bool) -> str:
    """Under each [CLS] map: its largest weight (with one scale) or its own range (each map scaled
    to itself), and the share [CLS] keeps for itself, which no patch map shows."""
    text = f"max {share(peak)}" if shared_scale else f"0 to {share(peak)}"
    return text + (f" · [CLS] {share(cls_share)}" if cls_share is not None else "")


CAPTION = 15        # pixels under each map of the layers x heads picture for its caption
MINI = 6            # pixels of the scale bar under each map, above its caption


@lru_cache(maxsize=8)
def _attention_grid_template(L: int, H: int, tile: int, rows: tuple | None = None,
                             cols: tuple | None = None):
    """The white sheet with row and column labels ("layer l", "head h" unless given), and the
    top-left corner of every map. The geometry does not depend on the labels."""
    left, top, gap = 64, 22, 6 + MINI + CAPTION
    W = left + H * (tile + gap)
    im = Image.new("RGB", (W, top + L * (tile + gap)), "white")
    draw = ImageDraw.Draw(im)
    font = load_font(13)
    rows = rows or tuple(f"layer {l + 1}" for l in range(L))
    cols = cols or tuple(f"head {h + 1}" for h in range(H))
    for h in range(H):
        draw.text((left + h * (tile + gap) + tile // 2 - 20, 4), cols[h], fill="black", font=font)
    for l in range(L):
        draw.text((6, top + l * (tile + gap) + tile // 2 - 7), rows[l], fill="black", font=font)
    corners = [[(top + l * (tile + gap), left + h * (tile + gap)) for h in range(H)] for l in range(L)]
    return np.asarray(im), corners


def attention_grid_picture(img: np.ndarray, cls_maps: np.ndarray, shared_scale: bool = True,
                           tile: int = 112, cls_self: np.ndarray | None = None,
                           rows: tuple | None = None, cols: tuple | None = None,
                           title: str = "[CLS] attention weight") -> np.ndarray:
    """Every layer (rows) x every head (columns): [CLS] attention over the patches, blended on the
    digit. One absolute colour scale for all maps (0 to the largest weight, at least VIVID times
    the uniform level, which the bar marks) or, with shared_scale=False, each map scaled to its
    own maximum. Under each map: its maximum or range, and `cls_self` (L, H), the weight [CLS]
    gives itself. `rows` / `cols`: labels other than "layer l" / "head h"; `title`: the bar's."""
    L, H, G = cls_maps.shape[:3]
    S = img.shape[0]
    tile = S * _rep(img, tile)                                   # a whole multiple of the image
    template, corners = _attention_grid_template(L, H, tile, rows, cols)
    out = template.copy()
    peaks = cls_maps.max(axis=(2, 3))                                            # (L, H)
    top = scale_top(peaks.max(), G) if shared_scale else peaks[:, :, None, None]
    # All L*H tiles at once: colour at patch resolution, blend at 28x28, upsample once.
    heat = colorize(cls_maps / np.maximum(top, 1e-12), 1.0)                    # (L, H, G, G, 3)
    rep = S // G
    heat = np.repeat(np.repeat(heat, rep, axis=2), rep, axis=3).astype(np.float32)  # (L, H, S, S, 3)
    tiles = (HEAT_ALPHA * heat + (1 - HEAT_ALPHA) * _rgb(img)).astype(np.uint8)     # (L, H, S, S, 3)
    up = tile // S
    for l in range(L):
        for h in range(H):
            y, x = corners[l][h]
            out[y:y + tile, x:x + tile] = _up(tiles[l, h], up)
    im = Image.fromarray(out)
    draw, font = ImageDraw.Draw(im), load_font(11)
    for l in range(L):
        for h in range(H):
            y, x = corners[l][h]
            share = None if cls_self is None else float(cls_self[l, h])
            draw.text((x, y + tile + 1 + MINI), tile_caption(float(peaks[l, h]), share,
                                                            shared_scale),
                      fill="black", font=font)
    out = np.asarray(im).copy()
    # Every map's own scale bar under it: 0 to its top (its maximum, or the shared top), with a
    # tick where evenly spread attention would fall, so a bright but nearly flat map says so.
    bar = _lut()[np.linspace(0, 255, tile).astype(np.uint8)]                         # (tile, 3)
    for l in range(L):
        for h in range(H):
            y, x = corners[l][h]
            out[y + tile + 1:y + tile + MINI - 1, x:x + tile] = bar
            t = float(top) if shared_scale else float(peaks[l, h])
            u = uniform_level(G) / max(t, 1e-12)
            if u <= 1:
                ux = x + min(tile - 2, int(round(u * (tile - 1))))
                out[y + tile:y + tile + MINI, ux:ux + 2] = (34, 197, 94)
    if shared_scale:
        bar = _colorbar(out.shape[1], top, f"{title}, one scale for all maps", uniform_level(G))
    else:
        bar = _colorbar(out.shape[1], "its max", "each map scaled to its own range: 0 to the "
                                                 "value under it; green tick: even spread")
    return np.concatenate([out, bar], axis=0)


def head_at(x: float, y: float, L: int, H: int, image_size: int, tile: int = 112):
    """The 0-based (layer, head) whose map (or caption) is at pixel (x, y) of an
    attention_grid_picture of an image_size-pixel input, or None (a label, a gap, the bar)."""
    tile = image_size * _factor(image_size, tile)        # as attention_grid_picture sizes it
    _, corners = _attention_grid_template(L, H, tile)
    for layer in range(L):
        for head in range(H):
            top, left = corners[layer][head]
            if top <= y < top + tile + CAPTION and left <= x < left + tile:
                return layer, head
    return None


def single_map_picture(img: np.ndarray, grid_map: np.ndarray, title: str, size: int = 336,
                       marked: int | None = None, uniform: float | None = None,
                       top: float | None = None, unit: str | None = None,
                       titled_max: bool = True) -> np.ndarray:
    """One (G, G) map over the image, with the patch grid, a colour bar, and optionally one patch
    outlined (the patch whose attention row this is). `uniform`: the level of evenly spread
    weights, for maps of attention: the scale then reaches at least VIVID times it, the bar marks
    it and the map's maximum, and the title gives that maximum, all as shares ("5.4 %"). `top`:
    the scale's top, for maps with an absolute meaning of their own, in `unit`: "probability"
    (written as the page writes one, "92.0 %") or "log-odds" (the number; the title names the
    unit); with neither, the map is scaled to its own largest value, which has no unit of its
    own, and the bar says "its max". `titled_max=False`: an attention map's maximum is only
    marked on its bar (a small tile whose title has no room for it)."""
    peak = float(grid_map.max())
    G = grid_map.shape[0]
    if uniform is not None:
        top, label = max(peak, VIVID * uniform), None
    elif top is None:
        top, label = max(peak, 1e-12), "its max"
    else:
        # log-odds: the number alone (the title names the unit; the bar's end has ~60 px)
        label = percent(top) if unit == "probability" else _number(top)
    out = heat_overlay(img, grid_map, top, size)
    out = _composite(out, _grid_layer(out.shape[0], G, False, (90, 90, 90)))
    if marked is not None:
        _mark(out, marked, G)
    if label == "its max":
        return np.concatenate([out, _colorbar(out.shape[1], top, title, label=label)], axis=0)
    # The map's largest value, said once: at its tick on the bar ("max 4.0 %" on a bar to
    # 10.0 %), at the bar's end when the scale ends there, else in the title.
    said = f"max {share(peak) if unit != 'log-odds' else _number(peak)}"
    marks = _bar_marks(out.shape[1], top, uniform, (peak, said))
    if titled_max and not peak_said(top, peak, marks):
        title = f"{title} ({said})"
    bar = _colorbar(out.shape[1], top, title, uniform, (peak, said), label, marks)
    return np.concatenate([out, bar], axis=0)


def _number(v: float) -> str:
    """A quantity with no unit of the page's own (log-odds): one decimal, or two significant
    digits below 1 ("0.031"), never "0.0" for a map with bright patches (a sixth trial read a
    bar from 0 to "0.0" under one)."""
    return f"{v:.1f}" if abs(v) >= 0.95 else f"{v:.2g}"


def patch_at(x: float, y: float, size: int, grid: int) -> int:
    """The 0-based patch index under pixel (x, y) of a size x size picture of the grid."""
    cell = size / grid
    c = min(grid - 1, max(0, int(x // cell)))
    r = min(grid - 1, max(0, int(y // cell)))
    return r * grid + c
