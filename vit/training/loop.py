"""Training as a library: `python -m vit.train` is its command line, bench/train_throughput.py
times its step.

A run, in the order it uses these pieces: `config_problems` (config.py: the flags make sense);
`preflight` (state.py); `new_session` (session.py: model, DDP wrapper, AdamW); `start_or_resume`;
per step `make_batch` (batches.py) and `train_step`; per epoch `end_epoch` (test, metrics,
checkpoints, curves: records.py); `save_state` (state.py).
"""
from __future__ import annotations

import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from vit.checkpoint import save_checkpoint
from vit.data.loading import DataError, Split, load_split
from vit.data.specs import FOLDER, DatasetSpec, builtin_spec
from vit.device import pick_device
from vit.explain import calibration as cal
from vit.model import ViT, ViTConfig
from vit.scoring import evaluate, predict_logits, score
from vit.storage import out_problem, remove_stale_temporaries
from vit.training import distributed, snapshots
from vit.training.batches import Batch, epoch_order, make_batch, prepare_data
from vit.training.config import (
    TrainConfig,
    TrainingError,
    config_problems,
    folder_size_problem,
    is_out_of_memory,
    local_processes,
    memory_problem,
)
from vit.training.prepared import cache_root
from vit.training.records import (
    checkpoint_meta,
    describe_device,
    git_commit,
    plot_curves,
    source_tree,
    write_metrics,
)
from vit.training.seeds import STREAM_DROPOUT, mix_seed
from vit.training.session import Session, _autocast, _to, check_in_sync, lr_at, new_session
from vit.training.state import (
    SET_ASIDE,
    STATE_FILE,
    EpochTotals,
    RunState,
    SavedState,
    check_writable,
    data_digest,
    exclusive,
    preflight,
    restore,
    save_state,
    set_aside_run_files,
)
from vit.training.teacher import distillation_loss, get_teacher


@dataclass
class StepResult:
    loss_sum: float       # summed loss over this rank's images
    correct: int          # of them, classified right
    stop: bool            # some rank was asked to stop after this step


def train_step(s: Session, batch: Batch, step: int, stop_requested: bool = False) -> StepResult:
    """One AdamW step at global step `step`. Raises TrainingError on every rank, before updating
    anything, when the loss is not finite on any of them."""
    tc = s.tc
    for g in s.opt.param_groups:
        g["lr"] = lr_at(step, s.plan, tc)
    # Dropout draws from torch's global generator: a stream per rank, since each rank drops units
    # of its own images (batch order and augmentation are the same on every rank).
    torch.manual_seed(mix_seed(tc.seed, STREAM_DROPOUT, step, s.d.rank))
    with _autocast(s.device):
        logits = s.net(batch.x)
        # This rank's share of the global batch's mean loss: DDP averages gradients over ranks,
        # so the optimiser sees the single-process gradient whatever the number of processes.
        digits = logits[:len(batch.y)].float()
        loss = F.cross_entropy(digits, batch.y, label_smoothing=tc.label_smoothing,
                               reduction="sum") * (s.d.world / batch.size)
        digit_loss = loss.detach()
        if s.teacher is not None:
            with torch.no_grad():
                taught = s.teacher(batch.x[:len(batch.y)]).float()
            kd = distillation_loss(digits, taught) * (s.d.world / batch.size)
            loss = (1 - tc.distill) * loss + tc.distill * kd
        if batch.negatives:
            # Outlier exposure: cross-entropy against the uniform answer on the non-digits.
            flat = -logits[len(batch.y):].float().log_softmax(1).mean(1).sum()
            loss = loss + tc.oe_weight * flat * (s.d.world / batch.negatives)
    bad, stop = distributed.any_rank(s.d, [not bool(torch.isfinite(loss)), stop_requested],
                                     s.device)
    if bad:
        epoch, i = divmod(step, s.plan.steps_per_epoch)
        raise TrainingError(
            f"loss became non-finite at epoch {epoch + 1}, step {i + 1}: training diverged; "
            f"try a lower --lr (now {tc.lr}) or a --grad-clip (now {tc.grad_clip})")
    s.opt.zero_grad(set_to_none=True)
    loss.backward()
    if tc.grad_clip:
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), tc.grad_clip)
    s.opt.step()
    if s.ema_model is not None:
        update_ema(s.ema_model, s.model, tc.ema, step)
    correct = (digits.argmax(1) == batch.y).sum().item()
    return StepResult(digit_loss.item() * batch.size / s.d.world, correct, stop)


@torch.no_grad()
def update_ema(ema: ViT, model: ViT, decay: float, step: int) -> None:
    """ema <- d * ema + (1 - d) * model, with d ramping up from 0.1 over the first steps so that
    the average does not drag the random initial weights along (as timm's ModelEmaV3 warms up)."""
    d = min(decay, (1 + step) / (10 + step))
    torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - d)


# --- an epoch ---------------------------------------------------------------------------------
def train_epoch(s: Session, run: RunState, stop_at: int | None,
                should_stop: Callable[[], bool]) -> tuple[str | None, EpochTotals]:
    """Steps from run.step to the end of its epoch, with a progress bar. Returns (None, totals)
    when the epoch is done, or ("interrupted" | "max_steps", totals) when it stopped early.
    Totals are over all ranks."""
    from tqdm import tqdm
    per_epoch = s.plan.steps_per_epoch
    epoch, first = divmod(run.step, per_epoch)
    order = epoch_order(s.tc, len(s.train_split), epoch)
    saved = run.partial if first else EpochTotals()
    # The saved sums are over all ranks: rank 0 carries them on, the others start from zero.
    t = replace(saved) if s.d.main else EpochTotals(seconds=saved.seconds)
    bar = tqdm(range(first, per_epoch), desc=f"epoch {epoch + 1}/{s.tc.epochs}", initial=first,
               total=per_epoch, leave=True, dynamic_ncols=True,
               disable=None if s.d.main else True, file=sys.stderr)
    t0, seconds0, reason = time.time(), t.seconds, None
    keep = snapshots.steps(s.tc.snapshots, s.plan.total_steps) if s.d.main else set()
    for _ in bar:
        batch = make_batch(s, order, run.step)
        r = train_step(s, batch, run.step, should_stop())
        run.step += 1
        if run.step in keep:       # (its seconds count as training: ~10 ms for these models)
            snapshots.save(Path(s.tc.out), s.eval_model, run.step, s.plan.total_steps)
        t.seen += len(batch.y)
        t.correct += r.correct
        t.loss_sum += r.loss_sum
        t.seconds = seconds0 + time.time() - t0
        bar.set_postfix(loss=f"{t.loss_sum / t.seen:.4f}", acc=f"{100 * t.correct / t.seen:.2f}%",
                        img_s=f"{t.seen / max(t.seconds, 1e-9):.0f}")
        if r.stop:
            reason = "interrupted"
        elif stop_at is not None and run.step >= stop_at:
            reason = "max_steps"
        if reason:
            break
    bar.close()
    seen, correct, loss_sum = distributed.sum_all(s.d, [t.seen, t.correct, t.loss_sum], s.device)
    return reason, EpochTotals(int(seen), int(correct), loss_sum, t.seconds)


def test_pass(s: Session, split: Split) -> tuple[float, float]:
    """(loss, accuracy) on the whole test set; under torchrun each rank tests a share of it."""
    mine = distributed.shard(s.d, len(split))
    labels = split.labels[mine]
    loss, acc, _ = evaluate(s.eval_model, split.images[mine], labels, s.spec.mean, s.spec.std,
                            s.tc.eval_batch_size)
    if not s.d.enabled:
        return loss, acc
    n = len(labels)
    loss_sum, correct, total = distributed.sum_all(s.d, [loss * n, round(acc * n), n], s.device)
    return loss_sum / total, correct / total


@dataclass
class Validation:
    loss: float
    accuracy: float
    calibration: dict     # config.json's "calibration" object


def validate(s: Session) -> Validation | None:
    """Score the held-out validation images, as stored and as the app lays them out, and fit the
    confidence temperature on both and the "not one of these" threshold on the laid-out ones
    (what the app will see). Every rank computes the same (the images are few)."""
    data = s.data
    if data is None or data.val is None:
        return None
    val, m = data.val, s.eval_model
    logits = predict_logits(m, val.images, s.spec.mean, s.spec.std, s.tc.eval_batch_size)
    labels = val.labels
    loss, acc, _ = score(logits, labels)
    served = (predict_logits(m, data.val_served, s.spec.mean, s.spec.std, s.tc.eval_batch_size)
              if data.val_served is not None else logits[:0])
    both, both_labels = torch.cat([logits, served]), torch.cat([labels, labels[:len(served)]])
    t = cal.fit_temperature(both, both_labels)
    probs = cal.calibrated(both, t)
    in_app = cal.calibrated(served if len(served) else logits, t)
    reject = cal.fit_reject_threshold(in_app)
    record = {"temperature": round(t, 4), "reject_below": round(reject, 4),
              "fitted_on": f"validation split: {len(val):,} training images held out of training"
                           + (", each as stored and as the app lays it out" if len(served) else ""),
              "validation_ece_before": round(cal.ece(torch.softmax(both, 1), both_labels), 5),
              "validation_ece_after": round(cal.ece(probs, both_labels), 5),
              "validation_refused": round((in_app.max(1).values < reject).float().mean().item(), 5)}
    if data.held_out is not None:
        neg = cal.calibrated(predict_logits(m, data.held_out, s.spec.mean, s.spec.std,
                                            s.tc.eval_batch_size), t)
        record["held_out_negatives_flagged"] = round((neg.max(1).values < reject).float().mean().item(), 5)
    return Validation(loss, acc, record)


def end_epoch(s: Session, run: RunState, test_split: Split, totals: EpochTotals, out: Path,
              say: Callable) -> dict:
    """Validate, test, record, save. The epoch's metrics row goes into run.metrics; rank 0 writes
    the checkpoint (the folder: the latest epoch, what the app loads; best/: the best validation
    accuracy so far — chosen on held-out training images, never on the test set), metrics.csv
    (from run.metrics, whole: a replayed epoch never duplicates a row) and curves.png."""
    epoch = run.step // s.plan.steps_per_epoch            # 1-based: the epoch just finished
    v = validate(s)
    test_loss, test_acc = test_pass(s, test_split)
    seen = max(totals.seen, 1)
    row = {"epoch": epoch, "step": run.step, "lr": f"{s.opt.param_groups[0]['lr']:.3g}",
           "train_loss": f"{totals.loss_sum / seen:.5f}", "train_acc": f"{totals.correct / seen:.5f}",
           "val_loss": f"{v.loss:.5f}" if v else "", "val_acc": f"{v.accuracy:.5f}" if v else "",
           "test_loss": f"{test_loss:.5f}", "test_acc": f"{test_acc:.5f}",
           "epoch_seconds": f"{totals.seconds:.1f}",
           "images_per_second": f"{totals.seen / max(totals.seconds, 1e-9):.0f}"}
    run.metrics.append(row)
    say(f"epoch {epoch}: test accuracy {100 * test_acc:.2f}% (loss {test_loss:.4f})"
        + (f"; validation accuracy {100 * v.accuracy:.2f}%, temperature "
           f"{v.calibration['temperature']:.2f}" if v else ""), flush=True)
    check_in_sync(s)
    if s.d.main:
        meta = checkpoint_meta(s, run, test_acc, epoch)
        if v:
            meta["calibration"] = v.calibration
        save_checkpoint(out, s.eval_model, meta)
        if v and v.accuracy > run.best_acc:
            save_checkpoint(out / "best", s.eval_model, meta)
        write_metrics(out / "metrics.csv", run.metrics)
        plot_curves(run.metrics, out / "curves.png")
        if (out / SET_ASIDE).is_dir():        # this run now has a checkpoint of its own
            shutil.rmtree(out / SET_ASIDE, ignore_errors=True)
    if v:
        run.best_acc = max(run.best_acc, v.accuracy)
    return row


def start_or_resume(s: Session, saved: SavedState | None, argv: list[str] | None, out: Path,
                    say: Callable, digest: str) -> RunState:
    """The run to continue: the saved one, loaded into the model and optimiser, or a new one.
    `digest`: the training data's (data_digest), which a resumed run must have trained on."""
    if saved is not None:
        run = saved.run
        if run.train_images != len(s.train_split):
            raise TrainingError(f"--resume: the run in {out} trained on {run.train_images:,} "
                                f"images, --data-dir {s.tc.data_dir} has {len(s.train_split):,}: "
                                f"point --data-dir at the same data, or start afresh with "
                                f"--overwrite")
        if run.data_digest and run.data_digest != digest:      # (states before it had none)
            raise TrainingError(f"--resume: the training images in --data-dir {s.tc.data_dir} are "
                                f"not the ones the run in {out} started on (same number, other "
                                f"pictures or labels): point --data-dir at that data, or start "
                                f"afresh with --overwrite")
        if run.step > s.plan.total_steps:
            raise TrainingError(f"can't resume: the saved state is at step {run.step}, past the "
                                f"run's {s.plan.total_steps} steps (the state file is damaged)")
        run.data_digest = run.data_digest or digest
        restore(saved, s.model, s.opt, s.ema_model)
        say(f"Resuming {out} at step {run.step} of {s.plan.total_steps}", flush=True)
    else:
        run = RunState(command=distributed.launch_command(s.d) + " "
                       + shlex.join(sys.argv[1:] if argv is None else argv),
                       train_images=len(s.train_split), data_digest=digest)
        distributed.barrier(s.d)              # every rank has run preflight before rank 0 writes
        if s.d.main and s.tc.overwrite:
            moved = set_aside_run_files(out)
            if moved:
                say(f"--overwrite: moved the previous run's {', '.join(moved)} to "
                    f"{out / SET_ASIDE} (deleted when this run saves its first epoch)",
                    file=sys.stderr, flush=True)
    run.config = {"train": asdict(s.tc) | {"out": str(out)}, "model": s.model.cfg.to_dict()}
    # The code this process runs is the code at start-up: record that commit, not HEAD at save time.
    commit, tree = git_commit(), source_tree()
    if commit not in run.commits:
        run.commits.append(commit)
    if tree not in run.sources:
        run.sources.append(tree)
    # A run started on a GPU and resumed on a CPU says so: "device" must not name the last alone.
    here = describe_device(s.device) + (f" × {s.d.world} processes" if s.d.enabled else "")
    if not run.devices or not run.devices[-1].startswith(here + " from epoch"):
        run.devices.append(f"{here} from epoch {run.step // s.plan.steps_per_epoch + 1}")
    return run


def train(tc: TrainConfig, mc: ViTConfig, argv: list[str] | None = None,
          should_stop: Callable[[], bool] = lambda: False) -> dict:
    """Run or resume training; returns the last epoch's metrics row, or {"stopped": True,
    "reason": "interrupted" | "max_steps", "step": N}. Raises TrainingError, DataError,
    CheckpointError or OSError, each with a one-line message. Under torchrun every process calls
    this; they train one model together (vit/training/distributed.py). `should_stop()` true (e.g. after
    Ctrl-C) ends the run after the current step with a resumable state."""
    started = time.time()                # "Done in" counts everything from here
    spec = builtin_spec(tc.dataset)
    if tc.dataset == FOLDER:
        problem = folder_size_problem(mc.image_size)
        if problem:
            raise TrainingError(problem)
        spec = describe_folder(tc.data_dir, mc.image_size)
    problems = config_problems(tc, mc, spec)
    if problems:
        raise TrainingError(problems[0])
    tc = replace(tc, out=tc.out or f"checkpoints/{tc.dataset}")
    try:
        device = pick_device(tc.device)
    except ValueError as e:
        raise TrainingError(str(e)) from None
    d = distributed.from_environment()
    problem = (distributed.gpu_problem(d, device)
               or memory_problem(tc, mc, device, d.world, local_processes(d, device)))
    if problem:
        raise TrainingError(problem)
    problem = out_problem(tc.out)
    if problem:
        raise TrainingError(problem)
    check_writable(Path(tc.out))
    with exclusive(Path(tc.out), d.main):
        saved = preflight(tc, mc)
        if d.main:       # what a kill -9 mid-save left: no one else writes here while we hold the lock
            for sub in ("", "best", STATE_FILE.parent, snapshots.FOLDER):
                remove_stale_temporaries(Path(tc.out) / sub)
        device = distributed.setup(d, device, tc.dist_timeout)
        try:
            result = _train(tc, spec, mc, argv, d, device, saved, should_stop, started)
        except (RuntimeError, MemoryError) as e:
            if d.enabled and distributed.is_stall(e):
                raise TrainingError(distributed.stall_message(d, tc.dist_timeout)) from None
            if is_out_of_memory(e):
                # --eval-batch-size may change on --resume; the batch size and model may not.
                resumable = (Path(tc.out) / STATE_FILE).is_file()
                raise TrainingError(
                    f"out of memory on the {device.type}: "
                    + (f"--resume with a smaller --eval-batch-size (now {tc.eval_batch_size}), "
                       f"or start afresh (--overwrite) " if resumable else "run again ")
                    + f"with a smaller --batch-size (now {tc.batch_size}) or model") from None
            raise
        distributed.teardown(d)
        return result


def describe_folder(data_dir, image_size: int) -> DatasetSpec:
    """`--dataset folder`: the folder's classes and normalisation (vit.data.folders.folder_spec)."""
    from vit.data.folders import FolderError, folder_spec
    try:
        return folder_spec(data_dir, image_size)
    except (FolderError, OSError) as e:
        raise DataError(str(e)) from None


def _train(tc: TrainConfig, spec: DatasetSpec, mc: ViTConfig, argv, d: distributed.Dist, device: torch.device,
           saved: SavedState | None, should_stop: Callable[[], bool], started: float) -> dict:
    say = print if d.main else (lambda *a, **k: None)    # one voice, one writer: rank 0
    if tc.threads:
        torch.set_num_threads(tc.threads)
    out = Path(tc.out)
    cache = cache_root(tc.cache_dir)
    full_train = load_split(spec, tc.data_dir, True, tc.download)
    test_split = load_split(spec, tc.data_dir, False, tc.download)
    digest = data_digest(full_train)
    say(f"Read {len(full_train):,} training and {len(test_split):,} test images "
        f"({time.time() - started:.0f} s)", flush=True)
    train_split, data = prepare_data(tc, spec, full_train, say, digest, cache)
    if device.type == "cuda":       # a few hundred MB at most: batches are then cut on the GPU
        train_split = replace(train_split, images=train_split.images.to(device),
                              labels=train_split.labels.to(device))
        data = replace(data, served=_to(data.served, device), negatives=_to(data.negatives, device))
    s = new_session(tc, mc, train_split, d, device, data, fresh=saved is None, spec=spec)
    run = start_or_resume(s, saved, argv, out, say, digest)  # (--overwrite sets old files aside)
    if saved is None and d.main:
        # A resumable state before any checkpoint file exists: a kill at any later moment (even
        # between the first epoch's checkpoint and its state) leaves a run --resume continues.
        save_state(out / STATE_FILE, s.model, s.opt, run, s.ema_model)
    if tc.distill:
        s.teacher = get_teacher(s, out, say, resuming=saved is not None, digest=digest, cache=cache)
    prepared = time.time() - started
    stop_at = run.step + tc.max_steps if tc.max_steps else None
    t_call, wall0 = time.time(), run.wall_seconds
    last_row = None
    while run.step < s.plan.total_steps:
        reason, totals = train_epoch(s, run, stop_at, should_stop)
        run.wall_seconds = wall0 + time.time() - t_call
        if run.step % s.plan.steps_per_epoch == 0:
            last_row = end_epoch(s, run, test_split, totals, out, say)
            run.partial = EpochTotals()
            run.wall_seconds = wall0 + time.time() - t_call
        else:
            run.partial = totals
        if d.main:
            save_state(out / STATE_FILE, s.model, s.opt, run, s.ema_model)
        distributed.barrier(d)                    # nobody runs ahead of a half-written state
        if reason and run.step < s.plan.total_steps:
            again = shlex.join(w for w in shlex.split(run.command) if w != "--overwrite")
            say(f"Stopped at step {run.step} of {s.plan.total_steps} "
                f"(epoch {run.step // s.plan.steps_per_epoch + 1}); continue with:\n"
                f"  {again} --resume", file=sys.stderr, flush=True)
            return {"stopped": True, "reason": reason, "step": run.step}
    if d.enabled:
        digest = check_in_sync(s)
        say(f"Weights identical on all {d.world} processes (sha256 {digest[:16]})", flush=True)
    total = time.time() - started
    # Seconds too: a short run's time (a GPU's time to accuracy) is lost in minutes' rounding.
    say(f"Done in {total / 60:.1f} min ({prepared:.0f} s preparing, then {total - prepared:.0f} s "
        f"of epochs): {out}", flush=True)
    return last_row or {"step": run.step}
