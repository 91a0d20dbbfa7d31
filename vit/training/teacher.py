"""A small CNN teacher for soft distillation (DeiT, Touvron et al. 2021, sec. 5.2).

A ViT has to learn from data what a CNN is built with: that nearby pixels belong together. On a
small data set trained for few epochs it learns that slowly; a CNN trained first in a few epochs
passes it on through its soft answers, which the ViT then matches beside the labels. The teacher is
trained by the trainer at the start of a run (`--distill`), with the run's own batches and
augmentation, and kept in the run's state folder so that --resume does not train it again.
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from vit.scoring import evaluate
from vit.storage import StorageError, load_tensors, save_tensors
from vit.training import distributed
from vit.training.batches import make_batch
from vit.training.config import RUNTIME_FIELDS, TrainingError
from vit.training.prepared import cached, code_digest
from vit.training.seeds import STREAM_TEACHER, _generator, mix_seed
from vit.training.session import Session, _autocast, lr_at
from vit.training.state import TEACHER_FILE


class Teacher(nn.Sequential):
    """Two conv blocks (two 3x3 convs + BN + GELU, then 2x2 pooling) and a two-layer head:
    ~0.3 M parameters at width 32 (~99.5 % on MNIST after 4 epochs), ~0.9 M at width 64."""

    def __init__(self, channels: int, num_classes: int, width: int = 32):
        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(),
                    nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(),
                    nn.MaxPool2d(2)]
        super().__init__(*block(channels, width), *block(width, 2 * width),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Dropout(0.2),
                         nn.Linear(2 * width * 16, 256), nn.GELU(), nn.Linear(256, num_classes))


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, tau: float = 2.0) -> torch.Tensor:
    """Summed KL(teacher || student) of the softened answers, times tau² (Hinton et al. 2015), so
    that its gradient keeps the scale of a cross-entropy whatever tau is."""
    return F.kl_div(F.log_softmax(student / tau, 1), F.log_softmax(teacher / tau, 1),
                    reduction="sum", log_target=True) * tau * tau


def get_teacher(s: Session, out: Path, say: Callable, resuming: bool, digest: str = "",
                cache: Path | None = None) -> torch.nn.Module:
    """The CNN to distil from: when resuming, the one this run trained before (in its state
    folder); else a new one trained now on the run's own batches (DeiT's recipe: teacher first,
    then the student) — a teacher file left by a run that never saved a state may come from
    other settings or another data set, so a fresh run never reads it.
    Under torchrun every process trains it on the whole global batch, alone: its batch norms
    then see what one process would see, and every process holds the same teacher (a DDP-trained
    one kept per-process batch statistics, so the processes distilled from different teachers).
    A fresh run takes the teacher from the prepared-data `cache` (vit/training/prepared.py) when
    one was trained there for the same data (`digest`), settings, device kind and code."""
    torch.manual_seed(mix_seed(s.tc.seed, STREAM_TEACHER))
    teacher = Teacher(s.spec.channels, s.spec.num_classes, s.tc.teacher_width).to(s.device)
    path = out / TEACHER_FILE
    if resuming and path.is_file():
        try:
            teacher.load_state_dict(load_tensors(path))
        except (StorageError, RuntimeError) as e:
            raise TrainingError(f"can't resume: {path} is damaged ({' '.join(str(e).split())[:200]})"
                                ) from None
        return teacher.eval().requires_grad_(False)
    t0 = time.time()
    weights, reused = cached(cache, "teacher", teacher_key(s, digest),
                             lambda: _trained(s, teacher).state_dict())
    teacher.load_state_dict(weights)
    teacher.eval().requires_grad_(False)
    v = s.data.val if s.data is not None and s.data.val is not None else None
    how = "taken from the cache" if reused else f"{s.tc.teacher_epochs} epochs"
    if v is not None:
        _, acc, _ = evaluate(teacher, v.images, v.labels, s.spec.mean, s.spec.std,
                             s.tc.eval_batch_size)
        how += f", validation accuracy {100 * acc:.2f}%"
    say(f"Teacher CNN: {how} ({time.time() - t0:.0f} s)", flush=True)
    if s.d.main:
        save_tensors(path, teacher.state_dict())
    return teacher


# Settings that only the ViT's own training reads: a teacher trained under other values of these
# is the same teacher. Everything else (and the data, device kind and code) is in its key.
STUDENT_ONLY = frozenset({"epochs", "lr", "min_lr", "weight_decay", "warmup_epochs",
                          "label_smoothing", "grad_clip", "oe_weight", "distill", "init", "ema"})


def teacher_key(s: Session, digest: str) -> dict:
    from vit.data import affine, trivial_augment
    from vit.training import batches, session
    settings = {k: v for k, v in asdict(s.tc).items()
                if k not in RUNTIME_FIELDS | STUDENT_ONLY}
    return {"data": digest, "spec": repr(s.spec), "settings": settings,
            "device": s.device.type, "code": code_digest(Teacher, batches, session, affine,
                                                         trivial_augment, get_teacher)}


def _trained(s: Session, teacher: Teacher) -> Teacher:
    """The teacher trained on the run's own batches, `--teacher-epochs` epochs."""
    from tqdm import tqdm
    alone = replace(s, d=distributed.Dist())      # batches: the whole global batch
    opt = torch.optim.AdamW(teacher.parameters(), lr=2e-3, weight_decay=5e-4)
    plan = replace(s.plan, total_steps=s.tc.teacher_epochs * s.plan.steps_per_epoch,
                   warmup_steps=s.plan.steps_per_epoch // 2)
    bar = tqdm(range(plan.total_steps), desc="teacher CNN", leave=False, dynamic_ncols=True,
               disable=None if s.d.main else True, file=sys.stderr)
    for step in bar:
        epoch, i = divmod(step, plan.steps_per_epoch)
        if i == 0:
            order = torch.randperm(len(s.train_split),
                                   generator=_generator(s.tc.seed, STREAM_TEACHER, epoch))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, plan, replace(s.tc, lr=2e-3, min_lr=1e-5))
        batch = make_batch(alone, order, step)
        with _autocast(s.device):
            logits = teacher(batch.x[:len(batch.y)])
            loss = F.cross_entropy(logits.float(), batch.y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return teacher
