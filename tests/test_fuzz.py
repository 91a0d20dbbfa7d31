"""Property tests: whatever array or image comes in, vit.preprocess returns a valid input tensor or
raises PreprocessError (the documented, human-readable error) — nothing else. Hypothesis draws
arrays of any shape, dtype and values (NaN, inf and huge floats included), PIL images of any
mode, Sketchpad-like dicts and other Python values."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image

from vit.preprocessing import preprocess
from vit.preprocessing.decode import PreprocessError

DTYPES = st.sampled_from([np.uint8, np.uint16, np.int32, np.float32, np.float64, np.bool_])
SHAPES = st.one_of(
    st.tuples(st.integers(0, 70), st.integers(0, 70)),
    st.tuples(st.integers(0, 50), st.integers(0, 50), st.sampled_from([1, 2, 3, 4, 5])),
    st.tuples(st.integers(1, 4)),
    st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
)


def check(image):
    try:
        x = preprocess(image)
    except PreprocessError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert isinstance(x, torch.Tensor) and x.shape == (1, 1, 28, 28) and x.dtype == torch.float32
    assert torch.isfinite(x).all()
    lo, hi = -0.1307 / 0.3081, (1 - 0.1307) / 0.3081
    assert x.min() >= lo - 1e-4 and x.max() <= hi + 1e-4


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DTYPES.flatmap(lambda dt: arrays(dt, SHAPES)))
def test_arrays_of_any_shape_dtype_and_values(a):
    check(a)


@settings(max_examples=100, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 40), st.integers(1, 40)),
              elements=st.floats(allow_nan=True, allow_infinity=True, width=64)))
def test_floats_with_nan_inf_and_huge_values(a):
    check(a)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["L", "LA", "RGB", "RGBA", "P", "CMYK", "1", "I", "F", "I;16"]),
       st.integers(1, 60), st.integers(1, 60), st.integers(0, 2**32 - 1))
def test_pil_images_of_any_mode(mode, w, h, seed):
    rng = np.random.default_rng(seed)
    im = Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA")
    if mode == "I;16":
        im = Image.fromarray((np.asarray(im.convert("L"), np.uint16) * 257).astype("<u2"))
    else:
        im = im.convert(mode)
    check(im)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["background", "layers", "composite"]),
                       st.one_of(st.none(), st.just([]),
                                 arrays(np.uint8, st.tuples(st.integers(1, 30), st.integers(1, 30),
                                                            st.just(4))),
                                 st.lists(arrays(np.uint8, st.just((20, 20, 4))), max_size=2))))
def test_sketchpad_like_dicts(value):
    check(value)


@pytest.mark.parametrize("value", [b"\x89PNG", object(), [1, 2, 3], {"layers": "x"}])
def test_other_python_values(value):
    check(value)
