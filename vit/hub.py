"""Checkpoints shaped like the Hugging Face Hub's. A checkpoint folder is already a Hub model
repository (`config.json` + `model.safetensors`); this adds its model card (`README.md` with
the Hub's metadata, written from config.json's provenance), lets a Hub model, written
hf://user/repo, stand wherever a folder goes (`resolve`: downloaded into the normal Hub cache, or
found there offline; a plain "a/b" is always a local path: a mistyped checkpoints/mnst must
never fetch whatever the Hub account "checkpoints" serves), and
uploads a folder (`push_to_hub`). `vit.from_pretrained` / `vit.save_pretrained`
(vit/checkpoint.py) build on these; the model file (vit/model.py) knows nothing of the Hub. Only
the checkpoint's FILES are ever fetched or sent: never a pickle, never anything else a
repository holds."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from vit.text import code

CARD = "README.md"
FILES = ["config.json", "model.safetensors", "typical.safetensors", CARD]
# The Hub's copies of the data sets this project knows (the card's `datasets` and model-index).
HUB_DATASETS = {"mnist": "ylecun/mnist", "fashion-mnist": "zalando-datasets/fashion_mnist",
                "cifar10": "uoft-cs/cifar10"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
HUB = "hf://"                 # a Hub model is always written hf://user/repo


class HubError(ValueError):
    """A Hub id that can't be used; the message is one line."""


def hub_id(name) -> str | None:
    """"user/repo" when `name` names a Hub model (hf://user/repo), else None: any other text or
    path is a local one, whether or not it exists. (A Path collapses hf:// to hf:/.)"""
    if isinstance(name, str) and name.startswith(HUB):
        return name[len(HUB):]
    if isinstance(name, os.PathLike) and str(name).startswith("hf:/"):
        return str(name)[len("hf:/"):]
    return None


def is_hub_id(name) -> bool:
    """Whether `name` names a Hub model: hf://user/repo."""
    return hub_id(name) is not None


def resolve(name, revision: str | None = None, cache_dir=None, token=None,
            local_files_only: bool = False) -> Path:
    """A checkpoint folder, or a Hub model (hf://user/repo) -> the folder holding its files:
    downloaded into the Hub cache (HF_HUB_CACHE, ~/.cache/huggingface/hub), or read from there
    with no network (HF_HUB_OFFLINE=1 or `local_files_only`). Anything else is a local path,
    never looked up on the Hub: a missing one shaped like "user/repo" is refused here, saying how
    to name a Hub model; any other comes back as a Path, for the loader to say what is wrong with
    it. Raises HubError with one line."""
    repo = hub_id(name)
    if repo is None:
        text = str(name) if isinstance(name, (str, os.PathLike)) else ""
        if HUB_ID.match(text) and not Path(text).exists():
            raise HubError(f"no such folder: {text} (for a Hub model write {HUB}{text})")
        return Path(name)
    if not HUB_ID.match(repo):
        raise HubError(f"{HUB}{repo}: not a Hub model id (write {HUB}user/repo)")
    name = repo
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    try:
        return Path(snapshot_download(name, revision=revision, cache_dir=cache_dir, token=token,
                                      allow_patterns=FILES, local_files_only=local_files_only))
    except LocalEntryNotFoundError:
        raise HubError(f"{HUB}{name}: no Hub model {name} in the Hub cache "
                       f"(offline, or the Hub could not be reached)") from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HubError(f"{HUB}{name}: the Hub said: {first}") from None


def model_card(config: dict) -> str:
    """README.md for a checkpoint's config.json: the Hub's metadata (library, tags, data set, a
    model-index with the measured test accuracy) and what the model is, for people."""
    model, prov = config.get("model", {}), config.get("provenance", {})
    dataset = config.get("dataset")
    hub_data = HUB_DATASETS.get(dataset)
    accuracy = config.get("test_accuracy")
    meta = {"library_name": "vit-explorer", "pipeline_tag": "image-classification",
            "license": "mit", "tags": ["vision-transformer", "image-classification",
                                       "vit-explorer", "safetensors"]}
    if hub_data:
        meta["datasets"] = [hub_data]
    if accuracy is not None and dataset:
        meta["model-index"] = [{"name": f"vit-explorer-{dataset}", "results": [{
            "task": {"type": "image-classification", "name": "Image classification"},
            "dataset": {"type": hub_data or dataset, "name": dataset, "split": "test"},
            "metrics": [{"type": "accuracy", "value": round(100 * accuracy, 2),
                         "name": "Test accuracy (%)"}]}]}]
    # JSON is YAML: the front matter stays exact whatever a class name or command holds.
    front = "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in meta.items())
    names = config.get("class_names", [])
    lines = [
        "---", front, "---", "",
        f"# A small Vision Transformer: {_subject(dataset)}", "",
        f"Trained by ViT Explorer's trainer ({len(names)} classes). Open it in the explorer's "
        f"page, or load it in Python:", "",
        "```python",
        "import vit",
        "model = vit.from_pretrained(\"hf://THIS/REPO\")     # or a local folder",
        "```", "",
        "| | |", "|---|---|",
        f"| test accuracy | {_pct(accuracy)} (the last epoch's, not selected on the test set) |",
        f"| parameters | {config.get('num_parameters', '?'):,} |" if isinstance(
            config.get("num_parameters"), int) else "| parameters | ? |",
        f"| input | {model.get('image_size', '?')} px, {model.get('channels', '?')} channel(s), "
        f"{model.get('patch_size', '?')}-px patches |",
        f"| layers × heads, width | {model.get('depth', '?')} × {model.get('heads', '?')}, "
        f"{model.get('dim', '?')} |",
        f"| classes | {code(', '.join(map(str, names)))} |",
    ]
    for key in ("command", "commit", "device", "date", "wall_time_seconds", "torch"):
        if key in prov:
            lines.append(f"| {key.replace('_', ' ')} | {code(prov[key])} |")
    calib = config.get("calibration", {})
    if "temperature" in calib:
        lines.append(f"| calibration | logits divided by {calib['temperature']:.4g} "
                     f"(fitted on the validation split) |")
    typical = calib.get("typical")
    if "far_above" in calib and isinstance(typical, dict):
        lines.append(f"| not one of these | a [CLS] token farther than {calib['far_above']:.4g} "
                     f"(Mahalanobis, squared) from every class: {code(typical.get('command', '?'))} |")
    check = calib.get("digit_check")
    if isinstance(check, dict):
        lines.append(f"| digits are not one of these | where its best class is below "
                     f"{_pct(check.get('own_below'))}, the digit model {code(check.get('model', '?'))} "
                     f"beside it reading a digit at {_pct(check.get('digit_at_least'))} or more: "
                     f"{code(check.get('command', '?'))} |")
    return "\n".join(lines) + "\n"


def _subject(dataset) -> str:
    from vit.data.specs import builtin_spec
    spec = builtin_spec(dataset)
    return f"{spec.subject} ({spec.title})" if spec else str(dataset or "its own data set")


def _pct(v) -> str:
    return "?" if v is None else f"{100 * v:.2f} %"


def push_to_hub(folder, repo_id: str, token=None, private: bool | None = None,
                commit_message: str = "Upload a ViT Explorer checkpoint") -> str:
    """Upload a checkpoint folder's files (config, weights, card) to model repository
    `repo_id`, made if needed. Returns the commit's URL."""
    from huggingface_hub import HfApi
    folder = Path(folder)
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                             allow_patterns=FILES, commit_message=commit_message)
    return str(getattr(info, "commit_url", info))

