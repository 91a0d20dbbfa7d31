"""Data-parallel training with torch.distributed, when the trainer runs under `torchrun`.

`torchrun --nproc_per_node=N -m vit.train …` starts N copies of the trainer with RANK, WORLD_SIZE,
LOCAL_RANK and a rendezvous address in their environment; `python -m vit.train` has none of them and
stays a single process. Semantics the trainer keeps (see docs/training.md):

- `--batch-size` is the *global* batch: every step, all processes draw the same global batch from
  the same per-epoch permutation and each takes every N-th image of it (rank r: images r, r+N, …).
  Together they cover each epoch once, reshuffled per epoch, like DistributedSampler — and the
  optimiser sees exactly the batch and learning rate a single process would, so `--lr` needs no
  rescaling and a run can be resumed with a different number of processes.
- Batch order and augmentation come from generators seeded the same on every rank; dropout has
  a stream per rank (vit/training/ mixes the rank into its seed), since each rank drops units
  of its own images.
- Gradients are averaged by DistributedDataParallel; only rank 0 writes files and prints.
"""
from __future__ import annotations

import gc
import hashlib
import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        """The one process that writes checkpoints, metrics and the progress bar."""
        return self.rank == 0


def from_environment() -> Dist:
    """The process's place in a torchrun job (a single-process Dist when not under torchrun)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or "RANK" not in os.environ:
        return Dist()
    return Dist(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def gpu_problem(d: Dist, device: torch.device) -> str | None:
    """Why this job cannot give each of this machine's processes a GPU of its own (NCCL puts one
    process on one GPU: two on one GPU fail with "Duplicate GPU detected"), or None."""
    if not d.enabled or device.type != "cuda":
        return None
    gpus = torch.cuda.device_count()
    if d.local_rank < gpus:
        return None
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", d.world))
    return (f"torchrun started {per_node} processes on this machine, which has {gpus} GPU(s): "
            f"NCCL needs a GPU per process; use --nproc_per_node={gpus}, "
            "or --device cpu to train with gloo")


def setup(d: Dist, device: torch.device, timeout_s: float = 300.0) -> torch.device:
    """Join the process group: NCCL between GPUs, gloo between CPUs. Returns this rank's device.
    `timeout_s`: how long a collective waits for the other processes (torch's default is 30
    minutes: a stalled process kept the others waiting that long)."""
    if not d.enabled:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", d.local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            timeout=timedelta(seconds=timeout_s))
    return device


# How gloo and NCCL word a collective that gave up waiting, or a peer that went away.
_STALLED = ("timed out", "timeout", "connection closed by peer", "connection reset by peer")


def is_stall(e: BaseException) -> bool:
    """Whether `e` is a collective that timed out or lost a peer (not a bug in the model)."""
    return isinstance(e, RuntimeError) and any(w in str(e).lower() for w in _STALLED)


def stall_message(d: Dist, timeout_s: float, settle_s: float = 3.0) -> str:
    """One line naming the processes that fell behind. Every rank that timed out marks itself
    in the job's store; after `settle_s` the ranks with no mark are the stalled ones (they are
    stuck, or gone, so they never mark themselves)."""
    try:
        from torch.distributed.distributed_c10d import _get_default_store
        store = _get_default_store()
        store.set(f"vit/timed-out/{d.rank}", "1")
        time.sleep(settle_s)
        stalled = [r for r in range(d.world)
                   if r != d.rank and not store.check([f"vit/timed-out/{r}"])]
    except Exception:                    # the store itself may be gone with the stalled process
        stalled = []
    who = (", ".join(f"rank {r}" for r in stalled) + (" has" if len(stalled) == 1 else " have")
           if stalled else "another process has")
    return (f"{who} stopped answering: rank {d.rank} waited {timeout_s:g} s (--dist-timeout) "
            f"at a collective; see that process's output. The last saved state continues with "
            f"--resume")


def teardown(d: Dist) -> None:
    """Leave the process group together, after a run that ended the same way on every rank.
    Without the barrier one rank could close its connections while another still finished its
    last collective, and the collector first frees DDP's reducer (which holds the group): gloo
    threads torn down at interpreter exit instead abort the process ("terminate called without
    an active exception"), and torchrun reports a finished run as failed. Not called after an
    error on one rank: a barrier there would wait for ranks that never come."""
    if d.enabled and dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def launch_command(d: Dist) -> str:
    """How this job was started, for the checkpoint's provenance."""
    if not d.enabled:
        return "python -m vit.train"
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", d.world))
    nodes = d.world // per_node
    return (f"torchrun {'--nnodes=%d ' % nodes if nodes > 1 else ''}"
            f"--nproc_per_node={per_node} -m vit.train")


def shard(d: Dist, n: int) -> slice:
    """This rank's rows of a global batch (or test set) of n items: r, r+N, r+2N, …"""
    return slice(d.rank, n, d.world)


def sum_all(d: Dist, values: list[float], device: torch.device) -> list[float]:
    """Element-wise sum of `values` over all ranks (a no-op for one process)."""
    if not d.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def any_rank(d: Dist, flags: list[bool], device: torch.device) -> list[bool]:
    """Each flag true on every rank if it is true on one (Ctrl-C that reached one process first,
    a non-finite loss on one shard): all ranks then leave the loop at the same step."""
    if not d.enabled:
        return flags
    t = torch.tensor([int(f) for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer, bit for bit."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def digests_agree(d: Dist, model: torch.nn.Module, device: torch.device) -> tuple[bool, str]:
    """Whether all ranks hold bit-identical weights (DDP keeps them so); and rank 0's digest."""
    digest = weights_digest(model)
    if not d.enabled:
        return True, digest
    mine = torch.tensor([int(digest[i:i + 8], 16) for i in range(0, 64, 8)],
                        dtype=torch.int64, device=device)                       # (8,)
    every = [torch.empty_like(mine) for _ in range(d.world)]
    dist.all_gather(every, mine)
    return all(torch.equal(every[0], e) for e in every), digest


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()
