"""The checkpoints the app offers: found, checked and loaded once.

At start-up every sub-folder of the checkpoints folder with a config.json is checked cheaply
(config validated, weight shapes compared with the safetensors header; nothing is built); a bad
one is skipped with a one-line warning. The default model is loaded at once, so a default whose
weights turn out bad (NaN, say) is skipped too. Messages name models, never server paths.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

from vit.checkpoint import (
    CheckpointConfig,
    CheckpointError,
    check_weights,
    checkpoint_folder,
    read_config,
)
from vit.inference import Predictor

HOW_TO_GET_ONE = "train one with `python -m vit.train` (it writes checkpoints/mnist)"


class StartupError(RuntimeError):
    """The app can't start as configured; the message is one line saying what to change."""


class NoModelsError(StartupError):
    """No usable checkpoint: the message is one line that says how to get one."""


def _public(message: str, folder: Path, name: str) -> str:
    """A loader message with the server's folder replaced by the model's name."""
    return message.replace(str(folder.resolve()), name).replace(str(folder), name)


class Models:
    """`root`: a folder of checkpoint folders, each named by its folder; `hub`: Hub models
    ("user/repo" or "hf://user/repo": a Hub id by definition here; vit/hub.py: from the Hub cache,
    downloaded there if need be), each named by its id."""

    def __init__(self, root, device=None, warn=None, hub=()):
        self.root = Path(root)
        self.device = device
        self._warn = warn or (lambda line: print(f"warning: {line}", file=sys.stderr, flush=True))
        self.configs: dict[str, CheckpointConfig] = {}
        self.folders: dict[str, Path] = {}
        self._loaded: dict[str, Predictor] = {}
        self._failed: dict[str, str] = {}       # name -> why it could not be loaded
        self._lock = threading.Lock()
        if not self.root.is_dir():
            raise NoModelsError(f"no checkpoints folder {self.root.name!r}: {HOW_TO_GET_ONE}, "
                                f"or set VIT_CHECKPOINTS to a folder of checkpoint folders")
        found = [(p.parent.name, p.parent) for p in sorted(self.root.glob("*/config.json"))]
        ids = [h.removeprefix("hf://") for h in hub]
        for name, folder in found + [(hub_id, "hf://" + hub_id) for hub_id in ids]:
            try:
                folder = checkpoint_folder(folder)
                config = read_config(folder)
                check_weights(folder, config)
            except CheckpointError as e:
                self._warn(f"skipping model {name!r}: {_public(str(e), Path(folder), name)}")
                continue
            self.configs[name] = config
            self.folders[name] = folder
        # MNIST first: the page's examples are digits.
        for name in sorted(self.configs, key=lambda n: (n != "mnist", n)):
            try:
                self.get(name)
                self.default = name
                break
            except CheckpointError as e:
                self._warn(str(e))
        else:
            raise NoModelsError(f"no usable checkpoint in {self.root.name!r}: {HOW_TO_GET_ONE}, "
                                f"or set VIT_CHECKPOINTS to a folder of checkpoint folders")
        self.names = [n for n in sorted(self.configs, key=lambda n: (n != self.default, n))]

    def choices(self) -> list[tuple[str, str]]:
        """(label, name) for the selector: what the pictures show and the data set ("Handwritten
        digits (MNIST)"), and the folder when two models share that."""
        # A model of a data set this code does not describe (converted, or trained on an image
        # folder) is named by its checkpoint folder: "vit-b16-imagenet", "my-photos".
        titles = [self.configs[n].friendly_title if self.configs[n].spec else n for n in self.names]
        sized = [t if titles.count(t) == 1 else f"{t}, {self._size(n)}"
                 for t, n in zip(titles, self.names)]
        # A sweep's models share a size too: then the folder tells them apart.
        return [(t if sized.count(t) == 1 else f"{t} ({n})", n) for t, n in zip(sized, self.names)]

    def label(self, name: str) -> str:
        """Model `name` as the Model menu names it ("Handwritten digits (MNIST), 514 k
        parameters"): the page never shows a folder's name where the menu shows a title."""
        return dict((n, label) for label, n in self.choices()).get(name, name)

    def _size(self, name: str) -> str:
        """What tells two models of one data set apart in the selector: their size ("514 k
        parameters"), else their folder's name."""
        n = self.configs[name].num_parameters
        return f"{n / 1000:,.0f} k parameters" if n else name

    def learned(self, name: str | None = None) -> bool:
        """Whether model `name` (None: any model) kept training snapshots ("How it learned" has
        something to show)."""
        from vit.training import snapshots
        folders = self.folders.values() if name is None else [self.folders.get(name)]
        return any(isinstance(f, Path) and bool(snapshots.listed(f)) for f in folders)

    def comparable(self) -> bool:
        """Whether two models read the same data set ("Compare" pairs them on one input and on
        its test set)."""
        datasets = [c.dataset for c in self.configs.values() if c.dataset]
        return len(datasets) != len(set(datasets))

    def get(self, name: str) -> Predictor:
        """The loaded model; CheckpointError (a one-line, path-free message) if it can't be."""
        if not isinstance(name, str) or name not in self.configs and name not in self._failed:
            raise CheckpointError(f"no model named {str(name)[:40]!r}; the models are "
                                  f"{', '.join(self.names)}")
        if name in self._failed:                # a page built before it failed still offers it
            raise CheckpointError(self._failed[name])
        with self._lock:                        # two first requests must not load it twice
            if name not in self._loaded:
                folder = self.folders[name]
                try:
                    self._loaded[name] = Predictor(folder, self.device)
                except CheckpointError as e:
                    del self.configs[name]      # never offered again in this process
                    if name in getattr(self, "names", []):
                        self.names.remove(name)
                    self._failed[name] = (f"can't load model {name!r}: "
                                          f"{_public(str(e), folder, name)}")
                    raise CheckpointError(self._failed[name]) from None
            return self._loaded[name]
