"""Confidence a person can believe: temperature scaling, its measure (ECE), and the rule that
says "not one of these classes".

A trained network's softmax is over-confident or, with label smoothing, under-confident; dividing
its logits by one number T fitted on held-out data (Guo et al. 2017, "On Calibration of Modern
Neural Networks") makes "90 %" mean right nine times in ten without changing any answer. T and the
rejection threshold are fitted on the validation split the trainer carves out of the training
data, never on the test set, and stored in config.json's "calibration" object.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

ECE_BINS = 15
# Bounds for a stored temperature: far outside any fit, inside what keeps softmax finite.
TEMPERATURE_RANGE = (0.05, 20.0)
# Share of held-out digits the rejection threshold may refuse (its quantile on validation).
REJECT_QUANTILE = 0.002


def ece(probs: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS) -> float:
    """Expected calibration error: bins of equal width over the top probability; the
    size-weighted mean |accuracy - confidence| over bins. probs (N, K), labels (N,)."""
    probs, labels = torch.as_tensor(probs).float(), torch.as_tensor(labels).long()
    conf, pred = probs.max(1)
    right = (pred == labels).float()
    # Bin b holds confidences in (b/bins, (b+1)/bins]; 0 goes into the first bin.
    idx = (conf * bins).ceil().long().clamp(1, bins) - 1
    total = 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            total += m.sum().item() * abs(right[m].mean().item() - conf[m].mean().item())
    return total / max(len(labels), 1)


def reliability(probs: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS):
    """Per bin: (lower edge, upper edge, count, mean confidence, accuracy); empty bins omitted."""
    probs, labels = torch.as_tensor(probs).float(), torch.as_tensor(labels).long()
    conf, pred = probs.max(1)
    right = (pred == labels).float()
    idx = (conf * bins).ceil().long().clamp(1, bins) - 1
    rows = []
    for b in range(bins):
        m = idx == b
        if m.any():
            rows.append((b / bins, (b + 1) / bins, int(m.sum()), conf[m].mean().item(),
                         right[m].mean().item()))
    return rows


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """The T minimising the negative log-likelihood of softmax(logits / T) on (logits, labels).
    One parameter, convex in log T: a bounded 1-D search (golden section) is exact enough and
    has no learning rate to tune."""
    logits, labels = torch.as_tensor(logits).float(), torch.as_tensor(labels).long()

    def nll(log_t: float) -> float:
        return F.cross_entropy(logits / math.exp(log_t), labels).item()

    lo, hi = math.log(TEMPERATURE_RANGE[0]), math.log(TEMPERATURE_RANGE[1])
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = nll(a), nll(b)
    for _ in range(60):                  # the bracket shrinks to 0.618**60 of its width
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = nll(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = nll(b)
    return math.exp((lo + hi) / 2)


def calibrated(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Probabilities (N, K) from logits (N, K) and a fitted temperature."""
    return torch.softmax(torch.as_tensor(logits).float() / temperature, dim=-1)


def fit_reject_threshold(probs: torch.Tensor, quantile: float = REJECT_QUANTILE) -> float:
    """The top-probability level below which an input is called "not one of these classes":
    the `quantile` of held-out in-class inputs' top probabilities, so that about that share of
    real digits is refused."""
    top = torch.as_tensor(probs).float().max(1).values
    return float(torch.quantile(top, quantile))
