"""Checkpoint I/O: a folder in the Hugging Face layout, `model.safetensors` + `config.json`.

Weights are tensors in safetensors (never a pickle, so loading can't run code); everything else is
JSON. Every write goes to a temporary file that is renamed over the target, so killing the trainer
at any moment leaves either the old file or the new one, never half of one.

Reading is defensive: a checkpoint may come from anywhere, so config.json is parsed into a typed,
validated `CheckpointConfig`, and the weights file's header is compared with the shapes that config
implies before any real tensor is allocated. Every failure is a one-line `CheckpointError` that
names the file and the field.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from vit.data.specs import DatasetSpec, builtin_spec
from vit.device import pick_device
from vit.explain.calibration import TEMPERATURE_RANGE
from vit.explain.faithful import check as check_faithfulness
from vit.explain.typical import TYPICAL_FILE, Typical, from_tensors
from vit.hub import CARD, HubError, model_card, resolve
from vit.model import ViT, ViTConfig
from vit.preprocessing.styles import DIGITS, PHOTOS, Style
from vit.storage import StorageError, load_tensors, save_json, save_tensors, save_text

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT = "vit-explorer/1"
# Top-level keys a config.json may carry; anything else is a typo or a different format.
CONFIG_KEYS = {"format", "model", "dataset", "class_names", "normalization", "test_accuracy",
               "num_parameters", "training", "provenance", "calibration", "faithfulness"}
REQUIRED_KEYS = {"model", "class_names", "normalization"}
# Limits that stop a hostile or mistyped config from making us allocate (or even plan) a huge
# model. Far above anything this project trains (~0.2 M parameters), far below a crash.
MAX_CONFIG_BYTES = 1 << 20
MAX_IMAGE_SIZE = 4096
MAX_DEPTH = 256              # the meta-device model below is built block by block
MAX_WIDTH = 1 << 20          # any other integer field; keeps shape products well inside int64
MAX_PARAMETERS = 400_000_000    # ViT-L/16 has 304 M; 400 M float32 = 1.6 GB
MAX_TOKENS = 4097               # a 64x64 grid + [CLS]; ViT-B/16 at 384 px has 577
# The app keeps every layer's and head's [CLS]-and-patch attention of one input (depth x heads x
# tokens² floats): 65,537 tokens asked for 17 GB per head. ViT-L/16 at 224 px needs 38 MB.
MAX_ATTENTION_BYTES = 1 << 30
# What the page's largest explanation of one input holds beyond the weights (`explanation_bytes`):
# a model inside every other limit (4,097 tokens, maps 0.94 GB) took the server to 19 GB.
MAX_EXPLANATION_BYTES = 2 << 30
MAX_HEADS = 64                  # the pictures draw every head of a layer side by side
MAX_CLASS_NAME = 200            # characters; ImageNet's longest is 91
FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}
# Model fields added after checkpoints were first written, with the value their absence means.
LATER_MODEL_KEYS = {"stem_layers": 1, "norm_eps": 1e-5}
# provenance keys this code writes, and their types; other keys pass through untouched.
PROVENANCE_TYPES = {"command": "a string", "commit": "a string", "date": "a string",
                    "device": "a string", "torch": "a string", "epochs": "an integer",
                    "seed": "an integer", "wall_time_seconds": "a number"}
_CHECKS = {"a string": lambda v: isinstance(v, str), "an integer": lambda v: _is_int(v),
           "a number": lambda v: _is_number(v)}


class CheckpointError(ValueError):
    """A checkpoint folder can't be loaded; the message is one line that names the problem."""


@dataclass(frozen=True)
class CheckpointConfig:
    """config.json, validated: every field has the type and range the rest of the code assumes."""
    model: ViTConfig
    class_names: tuple[str, ...]
    mean: tuple[float, ...]           # per channel; config.json may hold one number for all
    std: tuple[float, ...]
    dataset: str | None = None
    test_accuracy: float | None = None
    num_parameters: int | None = None
    training: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    # {"temperature": T, "reject_below": p, ...}: fitted on the validation split (vit/explain/calibration.py)
    calibration: dict = field(default_factory=dict)
    # {"lead": map, "deletion": {map: mean P}, ...}: measured on the validation split
    # (vit/explain/faithful.py); the map the page leads with
    faithfulness: dict = field(default_factory=dict)

    @property
    def temperature(self) -> float:
        """Logits are divided by this before any probability is shown (1: not calibrated)."""
        return float(self.calibration.get("temperature", 1.0))

    @property
    def reject_below(self) -> float | None:
        """A calibrated top probability below this means "not one of these classes" (None: the
        model has no fitted threshold)."""
        v = self.calibration.get("reject_below")
        return None if v is None else float(v)

    @property
    def far_above(self) -> float | None:
        """A [CLS] token farther than this from every class (vit/explain/typical.py) means "not
        one of these classes" (None: no such threshold; the checkpoint has no typical.safetensors)."""
        v = self.calibration.get("far_above")
        return None if v is None else float(v)

    @property
    def digit_check(self) -> dict | None:
        """{"model": a sibling checkpoint folder's name, "digit_at_least": p, "own_below": q}: a
        picture this model is unsure of (best class below q) that that digit model reads as a digit
        at p or more is "not one of these" (vit/digit_check.py; None: no such check)."""
        return self.calibration.get("digit_check")

    @property
    def spec(self) -> DatasetSpec | None:
        return builtin_spec(self.dataset)

    @property
    def style(self) -> Style:
        """How its data set's pictures were made; for an unknown data set, digits when grey and
        photos when colour."""
        spec = self.spec
        return spec.style if spec else (DIGITS if self.model.channels == 1 else PHOTOS)

    @property
    def noun(self) -> str:
        spec = self.spec
        return spec.noun if spec else "image"

    @property
    def title(self) -> str:
        spec = self.spec
        return spec.title if spec else (self.dataset or "custom")

    @property
    def friendly_title(self) -> str:
        spec = self.spec
        return f"{spec.subject} ({spec.title})" if spec else self.title

    def to_dict(self) -> dict:
        """The config.json form (normalisation always as per-channel lists)."""
        out = {"format": FORMAT, "model": self.model.to_dict()}
        if self.num_parameters is not None:
            out["num_parameters"] = self.num_parameters
        if self.dataset is not None:
            out["dataset"] = self.dataset
        out["class_names"] = list(self.class_names)
        out["normalization"] = {"mean": list(self.mean), "std": list(self.std)}
        if self.test_accuracy is not None:
            out["test_accuracy"] = self.test_accuracy
        out["training"] = self.training
        out["provenance"] = self.provenance
        if self.calibration:
            out["calibration"] = self.calibration
        if self.faithfulness:
            out["faithfulness"] = self.faithfulness
        return out


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode, on its device), where it came from, its config."""
    model: ViT
    folder: Path
    config: CheckpointConfig
    typical: Typical | None = None     # where the training images' [CLS] tokens lie (far_above)

    @property
    def class_names(self) -> list[str]:
        return list(self.config.class_names)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def save_checkpoint(folder, model: ViT, meta: dict) -> None:
    """Write the model's weights and `meta` (everything but "model", which comes from the model).

    The config is validated first, so a checkpoint that could not be read back is never written.
    Weights first, then config: a reader never sees a config that describes weights not yet there.
    """
    folder = Path(folder)
    config = parse_config({"format": FORMAT, "model": model.cfg.to_dict(),
                           "num_parameters": model.num_parameters(), **meta}, str(folder / CONFIG))
    save_tensors(folder / WEIGHTS, model.state_dict(), metadata={"format": FORMAT})
    if config.far_above is None:             # fitted to other weights: vit.fit_typical fits anew
        (folder / TYPICAL_FILE).unlink(missing_ok=True)
    save_json(folder / CONFIG, config.to_dict())
    save_text(folder / CARD, model_card(config.to_dict()))


# --- validation helpers: each returns the checked value or raises a one-line CheckpointError ---

def _line(e: BaseException) -> str:
    """An exception's message on one line (library messages sometimes span several)."""
    return " ".join(str(e).split())


def _show(v) -> str:
    """A value for a message: short, one line, and never a huge or deeply nested repr."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, (list, tuple)):
        return f"a list of {len(v)}"
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)     # JSON true is not 1


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Pixels are read in [0, 1]: a channel's mean lies there and its spread is a fraction of it.
# Outside these bounds the normalised input is absurd (std 1e-300 turned every answer into NaN).
MEAN_RANGE, STD_RANGE = (-1.0, 2.0), (1e-3, 10.0)


def _per_channel(v, name: str, channels: int, where: str, positive: bool) -> tuple[float, ...]:
    """normalization.mean/std: one number for every channel, or a list of one per channel."""
    values = [v] * channels if _is_number(v) else v
    if not isinstance(values, (list, tuple)) or not all(_is_number(x) for x in values):
        raise CheckpointError(f"{where}: normalization.{name} must be a number or a list of "
                              f"numbers, got {_show(v)}")
    if len(values) != channels:
        raise CheckpointError(f"{where}: normalization.{name} has {len(values)} values for "
                              f"{channels} channel(s)")
    lo, hi = STD_RANGE if positive else MEAN_RANGE
    for x in values:
        if not (math.isfinite(x) and lo <= x <= hi):
            raise CheckpointError(f"{where}: normalization.{name} must be between {lo:g} and "
                                  f"{hi:g} (pixels are read in [0, 1]), got {_show(x)}")
    return tuple(float(x) for x in values)


def _model_config(obj, where: str) -> ViTConfig:
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where}: \"model\" must be an object, got {_show(obj)}")
    types = {f.name: f.type for f in fields(ViTConfig)}
    unknown = sorted(set(obj) - set(types))
    if unknown:
        raise CheckpointError(f"{where}: unknown model config key(s) "
                              f"{', '.join(_show(k) for k in unknown[:5])}")
    # Every field is required: a default filled in silently would describe other weights. The one
    # exception is a field added later whose absence means what every earlier checkpoint was.
    obj = {**{k: v for k, v in LATER_MODEL_KEYS.items() if k not in obj}, **obj}
    missing = [k for k in types if k not in obj]
    if missing:
        raise CheckpointError(f"{where}: missing model config key(s) {', '.join(missing)}")
    for k, v in obj.items():
        if types[k] in (float, "float"):
            if not _is_number(v):
                raise CheckpointError(f"{where}: model.{k} must be a number, got {_show(v)}")
        elif not _is_int(v):     # 64.0 would reach nn.Linear and fail there, or worse
            raise CheckpointError(f"{where}: model.{k} must be an integer, got {_show(v)}")
    try:
        cfg = ViTConfig(**{k: float(v) if types[k] in (float, "float") else v
                           for k, v in obj.items()})
    except ValueError as e:
        raise CheckpointError(f"{where}: invalid model config ({_line(e)})") from None
    check_model_size(cfg, where)
    return cfg


def check_model_size(cfg: ViTConfig, where: str) -> None:
    """The limits above, before anything of the model is allocated: each field, the tokens,
    the attention maps kept per image, the parameters. CheckpointError with one line. (The
    trainer checks the model its flags describe with the same limits.)"""
    for k in (f.name for f in fields(ViTConfig)):
        limit = {"image_size": MAX_IMAGE_SIZE, "depth": MAX_DEPTH}.get(k, MAX_WIDTH)
        if _is_int(getattr(cfg, k)) and getattr(cfg, k) > limit:
            raise CheckpointError(f"{where}: model.{k} is {_show(getattr(cfg, k))}, above this "
                                  f"loader's limit of {limit}")
    tokens = cfg.num_patches + 1 if cfg.image_size >= cfg.patch_size > 0 else 0
    if tokens > MAX_TOKENS:
        raise CheckpointError(f"{where}: model config makes {tokens:,} tokens ({cfg.image_size} px "
                              f"in {cfg.patch_size}-px patches), above this loader's limit of "
                              f"{MAX_TOKENS:,}")
    attention = 4 * cfg.depth * cfg.heads * tokens ** 2
    if attention > MAX_ATTENTION_BYTES:
        raise CheckpointError(f"{where}: model config's attention maps take {attention / 1e9:.1f} GB "
                              f"per image ({cfg.depth} layers x {cfg.heads} heads x {tokens:,}² "
                              f"tokens), above this loader's limit of "
                              f"{MAX_ATTENTION_BYTES / 1e9:.1f} GB")
    n = sum(math.prod(s) for s in implied_shapes(cfg).values())
    if n > MAX_PARAMETERS:
        raise CheckpointError(f"{where}: model config implies {n:,} parameters, above this "
                              f"loader's limit of {MAX_PARAMETERS:,}")
    if _is_int(cfg.heads) and cfg.heads > MAX_HEADS:
        raise CheckpointError(f"{where}: model.heads is {cfg.heads}, above this loader's limit "
                              f"of {MAX_HEADS}")
    need = explanation_bytes(cfg, n)
    if need > MAX_EXPLANATION_BYTES:
        raise CheckpointError(f"{where}: explaining one answer of this model would take "
                              f"{need / 1e9:.1f} GB ({cfg.depth} layers x {cfg.heads} heads x "
                              f"{tokens:,}² tokens), above this loader's limit of "
                              f"{MAX_EXPLANATION_BYTES / 1e9:.1f} GB")


def explanation_bytes(cfg: ViTConfig, parameters: int) -> int:
    """About the most memory beyond the weights that one explanation of one input holds, the
    largest of those the page runs. Relevance keeps every layer's attention maps, their gradients
    and softmax's saved output (3x the maps), every activation and its gradient, and its rollout
    in float64 (three tokens² matrices); the scoreboard runs it again on a randomised copy of the
    upper half's weights. The logit lens holds every layer's tokens' class probabilities.
    Batches of many images (occlusion, deletion curves, the test set) are cut to vit/model.py's
    BATCH_BYTES, so they do not multiply this. (Measured: relevance of a 4,097-token model,
    1.18 GB against 1.21 estimated; docs/hosting.md.)"""
    tokens = cfg.num_patches + 1
    maps = 4 * cfg.depth * cfg.heads * tokens ** 2
    layers = 4 * cfg.depth * tokens * (cfg.mlp_dim + 4 * cfg.dim)
    stem = 4 * cfg.image_size ** 2 * max(cfg.stem_channels, cfg.channels) * (cfg.stem_layers + 1)
    relevance = 3 * maps + 3 * 8 * tokens ** 2 + 2 * (layers + stem)
    lens = 3 * 4 * cfg.depth * tokens * cfg.num_classes
    return max(relevance + 4 * parameters // 2, lens)


def _check_against_spec(model: ViTConfig, spec: DatasetSpec | None, where: str) -> None:
    """A model that names a known data set must take that data set's images and classes: its
    test set (the app's Test set tab, vit.evaluate) is fed to it as they are."""
    if spec is None:
        return
    for key, want in (("image_size", spec.image_size), ("channels", spec.channels),
                      ("num_classes", spec.num_classes)):
        if getattr(model, key) != want:
            raise CheckpointError(f"{where}: model.{key} is {getattr(model, key)}, but "
                                  f"{spec.name} has {want}")


def implied_shapes(cfg: ViTConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor a ViT of `cfg` has, without allocating any: the model is
    built on the meta device, where tensors have shapes but no storage."""
    with torch.device("meta"):
        model = ViT(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def parse_config(obj, where: str) -> CheckpointConfig:
    """A config.json object -> CheckpointConfig; `where` (the file) starts every message."""
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where}: expected a JSON object, got {_show(obj)}")
    unknown = sorted(set(obj) - CONFIG_KEYS)
    if unknown:
        raise CheckpointError(f"{where}: unknown config key(s) {', '.join(unknown)}")
    missing = sorted(REQUIRED_KEYS - set(obj))
    if missing:
        raise CheckpointError(f"{where}: missing config key(s) {', '.join(missing)}")
    if "format" in obj and obj["format"] != FORMAT:
        raise CheckpointError(f"{where}: format is {_show(obj['format'])}, this code reads "
                              f"{FORMAT!r}")
    model = _model_config(obj["model"], where)
    names = _class_names(obj["class_names"], model, where)
    mean, std = _normalization(obj["normalization"], model, where)
    dataset = obj.get("dataset")
    if dataset is not None and not isinstance(dataset, str):
        raise CheckpointError(f"{where}: dataset must be a string, got {_show(dataset)}")
    _check_against_spec(model, builtin_spec(dataset), where)
    acc = obj.get("test_accuracy")
    if acc is not None and not (_is_number(acc) and 0 <= acc <= 1):
        raise CheckpointError(f"{where}: test_accuracy must be a number in [0, 1], "
                              f"got {_show(acc)}")
    n_params = obj.get("num_parameters")
    if n_params is not None and not (_is_int(n_params) and n_params >= 0):
        raise CheckpointError(f"{where}: num_parameters must be an integer >= 0, "
                              f"got {_show(n_params)}")
    for key in ("training", "provenance", "calibration"):
        if not isinstance(obj.get(key, {}), dict):
            raise CheckpointError(f"{where}: {key} must be an object, got {_show(obj[key])}")
    provenance = obj.get("provenance", {})
    for key, kind in PROVENANCE_TYPES.items():
        v = provenance.get(key)
        if v is not None and not _CHECKS[kind](v):   # null: not known (a resumed run's command)
            raise CheckpointError(f"{where}: provenance.{key} must be {kind}, got {_show(v)}")
    calibration = _calibration(obj.get("calibration", {}), where)
    faithful = obj.get("faithfulness", {})
    problem = check_faithfulness(faithful, where)
    if problem:
        raise CheckpointError(problem)
    return CheckpointConfig(model=model, class_names=tuple(names), mean=mean, std=std,
                            dataset=dataset, test_accuracy=None if acc is None else float(acc),
                            num_parameters=n_params, training=dict(obj.get("training", {})),
                            provenance=dict(provenance), calibration=dict(calibration),
                            faithfulness=dict(faithful))


def _class_names(names, model: ViTConfig, where: str) -> list:
    """config.json's class_names: one short, non-empty, distinct string per class."""
    if not isinstance(names, (list, tuple)):
        raise CheckpointError(f"{where}: class_names must be a list of non-empty strings, "
                              f"got {_show(names)}")
    for i, n in enumerate(names):
        if not (isinstance(n, str) and n.strip()):
            raise CheckpointError(f"{where}: class_names[{i}] must be a non-empty string, "
                                  f"got {_show(n)}")
        # A name is drawn in pictures and written in every answer: a 90 KB one held a worker
        # for minutes. (Line breaks are drawn as spaces.)
        if len(n) > MAX_CLASS_NAME:
            raise CheckpointError(f"{where}: class_names[{i}] must be at most {MAX_CLASS_NAME} "
                                  f"characters, got {_show(n)}")
    if len(names) != model.num_classes:
        raise CheckpointError(f"{where}: class_names has {len(names)} names for "
                              f"model.num_classes {model.num_classes}")
    if model.num_classes < 2:
        raise CheckpointError(f"{where}: model.num_classes must be at least 2: a classifier "
                              f"needs two classes to choose between")
    seen = set()
    for n in names:       # a set, not names.count(): a 1 MB list of names must stay cheap
        if n in seen:
            raise CheckpointError(f"{where}: class_names has {_show(n)} twice")
        seen.add(n)
    return names


def _normalization(norm, model: ViTConfig, where: str) -> tuple:
    """config.json's normalization: {"mean": [...], "std": [...]}, one number per channel."""
    if not isinstance(norm, dict):
        raise CheckpointError(f"{where}: normalization must be an object with mean and std, "
                              f"got {_show(norm)}")
    for problem, keys in (("is missing", {"mean", "std"} - set(norm)),
                          ("has unknown key(s)", set(norm) - {"mean", "std"})):
        if keys:
            raise CheckpointError(f"{where}: normalization {problem} "
                                  f"{', '.join(map(str, sorted(keys)))}")
    return (_per_channel(norm["mean"], "mean", model.channels, where, positive=False),
            _per_channel(norm["std"], "std", model.channels, where, positive=True))


def _calibration(calibration: dict, where: str) -> dict:
    """config.json's calibration: a temperature in range, a rejection threshold in [0, 1], a
    positive distance beyond which an input is far from the training data."""
    t = calibration.get("temperature")
    lo, hi = TEMPERATURE_RANGE
    if t is not None and not (_is_number(t) and math.isfinite(t) and lo <= t <= hi):
        raise CheckpointError(f"{where}: calibration.temperature must be a number between {lo:g} "
                              f"and {hi:g}, got {_show(t)}")
    r = calibration.get("reject_below")
    if r is not None and not (_is_number(r) and 0 <= r <= 1):
        raise CheckpointError(f"{where}: calibration.reject_below must be a number in [0, 1], "
                              f"got {_show(r)}")
    far = calibration.get("far_above")
    if far is not None and not (_is_number(far) and math.isfinite(far) and far > 0):
        raise CheckpointError(f"{where}: calibration.far_above must be a number > 0, "
                              f"got {_show(far)}")
    check = calibration.get("digit_check")
    if check is not None:
        _digit_check(check, f"{where}: calibration.digit_check")
    return calibration


def _digit_check(check, where: str) -> None:
    """A digit check names a sibling folder (a plain name: never a path) and two probabilities."""
    if not isinstance(check, dict):
        raise CheckpointError(f"{where} must be an object, got {_show(check)}")
    name = check.get("model")
    if not (isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name)
            and ".." not in name):
        raise CheckpointError(f"{where}.model must be a checkpoint folder's name beside this one "
                              f"(letters, digits, '-', '_', '.'), got {_show(name)}")
    for key in ("digit_at_least", "own_below"):
        v = check.get(key)
        if not (_is_number(v) and 0 < v <= 1):
            raise CheckpointError(f"{where}.{key} must be a number in (0, 1], got {_show(v)}")


def checkpoint_folder(name) -> Path:
    """A checkpoint folder, or a Hub model ("hf://user/repo": vit/hub.py) -> the folder of its
    files. A plain "a/b" is a local path, never looked up on the Hub."""
    try:
        return resolve(name)
    except HubError as e:
        raise CheckpointError(str(e)) from None


def read_config(folder) -> CheckpointConfig:
    """config.json of a checkpoint folder (or hf://user/repo), read and validated."""
    folder = checkpoint_folder(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    path = folder / CONFIG
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found (a checkpoint needs {CONFIG} and {WEIGHTS})")
    try:
        # A config is a few kB: refuse a huge one before reading it into memory.
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise CheckpointError(f"{path}: {size:,} bytes, more than a config.json may have "
                                  f"({MAX_CONFIG_BYTES:,})")
        config = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:          # unreadable (permissions, I/O): the app starts without it
        raise CheckpointError(f"{path}: can't be read ({e.strerror or type(e).__name__})") from None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text ({_line(e)})") from None
    except ValueError as e:       # bad JSON, or an integer of more than 4300 digits
        raise CheckpointError(f"{path}: not valid JSON ({_line(e)})") from None
    except RecursionError:        # json's parser recurses once per nested [ or {
        raise CheckpointError(f"{path}: not valid JSON (nested too deeply)") from None
    return parse_config(config, str(path))


def check_weights(folder, config: CheckpointConfig) -> None:
    """Compare model.safetensors' header (names, shapes, dtypes) with the tensors `config`
    implies, reading no tensor data: a config that does not match the weights is refused before
    a model of its size is built."""
    folder = Path(folder)
    path = folder / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    size, largest = path.stat().st_size, 8 * MAX_PARAMETERS + MAX_CONFIG_BYTES  # float64 + header
    if size > largest:
        raise CheckpointError(f"{path}: {size / 1e9:.1f} GB, more than weights within this "
                              f"loader's limit of {MAX_PARAMETERS:,} parameters can take")
    try:   # safe_open parses and checks the header only; the data stays on disk
        with safe_open(str(path), framework="pt") as f:
            slices = {name: f.get_slice(name) for name in f.keys()}
            header = {name: (tuple(s.get_shape()), s.get_dtype()) for name, s in slices.items()}
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file ({_line(e)})") from None
    prefix = f"{folder}: config.json does not match the weights"
    expected = implied_shapes(config.model)
    for name, shape in expected.items():
        if name not in header:
            raise CheckpointError(f"{prefix}: tensor {name} (shape {shape}) is missing from {WEIGHTS}")
        if header[name][0] != shape:
            raise CheckpointError(f"{prefix}: {name} has shape {header[name][0]} in {WEIGHTS} "
                                  f"but the config implies {shape}")
        if header[name][1] not in FLOAT_DTYPES:
            raise CheckpointError(f"{path}: {name} has dtype {header[name][1]}, not a "
                                  f"floating-point type")
    extra = sorted(set(header) - set(expected))
    if extra:
        raise CheckpointError(f"{prefix}: unexpected tensor {extra[0]} in {WEIGHTS}")




def open_checkpoint(folder, device=None) -> Checkpoint:
    """Load a checkpoint folder: config validated, weights checked against it (header first,
    then values), model in eval mode on `device`. `folder` may be a Hub model ("hf://user/repo"): see
    vit/hub.py. Raises CheckpointError with a one-line message."""
    folder = checkpoint_folder(folder)
    config = read_config(folder)
    check_weights(folder, config)
    try:
        weights = load_tensors(folder / WEIGHTS)
    except StorageError as e:
        raise CheckpointError(str(e)) from None
    for name, tensor in weights.items():
        # NaN/Inf weights (a diverged run) would give NaN answers that look like a UI bug.
        if not torch.isfinite(tensor).all():
            raise CheckpointError(f"{folder / WEIGHTS}: tensor {name} has NaN or infinite values")
        if tensor.dtype != torch.float32:
            weights[name] = tensor.float()
    # Built without storage, then given the loaded tensors themselves: the weights are in memory
    # once, not three times (file, a randomly initialised model, the copy into it).
    with torch.device("meta"):
        model = ViT(config.model)
    try:
        model.load_state_dict(weights, assign=True)
    except RuntimeError as e:     # only if the file changed since check_weights read its header
        raise CheckpointError(f"{folder / WEIGHTS}: {_line(e)}") from None
    device = device if isinstance(device, torch.device) else pick_device(device)
    model = model.to(device).eval()
    check_answers_finite(model, folder / WEIGHTS)
    model.checkpoint_config = config           # what save_pretrained writes back
    return Checkpoint(model=model, folder=folder, config=config, typical=read_typical(folder, config))


def read_typical(folder: Path, config: CheckpointConfig) -> Typical | None:
    """The checkpoint's typical.safetensors, checked against its config; None when the config
    has no `calibration.far_above`. Raises CheckpointError."""
    if config.far_above is None:
        return None
    path = folder / TYPICAL_FILE
    if not path.is_file():
        raise CheckpointError(f"{folder / CONFIG}: calibration.far_above is set but {TYPICAL_FILE} "
                              f"is missing")
    try:
        c, d = config.model.num_classes, config.model.dim
        # Shapes checked in the header, before a byte of the tensors is read or converted.
        tensors = load_tensors(path, shapes={"means": (c, d), "precision": (d, d)},
                               most_bytes=8 * (c * d + d * d) + 1_000_000)
        return from_tensors(tensors, c, d, str(path))
    except StorageError as e:
        raise CheckpointError(str(e)) from None
    except ValueError as e:
        raise CheckpointError(_line(e)) from None


def check_answers_finite(model: ViT, where) -> None:
    """Finite weights can still overflow (weights x 1e30): the model's logits for a blank input
    must be numbers, or the page would show "9 (nan %)"."""
    cfg = model.cfg
    blank = torch.zeros(1, cfg.channels, cfg.image_size, cfg.image_size,
                        device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(blank)
    if not torch.isfinite(logits).all():
        raise CheckpointError(f"{where}: the weights overflow: the model answers NaN or infinity "
                              f"for a blank image")


def load_checkpoint(folder, device=None) -> ViT:
    """Load a checkpoint folder -> ViT in eval mode on `device` (see open_checkpoint, which also
    gives the config and class names)."""
    return open_checkpoint(folder, device).model


def from_pretrained(name_or_path, *, revision=None, cache_dir=None, local_files_only: bool = False,
                    token=None, map_location: str = "cpu") -> ViT:
    """A checkpoint folder or a Hub model ("hf://user/repo", from the Hub cache or fetched there:
    vit/hub.py) -> the model, validated like any checkpoint, in eval mode. Raises
    CheckpointError."""
    try:
        folder = resolve(str(name_or_path), revision, cache_dir, token, local_files_only)
    except HubError as e:
        raise CheckpointError(str(e)) from None
    return open_checkpoint(folder, map_location).model


def save_pretrained(model: ViT, folder) -> None:
    """A loaded model back to a checkpoint folder (config.json, model.safetensors, the model
    card), with the class names and normalisation it was loaded with; `vit.hub.push_to_hub`
    then uploads that folder. Raises CheckpointError for a model that was never loaded."""
    config = getattr(model, "checkpoint_config", None)
    if config is None:
        raise CheckpointError("this model has no class names or normalisation to save with it: "
                              "load it from a checkpoint, or use vit.checkpoint.save_checkpoint"
                              "(folder, model, meta)")
    meta = {k: v for k, v in config.to_dict().items() if k not in ("format", "model",
                                                                    "num_parameters")}
    save_checkpoint(folder, model, meta)
