"""No train/serve skew: the bundled MNIST model scores the same on the test digits (within 0.1
point) whether they are fed as stored or first laid out by the app's own preprocessing
(`vit.preprocess`): the layout leaves a digit already in MNIST's layout as it is, and the trainer
shows the model half its training images laid out (--serve-view), as drawings are."""
import numpy as np
import pytest
import torch
from conftest import ROOT, SHARED_DATA, bundled_test_logits

from vit.checkpoint import open_checkpoint
from vit.data.loading import DataError, load_split
from vit.preprocessing.layout import to_model_image
from vit.scoring import predict_logits

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def accuracies():
    """(raw, laid out) accuracy of the bundled MNIST model on the 10,000 test digits."""
    ck = open_checkpoint(ROOT / "checkpoints" / "mnist", "cpu")
    try:
        test = load_split("mnist", SHARED_DATA, train=False)
    except DataError:
        pytest.skip("MNIST is not on this machine")
    laid_out = torch.from_numpy(np.stack([
        np.round(to_model_image(im, "digits", 28) * 255).astype(np.uint8) for im in test.images.numpy()]))
    cfg = ck.config
    raw = bundled_test_logits("mnist")[0].argmax(1) == test.labels     # scored once per session
    served = (predict_logits(ck.model, laid_out, cfg.mean, cfg.std, 1000).argmax(1) == test.labels)
    raw_acc, served_acc = raw.float().mean().item(), served.float().mean().item()
    print(f"MNIST test: raw {100 * raw_acc:.2f} %, through vit.preprocess {100 * served_acc:.2f} %")
    return raw_acc, served_acc


def test_test_digits_through_the_apps_preprocessing_score_as_raw(accuracies):
    """Issue 11's goal: within 0.1 point. Measured: 99.42 % raw and 99.43 % laid out with the
    coarse-scan fine-tune (issue 47; 99.45 / 99.46 % with the photo fine-tune before it, 99.53 %
    both ways with the model before that). Before the layout
    kept the box's rim and stopped sharpening digits already at the model's scale: 99.40 % laid
    out, 15 digits lost and 2 gained."""
    raw_acc, served_acc = accuracies
    assert abs(served_acc - raw_acc) <= 0.001
