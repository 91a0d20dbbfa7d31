"""A run's working set: model, DDP wrapper, AdamW, learning-rate plan and data
(`new_session`).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from dataclasses import dataclass

import torch

from vit.data.loading import Split
from vit.data.specs import DatasetSpec, builtin_spec
from vit.model import ViT, ViTConfig
from vit.training import distributed
from vit.training.config import TrainConfig, TrainingError


# --- schedule and optimiser -------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """The schedule's arithmetic, fixed by the training set's size and the flags."""
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int


def make_plan(tc: TrainConfig, n_train: int) -> Plan:
    per_epoch = math.ceil(n_train / tc.batch_size)
    return Plan(per_epoch, tc.epochs * per_epoch, int(tc.warmup_epochs * per_epoch))


def lr_at(step: int, plan: Plan, tc: TrainConfig) -> float:
    """Linear warm-up to tc.lr, then cosine down to tc.min_lr: a pure function of the step."""
    if step < plan.warmup_steps:
        return tc.lr * (step + 1) / plan.warmup_steps
    t = (step - plan.warmup_steps) / max(1, plan.total_steps - plan.warmup_steps)
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


# --- one invocation: model, optimiser, batches, steps -----------------------------------------
@dataclass
class Session:
    """What the steps of one invocation share."""
    tc: TrainConfig
    spec: DatasetSpec
    d: distributed.Dist
    device: torch.device
    model: ViT
    net: torch.nn.Module              # what a step calls: the model, or its DDP wrapper
    opt: torch.optim.Optimizer
    plan: Plan
    train_split: Split
    data: TrainData | None = None
    ema_model: ViT | None = None      # the weights' moving average (--ema), else None
    teacher: torch.nn.Module | None = None   # the CNN distilled from (--distill), else None

    @property
    def augment(self):
        if not self.tc.augment or self.spec.augment is None:
            return None
        if self.tc.stretch:
            return dataclasses.replace(self.spec.augment, stretch=self.tc.stretch)
        return self.spec.augment

    @property
    def eval_model(self) -> ViT:
        """What is tested, calibrated and saved: the moving average if there is one."""
        return self.ema_model if self.ema_model is not None else self.model


def new_session(tc: TrainConfig, mc: ViTConfig, train_split: Split,
                d: distributed.Dist = distributed.Dist(),
                device: torch.device = torch.device("cpu"), data: TrainData | None = None,
                fresh: bool = True, spec: DatasetSpec | None = None) -> Session:
    """`fresh`: a new run (--init's weights are read); a resumed one gets its state instead.
    `spec`: the data set's (an image folder's); a built-in data set's by default."""
    torch.manual_seed(tc.seed)                         # the initial weights
    model = ViT(mc)
    if tc.init and fresh:                # the weights from a checkpoint (its head: same classes)
        from vit.training.finetune import InitError, load_pretrained
        try:
            load_pretrained(model, tc.init, spec.class_names if spec is not None else None)
        except InitError as e:
            raise TrainingError(str(e)) from None
    model = model.to(device)
    net = model
    if d.enabled:   # averages gradients across processes during backward()
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    if tc.compile != "none":
        # Only the forward pass (and so its backward) is compiled: the optimiser, EMA and the
        # evaluation copy stay eager. Same arithmetic, up to float rounding of fused kernels.
        net = torch.compile(net, mode=tc.compile)
    # The fused AdamW kernel (one pass over all parameters) where torch has one: on a 2-core CPU
    # it takes a third of the for-loop implementation's time, and gives the same weights up to
    # float rounding.
    opt = torch.optim.AdamW(param_groups(model, tc.weight_decay), lr=tc.lr, betas=(0.9, 0.999),
                            fused=device.type in ("cpu", "cuda"))
    ema = copy.deepcopy(model).requires_grad_(False).eval() if tc.ema else None
    return Session(tc, spec or builtin_spec(tc.dataset), d, device, model, net, opt,
                   make_plan(tc, len(train_split)), train_split, data, ema)


# --- what a run trains on besides the digits themselves -----------------------------------------
@dataclass
class TrainData:
    """The training split's companions, all uint8 like the split (on the training device):
    `served` — each training image as the app's preprocessing lays it out; `val`/`val_served` —
    the held-out validation images (raw and laid out); `negatives`/`held_out` — synthetic
    non-digit drawings to train on / to measure with (None when off)."""
    served: torch.Tensor | None
    val: Split | None
    val_served: torch.Tensor | None
    negatives: torch.Tensor | None
    held_out: torch.Tensor | None


def _autocast(device: torch.device):
    # bf16 on CUDA; float32 on the CPU, where bf16 is ~5x slower.
    return (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
            else contextlib.nullcontext())


def check_in_sync(s: Session) -> str:
    """Data-parallel ranks must hold bit-identical weights; saving one of two diverged copies
    would hide a bug, so stop instead. Returns the weights' digest ('' for one process)."""
    if not s.d.enabled:
        return ""
    same, digest = distributed.digests_agree(s.d, s.model, s.device)
    if same and s.ema_model is not None:      # the digest printed is the saved model's
        same, digest = distributed.digests_agree(s.d, s.ema_model, s.device)
    if not same:
        raise TrainingError("the processes' weights differ: data-parallel training went out of sync")
    return digest


def _to(t: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if t is None else t.to(device)
