"""A small Vision Transformer ("An Image is Worth 16x16 Words", Dosovitskiy et al. 2020).

One readable file: config dataclass, attention, block, model. Shapes are noted where tensors are
reshaped. B = batch, N = number of patches, T = 1 + N tokens ([CLS] first), D = embedding dim,
H = heads, Dh = D // H.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ViTConfig:
    """Every hyper-parameter of the model. The trainer builds its CLI flags from these fields,
    so the defaults here are the one place the bundled checkpoint's architecture is defined."""

    image_size: int = 28      # square input, pixels
    channels: int = 1         # 1 for MNIST / Fashion-MNIST
    patch_size: int = 4       # 28 / 4 = a 7x7 grid of patches: readable attention maps
    stem_channels: int = 32   # >0: the paper's "hybrid" input, a 3x3 conv stem before patching
    stem_layers: int = 2      # 3x3 convs in that stem (each token then sees a rim this many px wide)
    dim: int = 96             # token width D
    depth: int = 6            # transformer blocks
    heads: int = 4            # attention heads per block (D must divide by it)
    mlp_dim: int = 192        # hidden width of each block's MLP
    dropout: float = 0.0      # dropout on attention output / MLP / embeddings
    num_classes: int = 10
    norm_eps: float = 1e-5    # LayerNorm epsilon (torch's default; ViT-B/16 as published: 1e-6)

    def __post_init__(self) -> None:
        # Signs first: the divisibility checks below would divide by a zero patch or head count.
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "dropout":
                if not 0.0 <= v < 1.0:
                    raise ValueError(f"dropout must be in [0, 1), got {v}")
            elif f.name == "norm_eps":
                if not 0.0 < v < 1.0:
                    raise ValueError(f"norm_eps must be in (0, 1), got {v}")
            elif f.name == "stem_channels":
                if v < 0:
                    raise ValueError(f"stem_channels must be 0 (no stem) or more, got {v}")
            elif v < 1:
                raise ValueError(f"{f.name} must be a positive integer, got {v}")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size {self.image_size} is not divisible by patch_size {self.patch_size}")
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not divisible by heads {self.heads}")

    @property
    def grid(self) -> int:
        """Patches per side (7 for 28 px images in 4 px patches)."""
        return self.image_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid ** 2

    def to_dict(self) -> dict:
        return asdict(self)

    def image_bytes(self, maps: bool = False) -> int:
        """About the most one image holds at once in a forward pass beyond the weights: one
        layer's attention scores and weights and its activations (or, with `maps`, every
        layer's attention maps kept for the pictures), and the conv stem's feature maps at
        full resolution. What batches of many images are cut by (`batch_within`)."""
        T = self.num_patches + 1
        layer = T * (2 * self.heads * T + self.mlp_dim + 4 * self.dim)
        kept = self.depth * self.heads * T * T if maps else 0
        stem = 2 * self.image_size ** 2 * max(self.stem_channels, self.channels)
        return 4 * (layer + kept + stem)


# What one batch of a pass over many images (a test set, occlusion's blanked copies, deletion
# curves) may hold beyond the weights: the batch is cut to fit, so a model with 4,097 tokens
# takes its images one at a time rather than 256 at once (19 GB).
BATCH_BYTES = 256 << 20


def batch_within(cfg: ViTConfig, wanted: int, maps: bool = False) -> int:
    """`wanted`, or fewer images so that a batch holds at most BATCH_BYTES (at least 1)."""
    return max(1, min(int(wanted), BATCH_BYTES // cfg.image_bytes(maps)))


# The published ViT sizes (Dosovitskiy et al. 2020: Base; Touvron et al. 2021: Tiny, Small),
# for `python -m vit.train --preset`: width, depth, heads, MLP width, and no conv stem (a plain
# linear patch embedding) with LayerNorm epsilon 1e-6, as those models have. Image and patch size
# stay the data set's and the flags' (the papers' 224/16 suits photos, not 28-px digits).
PRESETS: dict[str, dict] = {
    "ti": dict(dim=192, depth=12, heads=3, mlp_dim=768, stem_channels=0, norm_eps=1e-6),
    "s": dict(dim=384, depth=12, heads=6, mlp_dim=1536, stem_channels=0, norm_eps=1e-6),
    "b": dict(dim=768, depth=12, heads=12, mlp_dim=3072, stem_channels=0, norm_eps=1e-6),
}


class Attention(nn.Module):
    """Multi-head self-attention with two paths over the same weights.

    The fused path (`scaled_dot_product_attention`) is used for training and plain inference; the
    explicit path computes softmax(QK^T / sqrt(Dh)) itself so it can hand back the per-head weights
    the app visualises. `nn.MultiheadAttention` is not used because its fast path never returns
    per-head weights.
    """

    def __init__(self, dim: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout
        self.proj_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, return_attention: bool = False,
                head_mask: torch.Tensor | None = None):
        """head_mask: (H,) multiplies each head's output (0 = that head switched off)."""
        B, T, D = x.shape
        # (B, T, 3D) -> (B, T, 3, H, Dh) -> q, k, v each (B, H, T, Dh). Split along dim 2, not
        # permuted to (3, B, H, T, Dh) first: backward then stacks their gradients straight into
        # the (B, T, 3D) layout the qkv Linear wants, without a second copy.
        qkv = self.qkv(x).reshape(B, T, 3, self.heads, D // self.heads)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        if return_attention:
            attn = (q @ k.transpose(-2, -1)) * self.scale            # (B, H, T, T)
            attn = attn.softmax(dim=-1)
            out = attn @ v                                          # (B, H, T, Dh)
        else:
            attn = None
            out = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0)
        if head_mask is not None:
            out = out * head_mask.to(out.dtype).view(1, -1, 1, 1)    # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(B, T, D)                  # (B, T, D)
        return self.proj_drop(self.proj(out)), attn


class MLP(nn.Sequential):
    def __init__(self, dim: int, hidden: int, dropout: float = 0.0):
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout),
                         nn.Linear(hidden, dim), nn.Dropout(dropout))


class Block(nn.Module):
    """Pre-norm transformer block: x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.attn = Attention(cfg.dim, cfg.heads, cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.mlp = MLP(cfg.dim, cfg.mlp_dim, cfg.dropout)

    def forward(self, x: torch.Tensor, return_attention: bool = False,
                head_mask: torch.Tensor | None = None):
        a, attn = self.attn(self.norm1(x), return_attention, head_mask)
        x = x + a
        x = x + self.mlp(self.norm2(x))
        return x, attn


def _trunc_normal(t: torch.Tensor, std: float = 0.02) -> None:
    # As timm's ViT does. Note torch's bounds a=-2, b=2 are absolute, so at std 0.02 this is in
    # effect a plain normal; kept so that the bundled checkpoints stay reproducible bit for bit.
    nn.init.trunc_normal_(t, std=std)


class ViT(nn.Module):
    """The model alone: it knows nothing of files, checkpoints or the Hub (vit/checkpoint.py and
    vit/hub.py build on it, never the other way round)."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.cfg = cfg
        # The "hybrid" of the paper (sec. 3.1), scaled down: one 3x3 conv at full resolution lets
        # each token see its patch plus a one-pixel rim, so strokes cut by a patch border are not
        # lost to the linear projection. Tokens stay one per patch, so attention maps keep the grid.
        # More layers widen that rim (one pixel per layer) and let the stem find stroke pieces
        # before the patches are flattened; "Early convolutions help transformers see better"
        # (Xiao et al. 2021) found such stems make ViTs train faster and more reliably.
        self.stem = nn.Identity()
        if cfg.stem_channels:
            layers, c = [], cfg.channels
            for _ in range(cfg.stem_layers):
                layers += [nn.Conv2d(c, cfg.stem_channels, 3, padding=1), nn.GELU()]
                c = cfg.stem_channels
            self.stem = nn.Sequential(*layers)
        # A conv with kernel = stride = patch size is exactly "cut into patches, flatten, project".
        self.patch_embed = nn.Conv2d(cfg.stem_channels or cfg.channels, cfg.dim, cfg.patch_size,
                                     stride=cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + cfg.num_patches, cfg.dim))
        self.pos_drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)
        self.apply(self._init_weights)
        _trunc_normal(self.pos_embed)
        _trunc_normal(self.cls_token)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            _trunc_normal(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward_features(self, x: torch.Tensor, return_attention: bool = False,
                         head_mask: torch.Tensor | None = None):
        """Images (B, C, S, S) -> normalised tokens (B, T, D) and, if asked, the attention
        weights of every block stacked as (B, depth, H, T, T)."""
        x, maps = self.tokens_and_maps(x, return_attention, head_mask)
        return x, (torch.stack(maps, dim=1) if return_attention else None)

    def tokens_and_maps(self, x: torch.Tensor, return_attention: bool = False,
                        head_mask: torch.Tensor | None = None):
        """forward_features, with each block's attention (B, H, T, T) as the tensor the rest of
        the network used (so that gradients can be taken with respect to it), in a list.
        head_mask: (depth, H), multiplying each head's output (0 = switched off), per call — so
        that one request can switch heads off while another uses the same model."""
        x = x.to(self.pos_embed.device)                # a CPU input to a GPU model just works
        if x.device.type == "cpu" and not torch.jit.is_tracing():     # (ONNX export traces)
            # Channels-last (B, S, S, C in memory): oneDNN's convolutions run faster on it
            # (the stem's forward and backward ~25 % less time on a 2-core CPU), and the patch
            # projection then hands back its tokens already contiguous. The same maths.
            # (`contiguous(memory_format=...)` would keep a 1-channel image's strides as they are.)
            x = torch.empty_like(x, memory_format=torch.channels_last).copy_(x)
        x = self.patch_embed(self.stem(x))             # (B, D, grid, grid)
        x = x.flatten(2).transpose(1, 2)               # (B, N, D), patches in row-major order
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed  # (B, T, D)
        x = self.pos_drop(x)
        maps = []
        for i, blk in enumerate(self.blocks):
            x, attn = blk(x, return_attention, None if head_mask is None else head_mask[i])
            maps.append(attn)
        return self.norm(x), maps

    def forward_head(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(tokens[:, 0])                 # classify from the [CLS] token

    def forward(self, x: torch.Tensor, return_attention: bool = False,
                head_mask: torch.Tensor | None = None):
        tokens, attn = self.forward_features(x, return_attention, head_mask)
        logits = self.forward_head(tokens)
        return (logits, attn) if return_attention else logits
