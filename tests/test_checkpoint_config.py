"""config.json and model.safetensors as untrusted input: whatever they hold, loading either works
or fails with a one-line CheckpointError that names the file and the field; a config can't make
the loader allocate a model the weights file does not hold.

Each malformed config in `BAD`, one line naming its field; a huge `dim` refused before any model
is built; NaN/Inf and integer weights refused, half precision loaded; deep JSON, configs over
1 MB, non-UTF-8, integers too long for Python; the bundled checkpoints load; hypothesis over any
config value and any weight bytes."""
import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vit.checkpoint as cp
from vit.checkpoint import (
    MAX_PARAMETERS,
    CheckpointError,
    implied_shapes,
    load_checkpoint,
    open_checkpoint,
    read_config,
    save_checkpoint,
    save_tensors,
)
from vit.model import ViT, ViTConfig

ROOT = Path(__file__).resolve().parent.parent
TINY = ViTConfig(dim=16, depth=2, heads=2, mlp_dim=32)
META = {"dataset": "mnist", "class_names": [str(i) for i in range(10)],
        "normalization": {"mean": 0.1307, "std": 0.3081}, "test_accuracy": 0.5,
        "training": {"epochs": 1}, "provenance": {"command": "python -m vit.train", "epochs": 1,
                                                  "seed": 0, "wall_time_seconds": 1.5}}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ck") / "ck"
    save_checkpoint(folder, ViT(TINY), META)
    return folder


@pytest.fixture
def ckpt(saved, tmp_path):
    """A fresh copy of a tiny valid checkpoint, for a test to spoil."""
    return Path(shutil.copytree(saved, tmp_path / "ck"))


def edit_config(folder: Path, change) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    change(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))


def refused(folder: Path, *words: str) -> str:
    """load_checkpoint fails with one line that names config.json or the weights and `words`."""
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(folder, "cpu")
    msg = str(e.value)
    assert "\n" not in msg and str(folder) in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


def put(*path, value):
    """A config change: set cfg[path...] = value."""
    def change(cfg):
        for k in path[:-1]:
            cfg = cfg[k]
        cfg[path[-1]] = value
    return change


def drop(*path):
    def change(cfg):
        for k in path[:-1]:
            cfg = cfg[k]
        del cfg[path[-1]]
    return change


BAD = {   # id: (change to config.json, words the message must contain)
    "class_names-not-a-list": (put("class_names", value=10), ["class_names"]),
    "class_names-too-few": (put("class_names", value=list("012345678")), ["class_names", "9"]),
    "class_names-empty-name": (put("class_names", value=list("012") + [" "] + list("456789")),
                               ["class_names[3]", "non-empty"]),
    "class_names-not-strings": (put("class_names", value=list(range(10))), ["class_names"]),
    "class_names-duplicate": (put("class_names", value=list("0123456780")), ["class_names", "'0'"]),
    "dim-float": (put("model", "dim", value=16.0), ["model.dim", "integer"]),
    "dim-bool": (put("model", "depth", value=True), ["model.depth", "integer"]),
    "dim-string": (put("model", "dim", value="16"), ["model.dim"]),
    "dropout-string": (put("model", "dropout", value="0.1"), ["model.dropout"]),
    "dropout-one": (put("model", "dropout", value=1.0), ["dropout"]),
    "depth-missing": (drop("model", "depth"), ["depth", "missing"]),
    "heads-not-dividing-dim": (put("model", "heads", value=3), ["heads", "dim"]),
    "heads-zero": (put("model", "heads", value=0), ["heads", "positive"]),       # was 1/0
    "patch_size-zero": (put("model", "patch_size", value=0), ["patch_size", "positive"]),
    "model-not-object": (put("model", value=[1, 2]), ["model"]),
    "image_size-huge": (put("model", "image_size", value=8192), ["model.image_size", "4096"]),
    "depth-huge": (put("model", "depth", value=100000), ["model.depth"]),
    "params-huge": (put("model", "dim", value=1 << 16), ["parameters"]),
    "normalization-not-object": (put("normalization", value="0.5"), ["normalization"]),
    "normalization-missing-std": (drop("normalization", "std"), ["normalization", "std"]),
    "normalization-extra-key": (put("normalization", "var", value=1), ["normalization", "var"]),
    "std-zero": (put("normalization", "std", value=0), ["normalization.std"]),
    "std-negative": (put("normalization", "std", value=[-0.3]), ["normalization.std"]),
    "std-nan": (put("normalization", "std", value=math.nan), ["normalization.std"]),
    "std-inf": (put("normalization", "std", value=math.inf), ["normalization.std"]),
    "mean-string": (put("normalization", "mean", value="a"), ["normalization.mean"]),
    "mean-wrong-length": (put("normalization", "mean", value=[0.1, 0.2, 0.3]),
                          ["normalization.mean", "3 values"]),
    "provenance-string": (put("provenance", value="hello"), ["provenance"]),
    "provenance-epochs": (put("provenance", "epochs", value="3"), ["provenance.epochs"]),
    "provenance-seed-float": (put("provenance", "seed", value=0.5), ["provenance.seed"]),
    "provenance-commit": (put("provenance", "commit", value=123), ["provenance.commit"]),
    "provenance-wall-time": (put("provenance", "wall_time_seconds", value="1h"),
                             ["provenance.wall_time_seconds"]),
    "test_accuracy-percent": (put("test_accuracy", value="99%"), ["test_accuracy"]),
    "test_accuracy-above-one": (put("test_accuracy", value=99.4), ["test_accuracy"]),
    "test_accuracy-nan": (put("test_accuracy", value=math.nan), ["test_accuracy"]),
    "num_parameters-negative": (put("num_parameters", value=-1), ["num_parameters"]),
    "num_parameters-float": (put("num_parameters", value=1.5), ["num_parameters"]),
    "training-list": (put("training", value=[]), ["training"]),
    "dataset-number": (put("dataset", value=5), ["dataset"]),
    "format-other": (put("format", value="vit-explorer/2"), ["format"]),
    "class_names-missing": (drop("class_names"), ["class_names"]),
    "faithfulness-list": (put("faithfulness", value=[]), ["faithfulness"]),
    "faithfulness-lead-unknown": (put("faithfulness", value={"lead": "gut feeling"}),
                                  ["faithfulness.lead"]),
    "faithfulness-deletion-above-one": (put("faithfulness", value={"deletion": {"rollout": 3}}),
                                        ["faithfulness.deletion"]),
    # Found by attacking the app: accepted before, then NaN answers or crashes in the app.
    "std-tiny": (put("normalization", "std", value=1e-300), ["normalization.std", "between"]),
    "mean-huge": (put("normalization", "mean", value=-1e300), ["normalization.mean", "between"]),
    "one-class": (lambda c: (put("model", "num_classes", value=1)(c), put("class_names", value=["0"])(c)),
                  ["num_classes", "at least 2"]),
    "size-not-the-datasets": (put("model", "image_size", value=56), ["model.image_size", "mnist has 28"]),
    "classes-not-the-datasets": (lambda c: (put("model", "num_classes", value=3)(c),
                                            put("class_names", value=list("abc"))(c)),
                                 ["model.num_classes", "mnist has 10"]),
}


@pytest.mark.parametrize("change,words", BAD.values(), ids=BAD.keys())
def test_bad_config_is_one_line_naming_the_field(ckpt, change, words):
    edit_config(ckpt, change)
    msg = refused(ckpt, *words)
    assert "config.json" in msg


def test_optional_fields_may_be_absent_or_null(ckpt):
    def change(cfg):
        for k in ("format", "dataset", "num_parameters", "training", "provenance"):
            del cfg[k]
        cfg["test_accuracy"] = None
    edit_config(ckpt, change)
    cfg = open_checkpoint(ckpt, "cpu").config
    assert (cfg.dataset, cfg.test_accuracy, cfg.training, cfg.provenance) == (None, None, {}, {})


def refuse_real_models(monkeypatch):
    """From here on a ViT may only be built on the meta device (no storage): what the loader
    must do until it has checked the config against the weights file's header."""
    real = ViT

    def guarded(cfg):
        assert torch.get_default_device().type == "meta", f"built a real ViT with dim {cfg.dim}"
        return real(cfg)

    monkeypatch.setattr(cp, "ViT", guarded)


def test_config_larger_than_its_weights_fails_before_building_the_model(ckpt, monkeypatch):
    # dim 4096 is 134 M parameters (537 MB) that the 16-wide weights file does not hold: the
    # header check must refuse it before any real model is built.
    edit_config(ckpt, lambda c: c["model"].update(dim=4096, mlp_dim=4096))
    refuse_real_models(monkeypatch)
    refused(ckpt, "cls_token", "(1, 1, 16)", "(1, 1, 4096)")


def test_absurd_model_size_is_refused_from_the_config_alone(monkeypatch, tmp_path):
    # The bundled MNIST config with dim 16384 once allocated 6.9 GB before failing.
    folder = Path(shutil.copytree(ROOT / "checkpoints" / "mnist", tmp_path / "ck",
                                  ignore=shutil.ignore_patterns("best", "*.png", "*.csv")))
    edit_config(folder, put("model", "dim", value=16384))
    refuse_real_models(monkeypatch)
    refused(folder, "parameters", f"{MAX_PARAMETERS:,}")


def test_limits_are_checked_against_the_real_model(monkeypatch):
    """The parameter limit counts what a real model of the config holds (every weight, bias and
    norm, built here on the CPU), not an estimate: at the real count it passes, one below it is
    refused, with the count."""
    real = sum(v.numel() for v in ViT(TINY).state_dict().values())
    monkeypatch.setattr(cp, "MAX_PARAMETERS", real)
    cp.check_model_size(TINY, "config.json")
    monkeypatch.setattr(cp, "MAX_PARAMETERS", real - 1)
    with pytest.raises(CheckpointError, match=f"implies {real:,} parameters"):
        cp.check_model_size(TINY, "config.json")
    assert implied_shapes(TINY) == {k: tuple(v.shape) for k, v in ViT(TINY).state_dict().items()}


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_weights_are_refused(ckpt, value):
    weights = ViT(TINY).state_dict()
    weights["blocks.1.mlp.0.weight"][3, 4] = value
    save_tensors(ckpt / "model.safetensors", weights)
    refused(ckpt, "blocks.1.mlp.0.weight", "NaN or infinite")


def test_integer_weights_are_refused(ckpt):
    weights = ViT(TINY).state_dict()
    weights["head.bias"] = torch.zeros(10, dtype=torch.int64)
    save_tensors(ckpt / "model.safetensors", weights)
    refused(ckpt, "head.bias", "I64")


def test_half_precision_weights_load(ckpt):
    weights = {k: v.half() for k, v in ViT(TINY).state_dict().items()}
    save_tensors(ckpt / "model.safetensors", weights)
    assert load_checkpoint(ckpt, "cpu").head.weight.dtype == torch.float32


def test_deeply_nested_json(ckpt):
    (ckpt / "config.json").write_text("[" * 100_000)
    refused(ckpt, "config.json", "nested too deeply")


def test_config_over_1_mb_is_refused_unread(ckpt, monkeypatch):
    edit_config(ckpt, put("training", "note", value="x" * (1 << 20)))   # valid, but 1 MB
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read a huge config"))
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: pytest.fail("read a huge config"))
    with pytest.raises(CheckpointError, match=r"config.json: [\d,]+ bytes, more than") as e:
        read_config(ckpt)
    assert "\n" not in str(e.value)


def test_config_not_utf8(ckpt):
    (ckpt / "config.json").write_bytes(b'{"model": "\xff\xfe"}')
    refused(ckpt, "config.json", "not UTF-8")


def test_integer_too_long_for_python(ckpt):
    text = (ckpt / "config.json").read_text().replace('"dim": 16', '"dim": 1' + "0" * 5000)
    (ckpt / "config.json").write_text(text)
    refused(ckpt, "config.json", "not valid JSON")


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_bundled_checkpoints_load(name):
    folder = ROOT / "checkpoints" / name
    raw = json.loads((folder / "config.json").read_text())
    assert isinstance(raw["normalization"]["mean"], list)     # per channel, as the trainer writes
    ck = open_checkpoint(folder, "cpu")
    assert len(ck.class_names) == 10 and ck.class_names == raw["class_names"]
    assert ck.config.mean == tuple(raw["normalization"]["mean"])
    assert ck.config.std == tuple(raw["normalization"]["std"])
    assert ck.config.temperature == raw["calibration"]["temperature"] != 1.0
    assert ck.config.dataset == name and ck.config.num_parameters == ck.model.num_parameters()
    assert ck.config.spec.name == name and not ck.model.training
    assert (ck.config.style.name, ck.config.title) == {
        "mnist": ("digits", "MNIST"), "fashion-mnist": ("objects", "Fashion-MNIST")}[name]


@pytest.mark.parametrize("norm", [{"mean": 0.5, "std": 0.25},
                                  {"mean": [0.5, 0.4, 0.3], "std": [0.25, 0.2, 0.2]}])
def test_save_writes_per_channel_lists(tmp_path, norm):
    model = ViT(ViTConfig(channels=3, dim=16, depth=1, heads=2, mlp_dim=32, num_classes=2))
    save_checkpoint(tmp_path, model, {"class_names": ["cat", "dog"], "normalization": norm,
                                      "dataset": "pets"})
    written = json.loads((tmp_path / "config.json").read_text())["normalization"]
    assert all(isinstance(written[k], list) and len(written[k]) == 3 for k in ("mean", "std"))
    ck = open_checkpoint(tmp_path, "cpu")
    assert len(ck.config.mean) == 3 and ck.config.std[0] == 0.25
    # A data set this code does not know: 3 channels read as photos (the CIFAR-10 examples).
    assert (ck.config.spec, ck.config.style.name, ck.config.noun, ck.config.title) == (
        None, "photos", "image", "pets")


def test_save_refuses_a_config_it_could_not_read_back(tmp_path):
    with pytest.raises(CheckpointError, match="class_names has 3 names"):
        save_checkpoint(tmp_path / "ck", ViT(TINY), {**META, "class_names": ["a", "b", "c"]})
    with pytest.raises(CheckpointError, match="unknown config key.*colour"):
        save_checkpoint(tmp_path / "ck", ViT(TINY), {**META, "colour": "blue"})
    assert not (tmp_path / "ck").exists()


# --- fuzzing: no value anywhere in config.json, and no bytes in model.safetensors, crash it ---

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
FIELDS = [("class_names",), ("normalization",), ("normalization", "mean"), ("normalization", "std"),
          ("provenance",), ("provenance", "seed"), ("test_accuracy",), ("num_parameters",),
          ("training",), ("dataset",), ("format",), ("model",)] + [
          ("model", f) for f in ("image_size", "channels", "patch_size", "stem_channels", "dim",
                                 "depth", "heads", "mlp_dim", "dropout", "num_classes")]


def load_or_refuse(folder: Path) -> None:
    try:
        load_checkpoint(folder, "cpu")
    except CheckpointError as e:
        assert "\n" not in str(e)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(FIELDS), value=JSON | st.integers(-2, 70))
def test_any_config_value_loads_or_is_refused(saved, path, value):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(shutil.copytree(saved, Path(tmp) / "ck"))
        edit_config(folder, put(*path, value=value))
        load_or_refuse(folder)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 20_000), junk=st.binary(max_size=64))
def test_any_weights_bytes_load_or_are_refused(saved, cut, junk):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(shutil.copytree(saved, Path(tmp) / "ck"))
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[:cut] + junk + data[cut + len(junk):])
        load_or_refuse(folder)


def test_the_measured_lead_map_is_read_and_an_unmeasured_model_leads_with_relevance(ckpt):
    from vit.explain.faithful import lead_map
    assert lead_map(read_config(ckpt)) == "relevance"
    edit_config(ckpt, put("faithfulness", value={"lead": "occlusion",
                                                 "deletion": {"occlusion": 0.13, "rollout": 0.17}}))
    assert lead_map(read_config(ckpt)) == "occlusion"
    assert read_config(ckpt).to_dict()["faithfulness"]["lead"] == "occlusion"
