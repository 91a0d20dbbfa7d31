"""Pretrained ViTs as this project's `ViT`: the same weights, the same logits, every head's
attention for the app.

    python -m vit.convert torchvision:vit_b_16 --out checkpoints/vit-b16-imagenet
    python -m vit.convert timm:vit_base_patch16_224.augreg2_in21k_ft_in1k --out checkpoints/NAME

On a user's machine the official weights come through torchvision's or timm's own download (and
cache); `--random` converts a randomly initialised model instead (no download: for tests and to
check the mapping). `from_torchvision(model)` / `from_timm(model)` do the mapping in memory.

Both libraries build the original ViT (Dosovitskiy et al. 2020): a patch-sized conv, [CLS], learnt
position embeddings, pre-norm blocks with one fused q/k/v projection (rows: q, k, v), GELU MLPs, a
final LayerNorm and a linear head on [CLS] — our `ViT` with `stem_channels=0`. Variants this
model does not have (register tokens, LayerScale, q/k norms, pooled heads, a pre-logits layer)
are refused with one line rather than converted into something else.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn as nn

from vit import storage
from vit.model import ViT, ViTConfig

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ConvertError(ValueError):
    """The model can't be converted; the message is one line for people."""


def _config(image_size, patch_size, channels, dim, depth, heads, mlp_dim, classes, eps) -> ViTConfig:
    return ViTConfig(image_size=image_size, channels=channels, patch_size=patch_size,
                     stem_channels=0, stem_layers=1, dim=dim, depth=depth, heads=heads,
                     mlp_dim=mlp_dim, num_classes=classes, norm_eps=eps)


def _load(model: ViT, state: dict[str, torch.Tensor]) -> ViT:
    """Copy `state` (our names) into `model`; every tensor must be there with its shape."""
    ours = model.state_dict()
    missing = sorted(set(ours) - set(state))
    if missing:
        raise ConvertError(f"nothing to fill {missing[0]} (and {len(missing) - 1} more)")
    for k, v in state.items():
        if ours[k].shape != v.shape:
            raise ConvertError(f"{k}: shape {tuple(v.shape)}, expected {tuple(ours[k].shape)}")
    model.load_state_dict({k: v.detach().clone().float() for k, v in state.items()})
    return model.eval()


def from_torchvision(tv: nn.Module) -> ViT:
    """torchvision.models.VisionTransformer (vit_b_16, vit_l_32, …) -> our ViT, same weights."""
    if not all(hasattr(tv, n) for n in ("conv_proj", "encoder", "class_token", "heads")):
        raise ConvertError(f"{type(tv).__name__} is not a torchvision VisionTransformer")
    enc = tv.encoder
    layers = list(enc.layers)
    if hasattr(tv.heads, "pre_logits"):
        raise ConvertError("models with a pre-logits layer (representation_size) are not supported")
    attn = layers[0].self_attention
    cfg = _config(tv.image_size, tv.patch_size, tv.conv_proj.in_channels, tv.hidden_dim,
                  len(layers), attn.num_heads, tv.mlp_dim, tv.num_classes, enc.ln.eps)
    s = {"patch_embed.weight": tv.conv_proj.weight, "patch_embed.bias": tv.conv_proj.bias,
         "cls_token": tv.class_token, "pos_embed": enc.pos_embedding,
         "norm.weight": enc.ln.weight, "norm.bias": enc.ln.bias,
         "head.weight": tv.heads.head.weight, "head.bias": tv.heads.head.bias}
    for i, layer in enumerate(layers):
        b, a = f"blocks.{i}.", layer.self_attention
        s |= {b + "norm1.weight": layer.ln_1.weight, b + "norm1.bias": layer.ln_1.bias,
              # nn.MultiheadAttention's in_proj stacks q, k, v rows: our qkv's layout
              b + "attn.qkv.weight": a.in_proj_weight, b + "attn.qkv.bias": a.in_proj_bias,
              b + "attn.proj.weight": a.out_proj.weight, b + "attn.proj.bias": a.out_proj.bias,
              b + "norm2.weight": layer.ln_2.weight, b + "norm2.bias": layer.ln_2.bias,
              b + "mlp.0.weight": layer.mlp[0].weight, b + "mlp.0.bias": layer.mlp[0].bias,
              b + "mlp.3.weight": layer.mlp[3].weight, b + "mlp.3.bias": layer.mlp[3].bias}
    return _load(ViT(cfg), s)


def _identity(m) -> bool:
    return m is None or isinstance(m, nn.Identity)


def from_timm(tm: nn.Module) -> ViT:
    """timm's VisionTransformer (vit_tiny/small/base/large_patch16_224, …) -> our ViT."""
    if not all(hasattr(tm, n) for n in ("patch_embed", "blocks", "pos_embed", "norm", "head")):
        raise ConvertError(f"{type(tm).__name__} is not a timm VisionTransformer")
    if getattr(tm, "num_reg_tokens", 0) or getattr(tm, "no_embed_class", False) \
            or getattr(tm, "cls_token", None) is None:
        raise ConvertError("models without one [CLS] token in front of the patches are not supported")
    if getattr(tm, "global_pool", "token") != "token":
        raise ConvertError(f"models pooled by {tm.global_pool!r} are not supported: the app reads [CLS]")
    if not (_identity(getattr(tm, "fc_norm", None)) and _identity(getattr(tm, "norm_pre", None))):
        raise ConvertError("models with a pre-norm or an fc_norm are not supported")
    blocks = list(tm.blocks)
    for blk in blocks:
        extras = [getattr(blk, n, None) for n in ("ls1", "ls2")] + \
                 [getattr(blk.attn, n, None) for n in ("q_norm", "k_norm", "norm")] + \
                 [getattr(blk.mlp, "norm", None)]
        if not all(_identity(m) for m in extras) or getattr(blk.attn, "qkv", None) is None:
            raise ConvertError("blocks with LayerScale, q/k norms or split q/k/v are not supported")
    pe = tm.patch_embed
    size = pe.img_size[0] if isinstance(pe.img_size, (tuple, list)) else pe.img_size
    patch = pe.patch_size[0] if isinstance(pe.patch_size, (tuple, list)) else pe.patch_size
    mlp = blocks[0].mlp
    cfg = _config(size, patch, pe.proj.in_channels, tm.embed_dim, len(blocks),
                  blocks[0].attn.num_heads, mlp.fc1.out_features, tm.num_classes, tm.norm.eps)
    s = {"patch_embed.weight": pe.proj.weight, "patch_embed.bias": pe.proj.bias,
         "cls_token": tm.cls_token, "pos_embed": tm.pos_embed,
         "norm.weight": tm.norm.weight, "norm.bias": tm.norm.bias,
         "head.weight": tm.head.weight, "head.bias": tm.head.bias}
    for i, blk in enumerate(blocks):
        b = f"blocks.{i}."
        s |= {b + "norm1.weight": blk.norm1.weight, b + "norm1.bias": blk.norm1.bias,
              b + "attn.qkv.weight": blk.attn.qkv.weight, b + "attn.qkv.bias": blk.attn.qkv.bias,
              b + "attn.proj.weight": blk.attn.proj.weight, b + "attn.proj.bias": blk.attn.proj.bias,
              b + "norm2.weight": blk.norm2.weight, b + "norm2.bias": blk.norm2.bias,
              b + "mlp.0.weight": blk.mlp.fc1.weight, b + "mlp.0.bias": blk.mlp.fc1.bias,
              b + "mlp.3.weight": blk.mlp.fc2.weight, b + "mlp.3.bias": blk.mlp.fc2.bias}
    return _load(ViT(cfg), s)


# --- the command: fetch through the library's own mechanism, convert, write a checkpoint --------

def load_source(spec: str, pretrained: bool):
    """"torchvision:NAME" or "timm:NAME" -> (the library's model, class names, mean, std)."""
    lib, _, name = spec.partition(":")
    if lib == "torchvision" and name:
        import torchvision
        try:
            weights = torchvision.models.get_model_weights(name).DEFAULT if pretrained else None
            model = torchvision.models.get_model(name, weights=weights)
        except (ValueError, KeyError) as e:
            raise ConvertError(f"torchvision has no model {name!r} ({str(e).splitlines()[0][:80]})") from None
        if weights is not None:
            names = list(weights.meta["categories"])
            t = weights.transforms()
            return model, names, tuple(t.mean), tuple(t.std)
        n = getattr(model, "num_classes", 1000)
        return model, [f"class {i}" for i in range(n)], IMAGENET_MEAN, IMAGENET_STD
    if lib == "timm" and name:
        try:
            import timm
        except ImportError:
            raise ConvertError("timm is not installed: pip install timm") from None
        try:
            model = timm.create_model(name, pretrained=pretrained)
        except RuntimeError as e:
            raise ConvertError(f"timm could not build {name!r} ({str(e).splitlines()[0][:80]})") from None
        cfg = getattr(model, "pretrained_cfg", {}) or {}
        names = _imagenet_names(model.num_classes) if pretrained else None
        return (model, names or [f"class {i}" for i in range(model.num_classes)],
                tuple(cfg.get("mean", IMAGENET_MEAN)), tuple(cfg.get("std", IMAGENET_STD)))
    raise ConvertError(f"name a model as torchvision:NAME or timm:NAME, not {spec!r}")


def _imagenet_names(n: int) -> list[str] | None:
    """ImageNet-1k class names, from torchvision's weights metadata (no download)."""
    if n != 1000:
        return None
    import torchvision
    return list(torchvision.models.ViT_B_16_Weights.DEFAULT.meta["categories"])


def convert(spec: str, out, pretrained: bool = True, argv: list[str] | None = None) -> Path:
    """Build `spec`, convert it, check the logits agree, write a checkpoint folder."""
    from vit.checkpoint import save_checkpoint
    source, names, mean, std = load_source(spec, pretrained)
    source.eval()
    lib = spec.split(":")[0]
    model = from_torchvision(source) if lib == "torchvision" else from_timm(source)
    x = torch.randn(2, model.cfg.channels, model.cfg.image_size, model.cfg.image_size,
                    generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        gap = (source(x) - model(x)).abs().max().item()
    if gap > 1e-3:
        raise ConvertError(f"the converted model's logits differ from {spec}'s by {gap:.2g}")
    command = "python -m vit.convert " + " ".join(argv if argv is not None else [spec, "--out", str(out)])
    save_checkpoint(out, model, {
        "dataset": None, "class_names": names, "normalization": {"mean": list(mean), "std": list(std)},
        "provenance": {"command": command, "source": spec, "pretrained": pretrained,
                       "max_logit_difference": gap, "torch": torch.__version__}})
    return Path(out)


def out_problem(out: Path, overwrite: bool) -> str | None:
    """Why --out can't be written to (one line), or None. A folder that holds anything (a
    checkpoint, a trainer's run, other files; hidden files such as .DS_Store aside) is refused
    unless --overwrite says to write the checkpoint's two files into it, as the trainer does."""
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file, not a folder: choose another --out"
    if not out.is_dir():
        return None
    try:
        held = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    except OSError as e:
        return f"can't read --out {out}: {e.strerror or e}"
    if not held or overwrite:
        return None
    shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
    what = ("a checkpoint" if {"config.json", "model.safetensors"} & set(held)
            else "files")
    return (f"{out} already holds {what} ({shown}): pass --overwrite to write the converted "
            f"model's config.json and model.safetensors over it, or choose another --out")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vit.convert", description=__doc__.splitlines()[0])
    ap.add_argument("source", help="torchvision:NAME (e.g. torchvision:vit_b_16) or timm:NAME")
    ap.add_argument("--out", required=True, help="checkpoint folder to write")
    ap.add_argument("--random", action="store_true",
                    help="convert a randomly initialised model (no download)")
    ap.add_argument("--overwrite", action="store_true",
                    help="write into an --out that is not empty, replacing a checkpoint there")
    args = ap.parse_args(argv)
    # before anything is built or downloaded
    problem = storage.out_problem(args.out) or out_problem(Path(args.out), args.overwrite)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from vit.checkpoint import CheckpointError
    from vit.storage import StorageError
    try:
        out = convert(args.source, args.out, pretrained=not args.random,
                      argv=sys.argv[1:] if argv is None else argv)
    except (ConvertError, OSError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    # the write failed (a full disk): whatever was there is intact
    except (CheckpointError, StorageError) as e:
        print(f"error: {' '.join(str(e).split())}; free some space and run the same command "
              f"again", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
