"""The bundled checkpoint on canvas-style drawings, against the goals of "answers a person can
believe": 1,000 MNIST test digits redrawn as big off-centre drawings (tests/drawings.py) are
calibrated (ECE <= 1.5 %) and almost never refused (< 0.5 %); >= 80 % of 280 drawings of seven
kinds of non-digits (font letters, scribbles, dots, dashes, two digits, shapes, near-empty marks:
made independently of the trainer's own generator) are answered "not a digit". Skipped until
checkpoints/mnist has a calibration object (VIT_GOALS_CHECKPOINT=FOLDER measures another
checkpoint)."""
from collections import Counter, defaultdict

import numpy as np
import pytest
from drawings import NON_DIGIT_KINDS, non_digits, redrawn_digits
from test_calibration import bundled_predictor, judged, mnist_test_split

from vit.explain.calibration import ece

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def bundled():
    return bundled_predictor()


@pytest.fixture(scope="module")
def mnist_test():
    return mnist_test_split()


def test_redrawn_test_digits_are_calibrated_and_almost_never_refused(bundled, mnist_test):
    images, labels = mnist_test
    drawn, y, _ = redrawn_digits(images, labels, 1000, seed=0)
    probs, verdicts = judged(bundled, drawn)
    e = ece(probs, y)
    refused = Counter(v.kind for v in verdicts if not v)
    print(f"1,000 redrawn test digits: ECE {100 * e:.2f} %, accuracy "
          f"{100 * (probs.argmax(1) == y).mean():.1f} %, refused {dict(refused)}")
    assert e <= 0.015
    assert sum(refused.values()) < 5                     # < 0.5 %


def test_non_digits_are_answered_not_a_digit(bundled, mnist_test):
    made = non_digits(mnist_test[0], per_kind=40, seed=0)           # 7 kinds x 40 = 280
    _, verdicts = judged(bundled, [d for _, d in made])
    per_kind = defaultdict(list)
    for (kind, _), v in zip(made, verdicts):
        per_kind[kind].append(not v)
    rates = {k: float(np.mean(per_kind[k])) for k in NON_DIGIT_KINDS}
    overall = float(np.mean([not v for v in verdicts]))
    print(f"non-digits refused: {100 * overall:.1f} % of {len(made)}; per kind: "
          + ", ".join(f"{k} {100 * r:.0f} %" for k, r in rates.items()))
    assert overall >= 0.8
