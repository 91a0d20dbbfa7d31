"""Training throughput: this project's trainer loop vs the seeds' notebook-style loop, same model size.

    python -m bench.train_throughput --data-dir ../shared/data [--rounds 8] [--threads 0]

The project loop: MNIST as one uint8 tensor, batched affine augmentation, our ViT (fused SDPA
attention), AdamW, batch 128 — vit/training/'s own `make_batch` and `train_step`, which
`vit.train` runs. The seeds' loop: torchvision MNIST
through a DataLoader with per-item PIL -> ToTensor -> Normalize, a ViT built from
nn.MultiheadAttention blocks, Adam, batch 64. A third "loop" does only the step's matrix multiplies
(same shapes, nothing else): issue 11's ceiling. A fourth times the
step's products as torch runs them (the stem's convolutions as convolutions, which are faster here
than the third loop's im2col GEMMs, and attention's own products, which it leaves out): a tighter
ceiling. All run in one process, taking turns window by window; the script prints medians,
`ratio: X`, `ceiling fraction: X` and the trainer's fraction of the tighter ceiling.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from vit.data.loading import load_split
from vit.model import ViTConfig
from vit.training.batches import epoch_order, make_batch
from vit.training.config import TrainConfig
from vit.training.loop import train_step
from vit.training.session import new_session


class SeedBlock(nn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x):
        h = self.n1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.n2(x))


class SeedViT(nn.Module):
    """The seeds' notebook model: same sizes as ours (conv stem included), nn.MultiheadAttention
    inside."""
    def __init__(self, c: ViTConfig):
        super().__init__()
        stem = []
        for i in range(c.stem_layers if c.stem_channels else 0):
            stem += [nn.Conv2d(1 if i == 0 else c.stem_channels, c.stem_channels, 3, padding=1), nn.GELU()]
        self.embed = nn.Sequential(*stem,
                                   nn.Conv2d(c.stem_channels or 1, c.dim, c.patch_size, c.patch_size))
        self.cls = nn.Parameter(torch.zeros(1, 1, c.dim))
        self.pos = nn.Parameter(torch.zeros(1, 1 + c.num_patches, c.dim))
        self.blocks = nn.Sequential(*[SeedBlock(c.dim, c.heads, c.mlp_dim) for _ in range(c.depth)])
        self.norm, self.head = nn.LayerNorm(c.dim), nn.Linear(c.dim, c.num_classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


class Loop:
    """A training step and its batches; `window()` times `steps` steps and returns images/s."""

    def __init__(self, step_fn, batches, steps: int, warmup: int = 5):
        self.step_fn, self.it, self.steps = step_fn, iter(batches), steps
        for _ in range(warmup):
            self.step_fn(*next(self.it))

    def window(self) -> float:
        t, n = time.perf_counter(), 0
        for _ in range(self.steps):
            x, y = next(self.it)
            self.step_fn(x, y)
            n += len(y)
        return n / (time.perf_counter() - t)


def project_loop(data_dir: str, cfg: ViTConfig) -> Loop:
    """The trainer's own batches and step (vit/training/), on one process."""
    tc = TrainConfig()
    s = new_session(tc, cfg, load_split("mnist", data_dir, True))

    def batches():
        step = 0
        while True:       # epoch after epoch, as the trainer draws them
            order = epoch_order(tc, len(s.train_split), step // s.plan.steps_per_epoch)
            for _ in range(s.plan.steps_per_epoch):
                batch = make_batch(s, order, step)
                yield (batch, step), batch.y
                step += 1

    def step_fn(batch_and_step, _labels):
        train_step(s, *batch_and_step)

    return Loop(step_fn, batches(), 10)             # 1,280 images per window


def seed_loop(data_dir: str, cfg: ViTConfig) -> Loop:
    import torchvision
    from torchvision import transforms
    ds = torchvision.datasets.MNIST(data_dir, train=True, download=False, transform=transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]))
    loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
    model = SeedViT(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return Loop(step, loader, 20)                   # batches are half the size: same images


def linear_shapes(cfg: ViTConfig, batch: int) -> list[tuple[int, int, int]]:
    """(M, K, O) of every Linear's product at the real shapes, the patch projection and the head
    included: what both ceilings time as GEMMs."""
    T, N = 1 + cfg.num_patches, cfg.num_patches
    d, m, p = cfg.dim, cfg.mlp_dim, cfg.patch_size
    shapes = [(batch * T, d, 3 * d), (batch * T, d, d), (batch * T, d, m), (batch * T, m, d)] * cfg.depth
    return shapes + [(batch * N, (cfg.stem_channels or cfg.channels) * p * p, d),
                     (batch, d, cfg.num_classes)]


def gemms(shapes: list[tuple[int, int, int]]):
    """A function running, for each (M, K, O), the forward product and its two gradients."""
    mats = [(torch.randn(M, K), torch.randn(K, O), torch.randn(M, O)) for M, K, O in shapes]

    def run():
        for x, w, g in mats:
            x @ w                 # forward
            g @ w.T               # gradient w.r.t. the input
            x.T @ g               # gradient w.r.t. the weight
    return run


def gemm_ceiling(cfg: ViTConfig, batch: int) -> Loop:
    """images/s of a step that does only the model's matrix multiplies — every Linear's forward
    product and its two backward products (input and weight gradients) at the real shapes, the
    patch projection and the stem's 3x3 conv as GEMMs — and nothing else: the ceiling issue 11's
    `ceiling fraction` is measured against. Not a strict one: the stem's im2col GEMMs are slower
    here than torch's convolution, and attention's own products are left out
    (`products_ceiling` corrects both)."""
    shapes = linear_shapes(cfg, batch)
    for i in range(cfg.stem_layers if cfg.stem_channels else 0):
        shapes.append((batch * cfg.image_size ** 2, 9 * (cfg.channels if i == 0 else cfg.stem_channels),
                       cfg.stem_channels))
    run = gemms(shapes)
    fake = iter(lambda: (None, range(batch)), None)
    return Loop(lambda *_: run(), fake, 10)


def products_ceiling(cfg: ViTConfig, batch: int) -> Loop:
    """images/s of the step's products as torch runs them: the Linears and the patch projection
    as GEMMs (as in `gemm_ceiling`), the stem's 3x3 convolutions as torch's own convolution
    (forward and both gradients, no input gradient for the first layer, as in training) rather
    than im2col GEMMs, which are slower here, and attention's own products (QK^T, weights.V and
    their four gradients) included. Tighter than `gemm_ceiling`: nothing a step must compute is
    left out, and nothing is timed in a slower form than the trainer's."""
    linears = gemms(linear_shapes(cfg, batch))
    T, Dh, BH = 1 + cfg.num_patches, cfg.dim // cfg.heads, batch * cfg.heads
    q, k, v, dO = (torch.randn(BH, T, Dh) for _ in range(4))
    P = torch.randn(BH, T, T)
    S, C = cfg.image_size, cfg.stem_channels
    convs = []
    for i in range(cfg.stem_layers if C else 0):
        c_in = cfg.channels if i == 0 else C
        x = torch.randn(batch, c_in, S, S).contiguous(memory_format=torch.channels_last)
        convs.append((x, torch.randn(C, c_in, 3, 3), i > 0))
    g = torch.randn(batch, C or 1, S, S).contiguous(memory_format=torch.channels_last)

    def step(*_):
        linears()
        for _ in range(cfg.depth):
            torch.bmm(q, k.transpose(1, 2))                  # scores
            torch.bmm(P, v)                                  # weights . V
            torch.bmm(dO, v.transpose(1, 2))                 # their gradients
            torch.bmm(P.transpose(1, 2), dO)
            torch.bmm(P, k)
            torch.bmm(P.transpose(1, 2), q)
        for x, w, input_grad in convs:
            torch.ops.aten.convolution_backward(g, x, w, None, [1, 1], [1, 1], [1, 1], False,
                                                [0, 0], 1, [input_grad, True, False])
            F.conv2d(x, w, padding=1)

    fake = iter(lambda: (None, range(batch)), None)
    return Loop(step, fake, 10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="data")
    p.add_argument("--rounds", type=int, default=8,
                   help="timed rounds; each times 1,280 images of every loop in turn")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = ViTConfig()
    print(f"model: {cfg}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    # This VM's speed drifts by 2x within minutes (other tenants), so the loops take turns:
    # one window each per round, and each round's ratio compares windows timed seconds apart.
    loops = {"project": project_loop(args.data_dir, cfg), "seeds": seed_loop(args.data_dir, cfg),
             "ceiling": gemm_ceiling(cfg, TrainConfig().batch_size),
             "products": products_ceiling(cfg, TrainConfig().batch_size)}
    rates = {k: [] for k in loops}
    for _ in range(args.rounds):
        for name, loop in loops.items():
            rates[name].append(loop.window())
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = statistics.median(p / q for p, q in zip(rates["project"], rates["seeds"]))
    ceil = statistics.median(c / q for c, q in zip(rates["ceiling"], rates["seeds"]))
    fraction = statistics.median(p / c for p, c in zip(rates["project"], rates["ceiling"]))
    tight = statistics.median(p / c for p, c in zip(rates["project"], rates["products"]))
    print(f"project loop: {med['project']:.0f} images/s (median of {args.rounds} windows)")
    print(f"seeds' loop:  {med['seeds']:.0f} images/s")
    print(f"ratio: {ratio:.2f}  (median of per-round ratios)")
    print(f"matrix multiplies alone: {med['ceiling']:.0f} images/s = {ceil:.2f}x the seeds' loop "
          f"(the ceiling if everything else in a step were free)")
    print(f"ceiling fraction: {fraction:.2f}  (the trainer's images/s over the matrix multiplies' "
          f"alone, median of per-round ratios)")
    print(f"the step's products as torch runs them (convolutions as convolutions, attention's "
          f"products included): {med['products']:.0f} images/s; against them the trainer is at "
          f"{tight:.2f}")


if __name__ == "__main__":
    main()
