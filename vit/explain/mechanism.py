"""How attention works, step by step, and the numbers behind the ViT paper's Figure 7 views
(torch in, numpy out; vit/pictures/mechanism_views.py draws them).

- `walk_through`: for one query token (a patch or [CLS]) in one layer and head, every step of
  attention written out from the block's own weights: pixels -> patch embedding + position ->
  LayerNorm -> q, k, v -> q.k/sqrt(d) -> softmax -> weighted sum of v. The test suite checks it
  against the attention the model itself returns.
- `position_similarity`, `mean_attention_distance`, `embedding_filters`: Figure 7 of Dosovitskiy
  et al. 2020 (centre, right, left) for this model.

Shapes: B batch, C channels, S image side, p patch side, G grid side, N = G*G patches,
T = 1 + N tokens ([CLS] first), D width, H heads, Dh = D // H, L depth.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from vit.model import ViT, batch_within

CLS = -1                 # `patch` value that asks about the [CLS] token instead of a patch


@dataclass
class WalkThrough:
    """One query token's trip through one attention head. Vectors are float32 numpy arrays."""
    layer: int               # 0-based block
    head: int                # 0-based head
    token: int               # query token: 0 = [CLS], 1 + patch for a patch
    grid: int                # G
    pixels: np.ndarray | None  # (C, p, p) the patch's normalised input pixels; None for [CLS]
    embedding: np.ndarray    # (D,) patch_embed(stem(x)) at the patch; the learned [CLS] vector
    position: np.ndarray     # (D,) the token's position embedding
    start: np.ndarray        # (D,) embedding + position: the token before block 1
    token_in: np.ndarray     # (D,) the token entering block `layer` (= start for layer 0)
    normed: np.ndarray       # (D,) token_in after the block's first LayerNorm
    q: np.ndarray            # (Dh,) this token's query in this head
    k: np.ndarray            # (T, Dh) every token's key
    v: np.ndarray            # (T, Dh) every token's value
    scores: np.ndarray       # (T,) q.k_j / sqrt(Dh)
    weights: np.ndarray      # (T,) softmax(scores): this token's row of the attention matrix
    out: np.ndarray          # (Dh,) sum_j weights_j v_j: this head's output for the token

    @property
    def patch(self) -> int | None:
        """0-based patch of the query token, None for [CLS]."""
        return None if self.token == 0 else self.token - 1


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


@torch.no_grad()
def embed(model: ViT, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised images (B, C, S, S) -> (patch embeddings (B, N, D), tokens before block 1
    (B, T, D)): the first lines of `ViT.tokens_and_maps`, kept apart to show each step."""
    x = x.to(model.pos_embed.device, model.pos_embed.dtype)
    emb = model.patch_embed(model.stem(x)).flatten(2).transpose(1, 2)         # (B, N, D)
    cls = model.cls_token.expand(x.shape[0], -1, -1)
    return emb, torch.cat([cls, emb], 1) + model.pos_embed                    # (B, T, D)


@torch.no_grad()
def walk_through(model: ViT, x: torch.Tensor, patch: int, layer: int = 0,
                 head: int = 0) -> WalkThrough:
    """One normalised image (1, C, S, S); `patch` 0-based (or CLS); `layer`, `head` 0-based.
    The attention step is recomputed by hand from the block's fused qkv weights rather than read
    from the model, so that each intermediate (q, k, scores) can be shown."""
    cfg = model.cfg
    if not (patch == CLS or 0 <= patch < cfg.num_patches) or not (0 <= layer < cfg.depth
                                                                  and 0 <= head < cfg.heads):
        raise ValueError(f"no patch {patch} / layer {layer} / head {head} in this model "
                         f"({cfg.num_patches} patches, {cfg.depth} layers, {cfg.heads} heads)")
    token = 0 if patch == CLS else patch + 1
    emb, t = embed(model, x)
    start = t[0, token]
    for blk in model.blocks[:layer]:                 # the residual stream up to this block
        t, _ = blk(t)
    blk = model.blocks[layer]
    h = blk.norm1(t)[0]                                                       # (T, D)
    D, Dh = cfg.dim, cfg.dim // cfg.heads
    W, b = blk.attn.qkv.weight, blk.attn.qkv.bias                             # (3D, D), (3D,)
    # The fused output is laid out (3, H, Dh): q of head h is rows h*Dh.., k is D + h*Dh.., v 2D +.
    q, k, v = (h @ W[s:s + Dh].T + b[s:s + Dh] for s in (head * Dh, D + head * Dh, 2 * D + head * Dh))
    scores = k @ q[token] / Dh ** 0.5                                          # (T,)
    weights = scores.softmax(-1)
    p = cfg.patch_size
    r, c = divmod(max(patch, 0), cfg.grid)
    pixels = None if token == 0 else x[0, :, r * p:(r + 1) * p, c * p:(c + 1) * p]
    return WalkThrough(
        layer, head, token, cfg.grid, None if pixels is None else _np(pixels),
        _np(model.cls_token[0, 0] if token == 0 else emb[0, token - 1]), _np(model.pos_embed[0, token]),
        _np(start), _np(t[0, token]), _np(h[token]), _np(q[token]), _np(k), _np(v),
        _np(scores), _np(weights), _np(weights @ v))


@torch.no_grad()
def position_similarity(model: ViT) -> np.ndarray:
    """(N, G, G): cosine similarity of each patch's position embedding with every patch's
    (Figure 7 centre). [CLS]'s position is left out: it has no place on the grid."""
    G = model.cfg.grid
    pos = F.normalize(model.pos_embed[0, 1:].float(), dim=-1)                  # (N, D)
    return _np(pos @ pos.T).reshape(-1, G, G)


def patch_distances(grid: int, patch_size: int) -> np.ndarray:
    """(N, N): distance in pixels between the centres of two patches."""
    rc = np.stack(np.divmod(np.arange(grid * grid), grid), 1).astype(np.float64)   # (N, 2)
    return patch_size * np.linalg.norm(rc[:, None] - rc[None], axis=-1)


def attention_distance(attn: np.ndarray, grid: int, patch_size: int) -> np.ndarray:
    """(B, L, H, T, T) attention -> (L, H) mean distance in pixels from each query patch to the
    patches it attends to. [CLS] has no place in the image, so it is dropped as a query and as a
    key, and each patch's weights over the other patches are renormalised to sum to 1 (the
    distance of where it looks among the patches, however much it also gives [CLS])."""
    a = np.asarray(attn)[..., 1:, 1:]                                         # (B, L, H, N, N)
    dist = patch_distances(grid, patch_size).astype(a.dtype)
    # sum_j a_ij d_ij / sum_j a_ij: the renormalised row, without a copy of the whole tensor
    per_query = np.einsum("blhij,ij->blhi", a, dist) / np.maximum(a.sum(-1), 1e-12)  # (B, L, H, N)
    return per_query.mean(axis=(0, 3), dtype=np.float64)


@torch.no_grad()
def mean_attention_distance(model: ViT, x: torch.Tensor, batch: int = 16) -> np.ndarray:
    """(L, H) mean attention distance in pixels over a batch of normalised images (B, C, S, S)
    (Figure 7 right, which averages over many images: pass several). See `attention_distance`."""
    cfg = model.cfg
    total = np.zeros((cfg.depth, cfg.heads))
    batch = batch_within(cfg, batch, maps=True)           # every map kept: T*T per head per image
    for i in range(0, x.shape[0], batch):
        xb = x[i:i + batch]
        _, maps = model.tokens_and_maps(xb, return_attention=True)
        attn = torch.stack(maps, 1).float().cpu().numpy()                      # (b, L, H, T, T)
        total += attention_distance(attn, cfg.grid, cfg.patch_size) * xb.shape[0]
    return total / x.shape[0]


@dataclass
class Filters:
    """What maps a patch's pixels to its token, as small images (Figure 7 left)."""
    components: np.ndarray     # (k, C, R, R) top principal components, each of unit length
    energy: np.ndarray         # (k,) share of the filters' total energy each component carries
    rim: int                   # pixels the token sees past its patch on each side (R = p + 2 rim)
    stem: np.ndarray | None    # (F, C, kh, kw) the stem's first-layer conv filters; None: no stem
    linearised_at: int         # how many patch windows the hybrid map was linearised at (0: exact)


def _stem_convs(model: ViT) -> list[nn.Conv2d]:
    return [m for m in model.stem.modules() if isinstance(m, nn.Conv2d)]


def stem_rim(model: ViT) -> int:
    """Pixels past its patch that a token sees: each stride-1 conv of the stem adds its pad."""
    return sum(c.kernel_size[0] // 2 for c in _stem_convs(model))


def window_tokens(model: ViT, w: torch.Tensor) -> torch.Tensor:
    """Pixel windows (M, C, R, R), each a patch plus its rim -> those patches' tokens (M, D): the
    stem run without padding, so a window that lies inside the image gives the model's token."""
    for m in model.stem:
        w = F.conv2d(w, m.weight, m.bias) if isinstance(m, nn.Conv2d) else m(w)
    pe = model.patch_embed
    return F.conv2d(w, pe.weight, pe.bias, stride=pe.stride).flatten(1)


def _windows(model: ViT, x: torch.Tensor, most: int) -> torch.Tensor:
    """(M, C, R, R): pixel windows of the patches whose window lies inside the image (all
    patches, the image zero-padded, if none does), at most `most`, evenly spread over the batch."""
    p, G, m = model.cfg.patch_size, model.cfg.grid, stem_rim(model)
    inside = [r for r in range(G) if r * p - m >= 0 and (r + 1) * p + m <= G * p]
    pad = 0
    if not inside:                       # approximate: the stem pads features, not pixels
        x, inside, pad = F.pad(x, (m,) * 4), list(range(G)), m
    R = p + 2 * m
    starts = [r * p - m + pad for r in inside]
    wins = torch.stack([x[:, :, y:y + R, z:z + R] for y in starts for z in starts], 1)
    wins = wins.flatten(0, 1)                                                  # (M, C, R, R)
    keep = np.unique(np.linspace(0, len(wins) - 1, min(most, len(wins))).round().astype(int))
    return wins[torch.from_numpy(keep)]


def _jacobian(model: ViT, wins: torch.Tensor) -> torch.Tensor:
    """(M, C, R, R) windows -> (M, D, C, R, R): d token / d pixels, one backward per token
    dimension; windows are separate inputs, so each window's gradient is its own Jacobian row.
    (torch.func.jacfwd would do it too, but warns on import.)"""
    wins = wins.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        tokens = window_tokens(model, wins)                                    # (M, D)
        return torch.stack([torch.autograd.grad(tokens[:, d].sum(), wins, retain_graph=True)[0]
                            for d in range(tokens.shape[1])], 1)


def embedding_filters(model: ViT, k: int = 16, x: torch.Tensor | None = None,
                      most: int = 256) -> Filters:
    """The first `k` principal components of the filters that map a patch's pixels to its token.

    Without a stem the patch embedding is one linear map, D filters of C x p x p pixels, and these
    are its top right-singular vectors, as in the paper's Figure 7 left. With a conv stem the map
    is not linear (GELU), so it is linearised: the Jacobian of a patch's token with respect to the
    pixels it sees (its patch plus a rim), at up to `most` patch windows of the normalised images
    `x` (B, C, S, S) (if None, an all-zero one: the data set's mean colour); the components are
    the top right-singular vectors of all those Jacobians' rows together. The stem's first-layer
    filters come with them: the only filters that touch pixels directly. SVD without centring:
    filters are directions."""
    model_dtype = model.pos_embed.dtype
    m, C = stem_rim(model), model.cfg.channels
    if m == 0:
        rows = model.patch_embed.weight.detach().float().flatten(1)           # (D, C*p*p)
        R, count, stem = model.cfg.patch_size, 0, None
    else:
        if x is None:
            x = torch.zeros(1, C, model.cfg.image_size, model.cfg.image_size)
        wins = _windows(model, x.to(model.pos_embed.device, model_dtype), most)
        jac = torch.cat([_jacobian(model, w) for w in wins.split(128)])   # (M, D, C, R, R); bounded memory
        rows = jac.float().flatten(2).flatten(0, 1)                          # (M*D, C*R*R)
        R, count = wins.shape[-1], len(wins)
        stem = _np(_stem_convs(model)[0].weight)
    # Right-singular vectors = eigenvectors of the (small) Gram matrix, largest first.
    energy, vecs = torch.linalg.eigh((rows.T @ rows).double())
    energy, vecs = energy.flip(0).clamp(min=0), vecs.flip(1)
    k = min(k, vecs.shape[1])
    comps = vecs[:, :k].T.float()                                              # (k, C*R*R)
    # An eigenvector's sign is arbitrary: show each with its largest weight positive.
    sign = torch.sign(comps.gather(1, comps.abs().argmax(1, keepdim=True)))
    comps = (comps * sign).reshape(k, C, R, R)
    return Filters(_np(comps), _np(energy[:k] / energy.sum().clamp(min=1e-30)), m, stem, count)
