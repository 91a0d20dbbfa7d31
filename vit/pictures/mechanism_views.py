"""The pictures of the "How attention works" panel (numpy RGB uint8): one token's walk
through a head, and the ViT paper's Figure 7 views (position similarity, embedding filters, mean
attention distance) computed in vit/explain/mechanism.py.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vit.explain.mechanism import Filters, WalkThrough, patch_distances
from vit.pictures.attention_maps import (
    CMAP,
    MARK_COLOUR,
    _mark,
    _rgb,
    _up,
    colorize,
    load_font,
    scale_top,
    share,
)

DIVERGING = "RdBu_r"                     # red = positive, blue = negative, white = 0
POSITIVE, NEGATIVE = (192, 57, 43), (33, 102, 172)
INK, FAINT = (25, 25, 25), (120, 120, 120)
OUTLINE = (110, 255, 110)                # the input's strokes, outlined on the heat maps
UNIFORM = (0, 229, 255)                  # the uniform level 1/T on a colour bar


@lru_cache(maxsize=8)
def font(size: int):
    """DejaVu Sans from matplotlib's own files: it has →, ·, √, Σ, which PIL's default lacks."""
    from matplotlib import font_manager
    try:
        return ImageFont.truetype(font_manager.findfont("DejaVu Sans"), size)
    except OSError:
        return load_font(size)


class _Canvas:
    """A white picture to paste arrays into, with text drawn last (over everything)."""

    def __init__(self, width: int, height: int):
        self.im = Image.new("RGB", (width, height), "white")
        self.draw = ImageDraw.Draw(self.im)

    def paste(self, arr: np.ndarray, x: int, y: int) -> None:
        self.im.paste(Image.fromarray(arr), (x, y))

    def text(self, x: float, y: float, s: str, size: int = 13, fill=INK, anchor: str = "la") -> None:
        self.draw.text((x, y), s, fill=fill, font=font(size), anchor=anchor)

    def lines(self, x: float, y: float, lines: list[str], size: int = 11, fill=FAINT) -> None:
        for i, line in enumerate(lines):
            self.text(x, y + i * (size + 3), line, size, fill)

    def array(self) -> np.ndarray:
        return np.asarray(self.im)


def _wrap(text: str, width: float, size: int = 11) -> list[str]:
    """Text broken into lines that fit `width` pixels (line height: size + 3)."""
    lines = [""]
    for word in text.split():
        if lines[-1] and font(size).getlength(f"{lines[-1]} {word}") > width:
            lines.append(word)
        else:
            lines[-1] = f"{lines[-1]} {word}".strip()
    return lines


def _tick(v: float) -> str:
    return f"{v:.2g}".replace("-", "−")


def _bars(c: _Canvas, values: np.ndarray, top: float, x: int, y: int, w: int, h: int,
          labels: bool = True) -> None:
    """A vector as vertical bars (one per number; red positive, blue negative) in a w x h frame
    whose scale is ±top, with that scale (and the numbers' count) written beside it."""
    n = len(values)
    col = np.arange(w) * n // w                                   # (w,) which number a column shows
    t = np.clip(values[col] / max(top, 1e-12), -1, 1)             # (w,)
    mid = h // 2
    end = np.round(mid - t * (mid - 1)).astype(int)              # (w,) the bar's far end, in rows
    rows = np.arange(h)[:, None]                                  # (h, 1)
    on = (rows >= np.minimum(end, mid)) & (rows <= np.maximum(end, mid))   # (h, w)
    if w // n >= 3:                                               # room for a gap between bars
        on[:, np.r_[True, col[1:] != col[:-1]]] = False
    arr = np.full((h, w, 3), 255, np.uint8)
    arr[on] = np.where((t >= 0)[None, :, None], POSITIVE, NEGATIVE).repeat(h, 0)[on]
    arr[mid] = FAINT
    arr[[0, -1]] = arr[:, [0, -1]] = FAINT                       # the frame
    c.paste(arr, x, y)
    if labels:
        for v, yy in ((top, y), (0.0, y + mid), (-top, y + h - 1)):
            c.text(x - 4, yy, _tick(v), 11, FAINT, "rm")
    c.text(x, y + h + 2, "1", 10, FAINT)
    c.text(x + w, y + h + 2, str(n), 10, FAINT, "ra")


def _resize(a: np.ndarray, size: int) -> np.ndarray:
    """Nearest-neighbour resampling of the first two axes to exactly size x size."""
    idx = np.arange(size) * a.shape[0] // size
    return a[idx][:, idx]


def _side(S: int, room: int) -> int:
    """Pixels a side of an S-pixel image gets in `room`: a whole multiple of S (pixels stay
    square), or `room` itself for an image larger than that."""
    return S * (room // S) if S <= room else room


def _outline(image: np.ndarray, size: int) -> np.ndarray:
    """(size, size) bool: the border of the input's bright strokes (brightness >= 0.5)."""
    g = _resize(image.mean(-1) if image.ndim == 3 else image, size) >= 0.5
    inner = g.copy()
    inner[1:] &= g[:-1]
    inner[:-1] &= g[1:]
    inner[:, 1:] &= g[:, :-1]
    inner[:, :-1] &= g[:, 1:]
    return g & ~inner


def _heat(values: np.ndarray, image: np.ndarray, size: int, cmap: str, vmin: float, vmax: float,
          patch: int | None) -> np.ndarray:
    """A (G, G) map, size x size px, with the patch grid, a grey input's strokes outlined and
    the query patch boxed."""
    G = values.shape[0]
    arr = _resize(colorize(values, vmax, vmin, cmap), size)               # (size, size, 3)
    if image.ndim == 2:                  # ink on a dark ground: its strokes, outlined
        arr[_outline(image, size)] = OUTLINE
    lines = np.arange(G) * size // G                                         # a faint patch grid
    arr[lines] = arr[lines] // 2 + 64
    arr[:, lines] = arr[:, lines] // 2 + 64
    return arr if patch is None else _mark(arr, patch, G)


def _colour_bar(c: _Canvas, cmap: str, vmin: float, vmax: float, x: int, y: int, h: int,
                mark: tuple[float, str] | None = None, fmt=None) -> None:
    """A vertical colour bar, vmax at the top, its ends and middle labelled (`fmt`: how, default
    a plain number); `mark`: (value, label) of a level to mark on it in cyan (its label moved
    clear of the others)."""
    fmt = fmt or _tick
    ramp = colorize(np.linspace(vmax, vmin, h)[:, None].repeat(12, 1), vmax, vmin, cmap)
    c.paste(ramp, x, y)
    c.draw.rectangle([x - 1, y - 1, x + 12, y + h], outline=FAINT)
    ticks = ((vmax, y + 5), ((vmax + vmin) / 2, y + h // 2), (vmin, y + h - 6))
    for v, yy in ticks:
        c.text(x + 16, yy, fmt(v), 11, INK, "lm")
    if mark is not None:
        value, label = mark
        u = y + round((vmax - value) / (vmax - vmin) * (h - 1))
        at = u
        for _, yy in ticks:                       # keep the label 13 px from every tick label
            if abs(at - yy) < 13:
                at = yy - 13 if yy > y + 13 else yy + 13
        c.draw.rectangle([x - 3, u - 1, x + 14, u + 1], fill=UNIFORM)
        c.draw.line([(x + 14, u), (x + 18, at)], fill=UNIFORM, width=1)
        c.text(x + 20, at, label, 11, (0, 120, 140), "lm")


WALK_WIDTH = 1240


def _window(image: np.ndarray, patch: int, grid: int, p: int, rim: int) -> np.ndarray:
    """The pixels a patch's token sees: the patch and `rim` pixels around it (zeros past the
    image's edge, as the stem's padding), (R, R) or (R, R, 3)."""
    pad = ((rim, rim), (rim, rim)) + ((0, 0),) * (image.ndim - 2)
    r, c = divmod(patch, grid)
    return np.pad(image, pad)[r * p:r * p + p + 2 * rim, c * p:c * p + p + 2 * rim]


def _token_row(c: _Canvas, w: WalkThrough, image: np.ndarray, p: int, rim: int, y: int) -> None:
    """Steps 1-6: input, pixels, embedding + position = token, the LayerNorm'd token."""
    S, G, patch = image.shape[0], w.grid, w.patch
    pic = _resize(_rgb(image).astype(np.uint8), _side(S, 168))
    c.paste(pic if patch is None else _mark(pic.copy(), patch, G), 12, y)
    c.draw.rectangle([11, y - 1, 12 + pic.shape[1], y + pic.shape[0]], outline=FAINT)
    c.text(12, y - 36, "1. the input", 13)
    c.text(12, y - 19, "query patch boxed" if patch is not None else "query: [CLS]", 11, FAINT)
    if patch is None:
        c.draw.rectangle([200, y, 350, y + 150], outline=FAINT)
        for i, line in enumerate(("[CLS] has no", "pixels: it starts", "as a learned", "vector")):
            c.text(275, y + 45 + 17 * i, line, 12, INK, "ma")
        c.text(200, y - 36, "2. no pixels", 13)
    else:
        R = p + 2 * rim
        side = _side(R, 150)
        win = _resize(_rgb(_window(image, patch, G, p, rim)).astype(np.uint8), side)
        c.paste(win, 200, y)
        c.draw.rectangle([199, y - 1, 200 + side, y + side], outline=FAINT)
        a, b = (round(v * side / R) for v in (rim, rim + p))             # the patch inside its rim
        c.draw.rectangle([200 + a, y + a, 200 + b - 1, y + b - 1], outline=MARK_COLOUR, width=3)
        c.text(200, y - 36, f"2. its {p}×{p} pixels", 13)
        c.text(200, y - 19, f"+ a {rim}-px rim the conv stem sees" if rim else "", 11, FAINT)
    c.text(375, y + 75, "→", 22, FAINT, "mm")
    vecs = (w.embedding, w.position, w.start)
    top = float(max(np.abs(v).max() for v in vecs))      # one scale: "+" and "=" read off the bars
    titles = ("3. learned [CLS] vector" if patch is None else "3. patch embedding",
              "4. position embedding", "5. token into layer 1")
    for i, (v, title) in enumerate(zip(vecs, titles)):
        x = 425 + i * 195
        _bars(c, v, top, x, y, 170, 168, labels=i == 0)
        c.text(x, y - 36, title, 13)
        if i:
            c.text(x - 12, y + 84, "+=" [i - 1], 20, INK, "mm")
    c.text(x, y - 19, f"{len(w.start)} numbers each, one scale", 11, FAINT)
    x = 1055
    _bars(c, w.normed, float(np.abs(w.normed).max()), x, y, 170, 168)
    c.text(x - 40, y - 36, "6. LayerNorm of that" if w.layer == 0 else "6. token into layer "
           f"{w.layer + 1}", 13)
    layers = "layer 1" if w.layer == 1 else f"layers 1–{w.layer}"
    c.text(x - 40, y - 19, "what the head reads" if w.layer == 0 else f"after {layers}, LayerNorm'd",
           11, FAINT)


def _head_row(c: _Canvas, w: WalkThrough, image: np.ndarray, y: int) -> None:
    """Steps 7-10: query, scores over the grid, softmax weights over the grid, output."""
    G, T, Dh, S, patch = w.grid, len(w.weights), len(w.q), image.shape[0], w.patch
    size = _side(S, 196)
    _bars(c, w.q, float(np.abs(w.q).max()), 50, y, 190, size)
    c.text(12, y - 36, "7. its query q", 13)
    c.text(12, y - 19, f"{Dh} numbers: W_q × step 6", 11, FAINT)
    c.text(265, y + size // 2, "→", 22, FAINT, "mm")
    # Scores have no natural scale: symmetric about 0 (the sign matters), to the largest size.
    s_top = float(np.abs(w.scores).max())
    c.paste(_heat(w.scores[1:].reshape(G, G), image, size, DIVERGING, -s_top, s_top, patch), 290, y)
    _colour_bar(c, DIVERGING, -s_top, s_top, 290 + size + 6, y, size)
    c.text(290, y - 36, f"8. scores q·k / √{Dh}, every key", 13)
    c.text(290, y - 19, f"[CLS]'s key: {w.scores[0]:.2f} · colour: ± the largest", 11, FAINT)
    c.text(580, y + size // 2, "→", 22, FAINT, "mm")
    # Weights on the app's absolute scale: 0 to at least VIVID times the uniform level 1/T.
    top = scale_top(float(w.weights[1:].max()), G)
    x = 610
    c.paste(_heat(w.weights[1:].reshape(G, G), image, size, CMAP, 0.0, top, patch), x, y)
    # (a share, as the caption's "[CLS] gets 2.0 %" and every share on the page: a trial read
    # "0 … 0.05 … 0.1" on this bar beside the caption's per cent)
    # ("even": the level of every token attended equally, as every map's bar marks it)
    _colour_bar(c, CMAP, 0.0, top, x + size + 6, y, size, (1 / T, "even"),
                fmt=lambda v: "0" if v == 0 else share(v))
    c.text(x, y - 36, "9. softmax: weights, sum 100 %", 13)
    c.text(x, y - 19, f"[CLS] gets {share(float(w.weights[0]))} · cyan: even, {share(1 / T)} each",
           11, FAINT)
    c.text(905, y + size // 2, "→", 22, FAINT, "mm")
    _bars(c, w.out, float(np.abs(w.out).max()), 960, y, 265, size)
    c.text(925, y - 36, "10. output: Σ weight × value", 13)
    c.text(925, y - 19, f"{Dh} numbers: this head's answer", 11, FAINT)


def walk_through_picture(w: WalkThrough, image: np.ndarray, patch_size: int, rim: int = 0) -> np.ndarray:
    """The walk-through as a strip of numbered steps in two rows: the token (input, pixels, patch
    embedding + position embedding = token, then LayerNorm'd), and the head (query, scores over
    the grid, softmax weights over the grid, output). `image`: the model's input (S, S) or
    (S, S, 3) in [0, 1]; `rim`: pixels the conv stem sees past the patch. Vectors are bars on a
    scale of ± their largest size (written beside them); steps 3-5 share one scale."""
    c = _Canvas(WALK_WIDTH, 590)
    who = "[CLS]" if w.patch is None else f"patch {w.patch + 1}"
    c.text(12, 8, f"How {who} attends in layer {w.layer + 1}, head {w.head + 1}: one row of the "
                  "attention matrix, step by step from the model's own weights", 16)
    _token_row(c, w, image, patch_size, rim, 78)
    _head_row(c, w, image, 350)
    return c.array()


def _tile(values: np.ndarray, cell: int, top: float) -> np.ndarray:
    """(C, h, w) or (h, w) values on a ±top scale -> an RGB tile, `cell` px per value: diverging
    colours for one channel, for three the colour itself (0.5 + 0.5 v/top per channel, as the
    paper shows its RGB filters)."""
    if values.ndim == 3 and values.shape[0] == 3:
        rgb = np.clip(0.5 + 0.5 * values.transpose(1, 2, 0) / top, 0, 1)
        return _up((rgb * 255).astype(np.uint8), cell)
    v = values.reshape(values.shape[-2:]) if values.ndim == 3 and values.shape[0] == 1 else \
        values.mean(0) if values.ndim == 3 else values
    return _up(colorize(v, top, -top, DIVERGING), cell)


def _horizontal_bar(c: _Canvas, x: int, y: int, w: int, lo: float, hi: float, cmap: str,
                    title: str) -> None:
    """A horizontal colour bar from lo to hi, labelled at both ends and 0, with a title."""
    c.paste(colorize(np.linspace(lo, hi, w)[None].repeat(12, 0), hi, lo, cmap), x, y)
    c.draw.rectangle([x - 1, y - 1, x + w, y + 12], outline=FAINT)
    for v, xx in ((lo, x), ((lo + hi) / 2, x + w // 2), (hi, x + w - 1)):
        c.text(xx, y + 15, _tick(v), 11, INK, "ma")
    c.text(x + w + 10, y + 6, title, 12, INK, "lm")


def position_similarity_picture(sim: np.ndarray) -> np.ndarray:
    """(N, G, G) cosine similarities -> the paper's grid of small maps: the map at row r, column
    c of the grid shows how similar patch (r, c)'s position embedding is to every patch's, on
    one diverging scale from -1 to 1."""
    N, G = sim.shape[0], sim.shape[1]
    cell = max(2, round(48 / G))
    tile, gap, left = G * cell, 4, 52
    W = max(left + G * (tile + gap) + 12, 520)
    text = _wrap("Each small map stands for one patch's place (row, column): it shows how alike "
                 "that place's position embedding is to every place's (cosine similarity). The "
                 "model learned these; nothing told it the patches form a grid.", W - 16)
    top = 30 + 14 * len(text) + 34
    c = _Canvas(W, top + G * (tile + gap) + 52)
    c.text(8, 6, "Position embeddings: how alike are two places?", 15)
    c.lines(8, 30, text)
    for i in range(N):
        r, col = divmod(i, G)
        x, y = left + col * (tile + gap), top + r * (tile + gap)
        c.paste(_tile(sim[i], cell, 1.0), x, y)
        c.draw.rectangle([x - 1, y - 1, x + tile, y + tile], outline=(200, 200, 200))
    for j in range(G):
        c.text(left + j * (tile + gap) + tile // 2, top - 3, str(j + 1), 10, FAINT, "md")
        c.text(left - 5, top + j * (tile + gap) + tile // 2, str(j + 1), 10, FAINT, "rm")
    c.text(left, top - 18, "column →", 10, FAINT, "ld")
    c.text(8, top - 18, "row ↓", 10, FAINT, "ld")
    y = top + G * (tile + gap) + 6
    _horizontal_bar(c, left, y, 200, -1.0, 1.0, DIVERGING, "cosine similarity")
    return c.array()


def _filter_scale(channels: int, title: str) -> tuple[str, str]:
    """The colour map and title of a filter picture's bar: diverging for one channel; for colour
    filters each channel's weight is its brightness (grey = 0), so the bar is grey."""
    if channels == 3:
        return "gray", f"{title}; per colour channel, grey = 0"
    return DIVERGING, title


def filters_picture(f: Filters, patch_size: int, per_row: int = 16) -> np.ndarray:
    """The filters that map pixels to tokens as small maps: the stem's first-layer filters, if
    there is a stem (one scale, their largest weight), then the top principal components (one
    scale: each is a unit vector), the patch's own pixels boxed inside the rim, and the share of
    the filters' energy each component carries under it."""
    k, C, R = f.components.shape[:3]
    pc_cell = max(3, 48 // R)
    pc_tile, gap = R * pc_cell, 10
    W = 16 + per_row * (pc_tile + gap)
    rows_pc = -(-k // per_row)
    stem_h = 0
    if f.stem is not None:
        F_, kh = f.stem.shape[0], f.stem.shape[2]
        s_cell = max(3, 36 // kh)
        s_tile = kh * s_cell
        stem_h = 44 + -(-F_ // per_row) * (s_tile + 8) + 34
    c = _Canvas(max(W, 640), 34 + stem_h + 44 + (18 if f.rim else 0) + rows_pc * (pc_tile + 26) + 34)
    c.text(8, 6, "What turns a patch's pixels into its token", 15)
    y = 34
    if f.stem is not None:
        s_top = float(np.abs(f.stem).max())
        c.text(8, y, f"The conv stem's first layer: its {F_} {kh}×{kh} filters, the only weights "
                     f"that touch the pixels", 12)
        y += 20
        for i in range(F_):
            r, col = divmod(i, per_row)
            c.paste(_tile(f.stem[i], s_cell, s_top), 16 + col * (pc_tile + gap), y + r * (s_tile + 8))
        y += -(-F_ // per_row) * (s_tile + 8) + 2
        _horizontal_bar(c, 16, y, 160, -s_top, s_top, *_filter_scale(C, "weight, one scale for all"))
        y += 46
    pc_top = float(np.abs(f.components).max())
    if f.rim:
        what = (f"Top {k} principal components of the map from a patch's {R}×{R} pixels (the "
                f"{patch_size}×{patch_size} patch, boxed, + its rim) to its token, linearised")
    else:
        what = (f"Top {k} principal components of the patch embedding's linear filters "
                f"({patch_size}×{patch_size} pixels each), as in the paper's Figure 7")
    c.text(8, y, what, 12)
    y += 20
    if f.rim:
        c.text(8, y, f"(the stem's GELUs make that map non-linear: these are the principal directions "
                     f"of its Jacobian at {f.linearised_at} patches of the inputs)", 11, FAINT)
        y += 18
    for i in range(k):
        r, col = divmod(i, per_row)
        x, yy = 16 + col * (pc_tile + gap), y + r * (pc_tile + 26)
        c.paste(_tile(f.components[i], pc_cell, pc_top), x, yy)
        if f.rim:
            a, b = f.rim * pc_cell, (f.rim + patch_size) * pc_cell - 1
            c.draw.rectangle([x + a, yy + a, x + b, yy + b], outline=(0, 160, 80))
        share = 100 * float(f.energy[i])
        c.text(x + pc_tile // 2, yy + pc_tile + 2, f"{share:.1f} %",
               10, FAINT, "ma")
    y += rows_pc * (pc_tile + 26) + 4
    _horizontal_bar(c, 16, y, 160, -pc_top, pc_top, *_filter_scale(
        C, "weight, one scale (unit vectors); % = share of the filters' energy"))
    return c.array()


def attention_distance_picture(dist: np.ndarray, grid: int, patch_size: int, about: str) -> np.ndarray:
    """(L, H) mean attention distances -> the paper's scatter: layer across, distance in pixels up,
    one dot per head, with the distance of attention spread evenly over all patches marked
    (and 0: a patch that looks only at itself). `about`: what the images were, for the title."""
    L, H = dist.shape
    uniform = float(patch_distances(grid, patch_size).mean())
    fig = _figure(6.4, 4.3)
    ax = fig.add_axes((0.11, 0.13, 0.62, 0.72))
    from matplotlib import colormaps
    colours = colormaps["tab10"](np.arange(H) % 10)
    for h in range(H):
        ax.scatter(np.arange(1, L + 1) + (h - (H - 1) / 2) * 0.06, dist[:, h], s=28,
                   color=colours[h], label=f"head {h + 1}", zorder=3)
    ax.axhline(uniform, color="0.35", linestyle="--", linewidth=1)
    ax.text(L + 0.6, uniform, f"attention spread\nevenly: {uniform:.1f} px", fontsize=8,
            va="center", ha="left", clip_on=False)
    ax.axhline(0, color="0.7", linewidth=0.8)
    ax.set_xlim(0.5, L + 0.5)
    ax.set_ylim(0, 1.12 * max(uniform, float(dist.max())))
    ax.set_xticks(np.arange(1, L + 1))
    ax.set_xlabel("layer (network depth)")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 0.72), fontsize=8, frameon=False)
    fig.text(0.02, 0.955, "How far does each head look?", fontsize=12, ha="left")
    fig.text(0.02, 0.905, about, fontsize=8, ha="left", color="0.35")
    return _to_array(fig)


def _figure(width: float, height: float, dpi: int = 100):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=dpi)


def _to_array(fig) -> np.ndarray:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
