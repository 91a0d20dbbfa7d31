"""Can two NCCL processes share one GPU? The trainer refuses it (vit/training/distributed.py,
`gpu_problem`); this asks NCCL itself, on a machine with a GPU:

    python -m bench.nccl_one_gpu

Two processes join an NCCL group, both on cuda:0, and all-reduce a tensor. Prints what happened.
"""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", 0))
        t = torch.full((4,), float(rank + 1), device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        results[rank] = f"ok: all_reduce gave {t[0].item():g} (want 3)"
        dist.destroy_process_group()
    except Exception as e:        # what NCCL says is the finding
        results[rank] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU here")
        return 2
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
          f"{torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}")
    results = mp.Manager().dict()
    ctx = mp.spawn(worker, args=(port, results), nprocs=2, join=False)
    ctx.join(timeout=120)
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
    for rank in range(2):
        print(f"rank {rank} on cuda:0: {results.get(rank, 'no answer within 120 s')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
