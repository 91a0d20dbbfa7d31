"""Every random draw of a run comes from a generator seeded by `mix_seed(seed, stream, epoch
or step)`, so a run stopped anywhere and resumed ends with exactly the weights of an
uninterrupted one. One stream per kind of draw.
"""
from __future__ import annotations

import torch

# Random streams, mixed into every seed so that no two draws share a generator.
STREAM_ORDER, STREAM_AUGMENT, STREAM_DROPOUT, STREAM_VAL, STREAM_VIEW, STREAM_NEG = 1, 2, 3, 4, 5, 6
STREAM_TEACHER, STREAM_ERASE, STREAM_POLICY, STREAM_DEGRADE, STREAM_SUBSET = 7, 8, 9, 10, 11
STREAM_FILLED, STREAM_THICKEN, STREAM_COARSE = 12, 13, 14

# --- random streams ---------------------------------------------------------------------------
_MASK64 = 2**64 - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def mix_seed(*values: int) -> int:
    """A 63-bit seed from integers, by chaining splitmix64 over them: neighbouring inputs give
    unrelated seeds, and (unlike hash()) the same ones on every platform and Python version."""
    h = 0
    for v in values:
        h = _splitmix64(h ^ (v & _MASK64))
    return h >> 1


def _generator(*values: int) -> torch.Generator:
    return torch.Generator().manual_seed(mix_seed(*values))
