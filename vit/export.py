"""Export a checkpoint to ONNX: `python -m vit.export checkpoints/mnist --out mnist.onnx`.

The ONNX model takes what `vit.preprocess` makes before normalisation — float32 pictures in
[0, 1], shaped (batch, channels, size, size), any batch size — and gives the logits, (batch,
classes). Normalisation is inside the graph; dividing the logits by the calibration temperature
and the softmax are left to the caller, as the metadata says. The file's metadata holds the whole
contract as JSON strings, so a program that has only the .onnx file can prepare its input and read
its answer (see docs/library.md#onnx):

    vit.input        {"shape": [..], "dtype": "float32", "range": [0, 1], "layout": "NCHW",
                      "preprocessing": "digits" | "objects" | "photos", "normalization": "inside"}
    vit.class_names  ["0", "1", ...]
    vit.calibration  {"temperature": T, "reject_below": p}   probabilities = softmax(logits / T)
    vit.config       the checkpoint's config.json
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from vit.checkpoint import Checkpoint, CheckpointError, open_checkpoint
from vit.storage import atomic_write, out_problem, save_json

OPSET = 18
PRODUCER = "vit-explorer"
# How a file this command wrote begins: ir_version (field 1), then producer_name (field 2).
WRITTEN_HERE = b"\x12" + bytes([len(PRODUCER)]) + PRODUCER.encode()


class ExportError(ValueError):
    """The export failed; the message is one line."""


class Normalised(nn.Module):
    """The model behind its normalisation: pictures in [0, 1] -> logits."""

    def __init__(self, ck: Checkpoint):
        super().__init__()
        c = ck.config
        self.model = ck.model
        shape = (1, len(c.mean), 1, 1)
        self.register_buffer("mean", torch.tensor(c.mean, dtype=torch.float32).view(shape))
        self.register_buffer("std", torch.tensor(c.std, dtype=torch.float32).view(shape))

    def forward(self, pictures: torch.Tensor) -> torch.Tensor:
        return self.model((pictures - self.mean) / self.std)


class PageModel(Normalised):
    """What the page draws while the pen moves, for one picture: pictures (1, C, S, S) in [0, 1]
    -> logits (1, classes), every layer's and head's [CLS] attention row (1, L, H, T: token 0 is
    [CLS] itself) and the attention rollout into the final [CLS] (T,), computed as the server's
    vit/explain/attention.py computes them (heads averaged, 0.5 A + 0.5 I, rows renormalised,
    layers composed)."""

    def forward(self, pictures: torch.Tensor):
        tokens, attn = self.model.forward_features((pictures - self.mean) / self.std,
                                                   return_attention=True)
        logits = self.model.forward_head(tokens)
        T = attn.shape[-1]
        eye = torch.eye(T, dtype=attn.dtype)
        result = eye
        for layer in range(attn.shape[1]):
            a = 0.5 * attn[0, layer].mean(0) + 0.5 * eye
            result = (a / a.sum(-1, keepdim=True)) @ result
        return logits, attn[:, :, :, 0, :], result[0]


PAGE_FILE = "page.onnx"       # beside a checkpoint's weights: the model the page runs itself


def weights_sha256(folder) -> str:
    """The SHA-256 of a checkpoint's weights file: a page model says which weights it was made
    from, and the app serves it only with those weights."""
    import hashlib
    h = hashlib.sha256()
    with open(Path(folder) / "model.safetensors", "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def contract(ck: Checkpoint) -> dict[str, str]:
    """The metadata that says how to call the exported model (module docstring)."""
    c, cfg = ck.config, ck.model.cfg
    calibration = {"temperature": c.temperature}
    if c.reject_below is not None:
        calibration["reject_below"] = c.reject_below
    return {
        "vit.input": json.dumps({"shape": ["batch", cfg.channels, cfg.image_size, cfg.image_size],
                                 "dtype": "float32", "range": [0, 1], "layout": "NCHW",
                                 "preprocessing": c.style.name, "normalization": "inside"}),
        "vit.class_names": json.dumps(list(c.class_names)),
        "vit.calibration": json.dumps(calibration),
        "vit.config": json.dumps(c.to_dict()),
    }


def onnx_out_problem(out) -> str | None:
    """Why `out` must not be written (one line), or None: it must be a .onnx file, and one that
    exists must be an ONNX file this command wrote; never a checkpoint's own files (config.json,
    model.safetensors: `--out ck/model.safetensors` would replace the weights it exports), nor
    a file in the app's folder of models or a filesystem root."""
    out = Path(out)
    if out.suffix.lower() != ".onnx":
        return f"--out {out} must be a file name ending in .onnx (the ONNX file to write)"
    if out.is_dir():
        return f"--out {out} is a folder: name the .onnx file to write"
    if out.exists():
        try:
            with open(out, "rb") as f:
                written_here = WRITTEN_HERE in f.read(64)
        except OSError as e:
            return f"can't read --out {out}: {e.strerror or e}"
        if not written_here:
            return (f"--out {out} exists and is not an ONNX file python -m vit.export wrote: "
                    f"choose another --out, or move it away first")
    return out_problem(out, file=True)


def export(folder, out) -> Path:
    """Write checkpoint `folder` as an ONNX file at `out` (atomically). Raises CheckpointError or
    ExportError with one line."""
    problem = onnx_out_problem(out)
    if problem:
        raise ExportError(problem)
    try:
        import onnx
    except ImportError:
        raise ExportError("ONNX export needs the onnx package: pip install onnx (and "
                          "onnxruntime to run the file)") from None
    ck = open_checkpoint(folder, "cpu")
    cfg = ck.model.cfg
    wrapped = Normalised(ck).eval()
    example = torch.rand(2, cfg.channels, cfg.image_size, cfg.image_size)
    try:
        with warnings.catch_warnings():      # the exporter's notes on its own internals
            warnings.simplefilter("ignore")
            buffer = io.BytesIO()
            torch.onnx.export(wrapped, (example,), buffer, input_names=["pictures"],
                              output_names=["logits"], opset_version=OPSET, dynamo=False,
                              dynamic_axes={"pictures": {0: "batch"}, "logits": {0: "batch"}})
        proto = onnx.load_from_string(buffer.getvalue())
    except Exception as e:           # the exporter raises many kinds; the user needs one line
        raise ExportError(f"could not export {folder}: {str(e).splitlines()[0]}") from None
    for key, value in contract(ck).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.producer_name = PRODUCER
    onnx.checker.check_model(proto)
    out = Path(out)
    atomic_write(out, lambda tmp: onnx.save(proto, str(tmp)))
    return out


def export_page(folder) -> Path:
    """Write checkpoint `folder`'s page model (PageModel) as `folder/page.onnx`, atomically, with
    the contract's metadata and the weights' SHA-256 (`vit.weights_sha256`). Raises
    CheckpointError or ExportError with one line."""
    try:
        import onnx
    except ImportError:
        raise ExportError("ONNX export needs the onnx package: pip install onnx") from None
    ck = open_checkpoint(folder, "cpu")
    cfg = ck.model.cfg
    example = torch.rand(1, cfg.channels, cfg.image_size, cfg.image_size)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            buffer = io.BytesIO()
            torch.onnx.export(PageModel(ck).eval(), (example,), buffer, input_names=["pictures"],
                              output_names=["logits", "cls_attention", "rollout"],
                              opset_version=OPSET, dynamo=False)
        proto = onnx.load_from_string(buffer.getvalue())
    except Exception as e:
        raise ExportError(f"could not export {folder}: {str(e).splitlines()[0]}") from None
    meta = {**contract(ck), "vit.weights_sha256": weights_sha256(folder),
            "vit.outputs": json.dumps({"logits": "(1, classes)", "cls_attention": "(1, L, H, T)",
                                       "rollout": "(T,)"})}
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.producer_name = PRODUCER
    onnx.checker.check_model(proto)
    out = Path(folder) / PAGE_FILE
    data = proto.SerializeToString()
    atomic_write(out, lambda tmp: Path(tmp).write_bytes(data))
    # What the app checks before it lets the page run this file (vit/ui/inpage.py): the weights
    # it was made from, and its own bytes.
    import hashlib
    save_json(Path(folder) / "page.json", {
        "weights_sha256": meta["vit.weights_sha256"],
        "onnx_sha256": hashlib.sha256(data).hexdigest(),
        "command": f"python -m vit.export {Path(folder).name} --page", "opset": OPSET})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m vit.export", description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="checkpoint folder (config.json + model.safetensors)")
    p.add_argument("--out", help="the .onnx file to write")
    p.add_argument("--page", action="store_true",
                   help=f"write the model the page runs itself (logits, [CLS] attention, rollout) "
                        f"as CHECKPOINT/{PAGE_FILE}")
    args = p.parse_args(argv)
    if args.page:
        try:
            path = export_page(args.checkpoint)
        except (CheckpointError, ExportError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB): the page's own model")
        return 0
    if not args.out:
        print("error: name the .onnx file to write with --out (or --page)", file=sys.stderr)
        return 2
    problem = onnx_out_problem(args.out)         # before the checkpoint is read
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        path = export(args.checkpoint, args.out)
    except (CheckpointError, ExportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB): pictures in [0, 1] -> logits; "
          f"its metadata says how to prepare them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
