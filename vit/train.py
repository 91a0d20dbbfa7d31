"""Train a ViT on MNIST or Fashion-MNIST: `python -m vit.train --help`.

Read top to bottom: flags (generated from the two config dataclasses), data, model, optimiser,
the loop, checkpoints. Every random draw of step s in epoch e comes from a generator seeded by
(seed, e, s), so a run stopped anywhere and resumed with --resume ends with exactly the weights of
an uninterrupted run.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F

from . import distributed
from .checkpoint import (CheckpointError, atomic_write, load_tensors, read_config, resolve_device,
                         save_checkpoint, save_json, save_tensors)
from .data import AUGMENT, DATASETS, DEFAULT_DATA_DIR, DataError, load_split, normalize
from .model import ViT, ViTConfig


@dataclass
class TrainConfig:
    """Training knobs. Defaults = the command that produced the bundled checkpoints."""
    dataset: str = field(default="mnist", metadata={"help": "mnist or fashion-mnist",
                                                    "choices": list(DATASETS)})
    data_dir: str = field(default=DEFAULT_DATA_DIR, metadata={
        "help": "folder with the data set (torchvision layout, or a folder of raw IDX files)"})
    download: bool = field(default=True, metadata={
        "help": "download the data set if it is missing (--no-download to forbid)"})
    out: str = field(default="", metadata={"help": "checkpoint folder (default: checkpoints/DATASET)"})
    epochs: int = field(default=28, metadata={"help": "passes over the training set"})
    batch_size: int = field(default=128, metadata={"help": "images per optimiser step"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate of AdamW"})
    min_lr: float = field(default=1e-5, metadata={"help": "learning rate at the end of the cosine"})
    weight_decay: float = field(default=0.05, metadata={
        "help": "AdamW weight decay, applied to weight matrices only"})
    warmup_epochs: float = field(default=2.0, metadata={"help": "linear warm-up length, in epochs"})
    label_smoothing: float = field(default=0.1, metadata={"help": "cross-entropy label smoothing"})
    grad_clip: float = field(default=1.0, metadata={"help": "max gradient norm (0 = off)"})
    augment: bool = field(default=True, metadata={
        "help": "random affine augmentation: rotation, scale, shift, shear, and left-right flips "
                "for fashion-mnist (--no-augment: off)"})
    seed: int = field(default=0, metadata={"help": "random seed"})
    device: str = field(default="auto", metadata={"help": "auto (cuda, then mps, then cpu), cpu, cuda, mps"})
    threads: int = field(default=0, metadata={"help": "CPU threads for torch (0 = torch's default)"})
    eval_batch_size: int = field(default=1000, metadata={"help": "images per batch when testing"})
    resume: bool = field(default=False, metadata={
        "help": "continue the interrupted or finished run in --out exactly where it stopped"})
    max_steps: int = field(default=0, metadata={
        "help": "stop (resumably) after this many optimiser steps in this invocation; for tests"})


def _add_dataclass_args(parser: argparse.ArgumentParser, cls, title: str) -> None:
    """One flag per dataclass field: --field-name, typed from the default, help from metadata."""
    group = parser.add_argument_group(title)
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        help_ = f.metadata.get("help", f.name.replace("_", " ")) + f" (default: {f.default})"
        if isinstance(f.default, bool):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default,
                               help=help_)
        else:
            group.add_argument(flag, type=type(f.default), default=f.default, help=help_,
                               choices=f.metadata.get("choices"), metavar=f.name.upper()
                               if "choices" not in f.metadata else None)


MODEL_HELP = {"image_size": "input image side in pixels", "channels": "image channels",
              "patch_size": "patch side in pixels (image_size must divide by it)",
              "stem_channels": "channels of a 3x3 conv stem before patching (0 = plain ViT)",
              "dim": "token width", "depth": "transformer blocks", "heads": "attention heads",
              "mlp_dim": "hidden width of each block's MLP", "dropout": "dropout rate",
              "num_classes": "output classes"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vit.train", description=__doc__.split("\n\n")[0])
    _add_dataclass_args(p, TrainConfig, "training")
    group = p.add_argument_group("model")
    for f in fields(ViTConfig):
        group.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                           metavar=f.name.upper(),
                           help=f"{MODEL_HELP.get(f.name, f.name)} (default: {f.default})")
    return p


def parse_args(argv=None) -> tuple[TrainConfig, ViTConfig]:
    parser = build_parser()
    ns = vars(parser.parse_args(argv))
    tc = TrainConfig(**{f.name: ns[f.name] for f in fields(TrainConfig)})
    try:
        mc = ViTConfig(**{f.name: ns[f.name] for f in fields(ViTConfig)})
    except ValueError as e:
        parser.error(str(e))
    checks = [(tc.epochs >= 1, "--epochs must be at least 1"),
              (tc.batch_size >= 1, "--batch-size must be at least 1"),
              (tc.eval_batch_size >= 1, "--eval-batch-size must be at least 1"),
              (tc.lr > 0 and math.isfinite(tc.lr), "--lr must be a positive number"),
              (0 <= tc.min_lr <= tc.lr, "--min-lr must be between 0 and --lr"),
              (tc.weight_decay >= 0, "--weight-decay must be >= 0"),
              (tc.warmup_epochs >= 0, "--warmup-epochs must be >= 0"),
              (0 <= tc.label_smoothing < 1, "--label-smoothing must be in [0, 1)"),
              (tc.grad_clip >= 0, "--grad-clip must be >= 0"),
              (tc.threads >= 0, "--threads must be >= 0"),
              (tc.max_steps >= 0, "--max-steps must be >= 0"),
              (mc.image_size == 28 and mc.channels == 1,
               "MNIST and Fashion-MNIST are 28x28 grey images: keep --image-size 28 --channels 1"),
              (mc.num_classes == len(DATASETS[tc.dataset][1]),
               f"{tc.dataset} has {len(DATASETS[tc.dataset][1])} classes, not {mc.num_classes}")]
    for ok, message in checks:
        if not ok:
            parser.error(message)
    try:
        resolve_device(tc.device)
    except ValueError as e:
        parser.error(str(e))
    if not tc.out:
        tc.out = f"checkpoints/{tc.dataset}"
    return tc, mc


def lr_at(step: int, total: int, warmup: int, tc: TrainConfig) -> float:
    """Linear warm-up to tc.lr, then cosine down to tc.min_lr: a pure function of the step."""
    if step < warmup:
        return tc.lr * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return tc.min_lr + 0.5 * (tc.lr - tc.min_lr) * (1 + math.cos(math.pi * t))


def param_groups(model: ViT, weight_decay: float) -> list[dict]:
    """Weight decay on matrices (linear and conv weights) only: not on biases, norms, the position
    embeddings or the [CLS] token, which decay would pull towards zero for no benefit."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_matrix = p.ndim >= 2 and name not in ("pos_embed", "cls_token")
        (decay if is_matrix else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def _rng(seed: int, epoch: int, step: int = -1) -> torch.Generator:
    return torch.Generator().manual_seed(hash((seed, epoch, step)) & 0x7FFF_FFFF_FFFF)


def git_commit() -> str:
    """HEAD's hash, with '-dirty' when tracked files differ from it ('unknown' outside git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "vit"],
                               cwd=root, capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@torch.no_grad()
def evaluate(model: ViT, images: torch.Tensor, labels: torch.Tensor, mean: float, std: float,
             batch_size: int, device: torch.device) -> tuple[float, float, torch.Tensor]:
    """(mean loss, accuracy, predictions) of `model` on uint8 images (N, 28, 28)."""
    was_training = model.training
    model.eval()
    total_loss, preds = 0.0, []
    for i in range(0, len(labels), batch_size):
        x = normalize(images[i:i + batch_size], mean, std).to(device)
        y = labels[i:i + batch_size].to(device)
        logits = model(x).float()
        total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        preds.append(logits.argmax(1).cpu())
    model.train(was_training)
    preds = torch.cat(preds)
    return total_loss / len(labels), (preds == labels).float().mean().item(), preds


def plot_curves(rows: list[dict], path: Path) -> None:
    """Loss and accuracy per epoch, as a PNG (matplotlib's object API: no pyplot state)."""
    from matplotlib.figure import Figure
    ep = [int(r["epoch"]) for r in rows]
    fig = Figure(figsize=(9, 3.5), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(ep, [float(r["train_loss"]) for r in rows], "o-", label="train")
    ax1.plot(ep, [float(r["test_loss"]) for r in rows], "o-", label="test")
    ax1.set(xlabel="epoch", ylabel="loss", title="Loss")
    ax2.plot(ep, [100 * float(r["train_acc"]) for r in rows], "o-", label="train (augmented)")
    ax2.plot(ep, [100 * float(r["test_acc"]) for r in rows], "o-", label="test")
    ax2.set(xlabel="epoch", ylabel="accuracy (%)", title="Accuracy")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))


METRIC_FIELDS = ["epoch", "step", "lr", "train_loss", "train_acc", "test_loss", "test_acc",
                 "epoch_seconds", "images_per_second"]


class _StopFlag:
    """First Ctrl-C asks the loop to stop after the current step (it then saves a resumable
    state); a second one interrupts at once."""

    def __init__(self):
        self.stop = False
        self._old = None

    def __enter__(self):
        def handler(signum, frame):
            if self.stop:
                raise KeyboardInterrupt
            self.stop = True
            print("\nInterrupted: saving a resumable state after this step "
                  "(Ctrl-C again to abort without saving)...", file=sys.stderr, flush=True)
        try:
            self._old = signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread: leave Ctrl-C alone
            self._old = None
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


class TrainingError(RuntimeError):
    pass


def _save_state(state_dir: Path, model, opt, state: dict) -> None:
    """Everything --resume needs, pickle-free: model + optimiser tensors, the rest JSON.
    The JSON goes last and names the step, so a half-finished save is never picked up."""
    opt_sd = opt.state_dict()
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    for idx, st in opt_sd["state"].items():
        for k, v in st.items():
            tensors[f"opt.{idx}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    save_tensors(state_dir / "state.safetensors", tensors)
    groups = [{k: v for k, v in g.items() if k != "params"} | {"params": g["params"]}
              for g in opt_sd["param_groups"]]
    save_json(state_dir / "state.json", {**state, "param_groups": groups})


def _read_state_meta(state_dir: Path) -> dict:
    meta_path = state_dir / "state.json"
    if not meta_path.is_file():
        raise TrainingError(f"nothing to resume: {meta_path} not found")
    try:
        return json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise TrainingError(f"can't resume: {meta_path} is damaged ({e})") from None


def _load_state(state_dir: Path, model, opt) -> dict:
    meta = _read_state_meta(state_dir)
    tensors = load_tensors(state_dir / "state.safetensors")
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    opt_state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, idx, name = k.split(".", 2)
            opt_state.setdefault(int(idx), {})[name] = v
    opt.load_state_dict({"state": opt_state, "param_groups": meta["param_groups"]})
    return meta


def train(tc: TrainConfig, mc: ViTConfig, argv: list[str] | None = None) -> dict:
    """Run (or resume) training; returns the final metrics row. Raises TrainingError/DataError.
    Under torchrun, every process calls this; they train one model together (vit/distributed.py)."""
    d = distributed.from_environment()
    device = distributed.setup(d, resolve_device(tc.device))
    try:
        return _train(tc, mc, argv, d, device)
    finally:
        distributed.teardown(d)


def _train(tc: TrainConfig, mc: ViTConfig, argv, d: distributed.Dist, device: torch.device) -> dict:
    t_start = time.time()
    say = print if d.main else (lambda *a, **k: None)   # one voice, one writer: rank 0
    if tc.threads:
        torch.set_num_threads(tc.threads)
    out = Path(tc.out)
    state_dir = out / "train_state"
    class_names, (mean, std) = DATASETS[tc.dataset][1], DATASETS[tc.dataset][2]

    # --- data: both splits once, as tensors -------------------------------------------------
    train_split = load_split(tc.dataset, tc.data_dir, True, tc.download)
    test_split = load_split(tc.dataset, tc.data_dir, False, tc.download)
    augment = AUGMENT[tc.dataset] if tc.augment else None

    # --- model and optimiser --------------------------------------------------------------
    torch.manual_seed(tc.seed)
    model = ViT(mc).to(device)
    net = model                                        # what the training step calls
    if d.enabled:   # averages gradients across processes during backward()
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(param_groups(model, tc.weight_decay), lr=tc.lr, betas=(0.9, 0.999))
    steps_per_epoch = math.ceil(len(train_split) / tc.batch_size)
    total_steps = tc.epochs * steps_per_epoch
    warmup = int(tc.warmup_epochs * steps_per_epoch)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else torch.autocast("cpu", enabled=False))  # bf16 on CPU is ~5x slower

    run = {"step": 0, "wall_seconds": 0.0, "best_acc": -1.0, "command": None, "commits": []}
    if tc.resume:
        saved = _read_state_meta(state_dir)["config"]
        for key in ("dataset", "epochs", "batch_size", "seed"):
            if saved["train"][key] != getattr(tc, key):
                raise TrainingError(f"--resume: the run in {out} used --{key.replace('_', '-')} "
                                    f"{saved['train'][key]}, not {getattr(tc, key)}")
        if saved["model"] != mc.to_dict():
            diff = [k for k in saved["model"] if saved["model"][k] != mc.to_dict().get(k)]
            raise TrainingError(f"--resume: the run in {out} has a different model ("
                                + ", ".join(f"--{k.replace('_', '-')} {saved['model'][k]}" for k in diff)
                                + ")")
        run = _load_state(state_dir, model, opt)
        run.setdefault("commits", [])
        say(f"Resuming {out} at step {run['step']} of {total_steps}", flush=True)
    else:
        if (state_dir / "state.json").exists():
            raise TrainingError(f"{out} already holds a run: pass --resume to continue it, "
                                f"or choose another --out")
        distributed.barrier(d)              # every rank has checked before rank 0 writes
        if d.main:
            out.mkdir(parents=True, exist_ok=True)
            (out / "metrics.csv").unlink(missing_ok=True)
        run["command"] = (distributed.launch_command(d) + " "
                          + shlex.join(sys.argv[1:] if argv is None else argv))
    run["config"] = {"train": vars(tc) | {"out": str(out)}, "model": mc.to_dict()}
    # The code this process runs is the code at start-up: record that commit, not HEAD at save time.
    commit = git_commit()
    if commit not in run["commits"]:
        run["commits"].append(commit)

    def meta(test_acc: float, epoch: int) -> dict:
        return {"dataset": tc.dataset, "class_names": class_names,
                "normalization": {"mean": mean, "std": std}, "test_accuracy": test_acc,
                "training": {k: v for k, v in vars(tc).items()
                             if k not in ("resume", "max_steps", "out", "data_dir", "download",
                                          "device", "threads")},
                "provenance": {"command": run["command"], "commit": run["commits"][0],
                               **({"resumed_with_commits": run["commits"][1:]}
                                  if len(run["commits"]) > 1 else {}),
                               "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               "epochs": epoch, "seed": tc.seed,
                               "wall_time_seconds": round(run["wall_seconds"], 1),
                               "device": describe_device(device)
                               + (f" × {d.world} processes" if d.enabled else ""),
                               "torch": torch.__version__}}

    from tqdm import tqdm
    step = run["step"]
    last_row = None
    with _StopFlag() as flag:
        model.train()
        steps_this_call = 0
        while step < total_steps:
            epoch, first = divmod(step, steps_per_epoch)
            perm = torch.randperm(len(train_split), generator=_rng(tc.seed, epoch))
            bar = tqdm(range(first, steps_per_epoch), desc=f"epoch {epoch + 1}/{tc.epochs}",
                       initial=first, total=steps_per_epoch, leave=True, dynamic_ncols=True,
                       disable=None if d.main else True, file=sys.stderr)
            t_epoch, seen, correct, loss_sum = time.time(), 0, 0, 0.0
            for s in bar:
                batch = perm[s * tc.batch_size:(s + 1) * tc.batch_size]        # the global batch
                mine = distributed.shard(d, len(batch))                        # this rank's rows
                idx = batch[mine]
                gen = _rng(tc.seed, epoch, s)
                torch.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))  # dropout
                x = train_split.images[idx].float().div_(255).unsqueeze(1)     # (B, 1, 28, 28)
                if augment is not None:   # drawn for the global batch: the same on every rank
                    x = augment.apply(x, augment.draw(len(batch), gen)[mine])
                x = ((x - mean) / std).to(device, non_blocking=True)
                y = train_split.labels[idx].to(device, non_blocking=True)
                for g in opt.param_groups:
                    g["lr"] = lr_at(step, total_steps, warmup, tc)
                with autocast:
                    logits = net(x)
                    if d.enabled:   # this rank's share of the global mean: DDP's average is it
                        loss = F.cross_entropy(logits.float(), y, label_smoothing=tc.label_smoothing,
                                               reduction="sum") * (d.world / len(batch))
                    else:
                        loss = F.cross_entropy(logits.float(), y, label_smoothing=tc.label_smoothing)
                bad, stop = distributed.any_rank(d, [not torch.isfinite(loss), flag.stop], device)
                if bad:
                    raise TrainingError(
                        f"loss became non-finite at epoch {epoch + 1}, step {s + 1}: training "
                        f"diverged; try a lower --lr (now {tc.lr}) or a --grad-clip (now {tc.grad_clip})")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if tc.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
                opt.step()
                step += 1
                steps_this_call += 1
                seen += len(y)
                loss_sum += loss.item() * (len(batch) / d.world if d.enabled else len(y))
                correct += (logits.argmax(1) == y).sum().item()
                bar.set_postfix(loss=f"{loss_sum / seen:.4f}", acc=f"{100 * correct / seen:.2f}%",
                                img_s=f"{seen / (time.time() - t_epoch):.0f}")
                if stop or (tc.max_steps and steps_this_call >= tc.max_steps):
                    break
            bar.close()
            run["wall_seconds"] += time.time() - t_start
            t_start = time.time()
            epoch_done = step % steps_per_epoch == 0
            if epoch_done:
                test_loss, test_acc = _test(model, test_split, mean, std, tc, d, device)
                seen, correct, loss_sum = distributed.sum_all(d, [seen, correct, loss_sum], device)
                secs = time.time() - t_epoch
                row = {"epoch": epoch + 1, "step": step, "lr": f"{opt.param_groups[0]['lr']:.3g}",
                       "train_loss": f"{loss_sum / max(seen, 1):.5f}",
                       "train_acc": f"{correct / max(seen, 1):.5f}",
                       "test_loss": f"{test_loss:.5f}", "test_acc": f"{test_acc:.5f}",
                       "epoch_seconds": f"{secs:.1f}", "images_per_second": f"{seen / secs:.0f}"}
                say(f"epoch {epoch + 1}: test accuracy {100 * test_acc:.2f}% "
                    f"(loss {test_loss:.4f})", flush=True)
                last_row = row
                run["wall_seconds"] += time.time() - t_start
                t_start = time.time()
                _check_in_sync(d, model, device)
                if d.main:
                    _append_metrics(out / "metrics.csv", row)
                    # The folder itself always holds the latest epoch (what the app loads: its
                    # accuracy is an honest, unselected test figure); best/ the best by test acc.
                    save_checkpoint(out, model, meta(test_acc, epoch + 1))
                    if test_acc > run["best_acc"]:
                        save_checkpoint(out / "best", model, meta(test_acc, epoch + 1))
                    plot_curves(_read_metrics(out / "metrics.csv"), out / "curves.png")
                run["best_acc"] = max(run["best_acc"], test_acc)
            run["step"] = step
            if d.main:
                _save_state(state_dir, model, opt, run)
            distributed.barrier(d)                    # nobody runs ahead of a half-written state
            if stop or (tc.max_steps and steps_this_call >= tc.max_steps and step < total_steps):
                say(f"Stopped at step {step} of {total_steps} (epoch {epoch + 1}); continue with:\n"
                      f"  {run['command']} --resume", file=sys.stderr, flush=True)
                return {"stopped": True, "step": step}
    if d.enabled:
        digest = _check_in_sync(d, model, device)
        say(f"Weights identical on all {d.world} processes (sha256 {digest[:16]})", flush=True)
    say(f"Done in {run['wall_seconds'] / 60:.1f} min: {out}", flush=True)
    return last_row or {"step": step}


def _test(model: ViT, test_split, mean: float, std: float, tc: TrainConfig,
          d: distributed.Dist, device: torch.device) -> tuple[float, float]:
    """(loss, accuracy) on the whole test set; under torchrun each rank tests a share of it."""
    mine = distributed.shard(d, len(test_split))
    labels = test_split.labels[mine]
    loss, acc, preds = evaluate(model, test_split.images[mine], labels, mean, std,
                                tc.eval_batch_size, device)
    if not d.enabled:
        return loss, acc
    loss_sum, correct, n = distributed.sum_all(
        d, [loss * len(labels), (preds == labels).sum().item(), len(labels)], device)
    return loss_sum / n, correct / n


def _check_in_sync(d: distributed.Dist, model: ViT, device: torch.device) -> str:
    """Data-parallel ranks must hold bit-identical weights; saving one of two diverged copies
    would hide a bug, so stop instead. Returns the weights' digest."""
    if not d.enabled:
        return ""
    same, digest = distributed.digests_agree(d, model, device)
    if not same:
        raise TrainingError("the processes' weights differ: data-parallel training went out of sync")
    return digest


def _append_metrics(path: Path, row: dict) -> None:
    new = not path.exists()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)


def _read_metrics(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads)"
    return device.type


def main(argv=None) -> int:
    tc, mc = parse_args(argv)
    try:
        result = train(tc, mc, argv)
    except (TrainingError, DataError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 130 if result.get("stopped") and not tc.max_steps else 0


if __name__ == "__main__":
    sys.exit(main())
