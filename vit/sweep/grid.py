"""A sweep's grid: `--vary heads=1,2,4 dim=32,64` -> one run per combination, each with its folder
name and the trainer flags that make it, every combination checked by the trainer's own parser
before anything is trained."""
from __future__ import annotations

import contextlib
import io
import itertools
import math
import re
from dataclasses import dataclass, fields

from vit.model import ViTConfig
from vit.training.config import RUNTIME_FIELDS, TrainConfig

# Settings a sweep sets itself, for every run alike: varying them makes no sense or breaks the layout.
FIXED = {"out", "resume", "overwrite", "dataset", "data_dir", "download", "max_steps", "cache_dir"}
MAX_RUNS = 256           # a typo such as lr=1,2,...,1000 should not start a thousand trainings


class GridError(ValueError):
    """A --vary that can't be swept; the message is one line."""


@dataclass(frozen=True)
class Run:
    settings: dict           # {trainer field name: value}, in --vary's order
    name: str                # its folder under the sweep's --out: heads-2_dim-64

    def flags(self) -> list[str]:
        """The trainer flags that set this run's settings."""
        out = []
        for key, value in self.settings.items():
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                out.append(flag if value else "--no-" + flag[2:])
            else:
                out += [flag, str(value)]
        return out


def sweepable() -> dict[str, type]:
    """Every trainer setting --vary may name, with its type."""
    out = {}
    for cls in (TrainConfig, ViTConfig):
        for f in fields(cls):
            if f.name not in FIXED | RUNTIME_FIELDS:
                out[f.name] = type(f.default)
    return out


def _value(text: str, kind: type, key: str):
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        return kind(text)
    except ValueError:
        what = {int: "a whole number", float: "a number", bool: "true or false"}.get(kind, "a value")
        raise GridError(f"--vary {key}: {text!r} is not {what}") from None


def parse_vary(items: list[str]) -> dict[str, list]:
    """["heads=1,2,4", "dim=32,64"] -> {"heads": [1, 2, 4], "dim": [32, 64]}. Raises GridError."""
    known = sweepable()
    out: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not values.strip():
            raise GridError(f"--vary {item!r}: write SETTING=V1,V2,... (e.g. heads=1,2,4)")
        if key not in known:
            raise GridError(f"--vary {key}: not a setting a sweep can vary; these can: "
                            + ", ".join(sorted(k.replace("_", "-") for k in known)))
        if key in out:
            raise GridError(f"--vary {key} is given twice")
        parsed = [_value(v.strip(), known[key], key) for v in values.split(",") if v.strip()]
        if len(set(map(str, parsed))) != len(parsed):
            raise GridError(f"--vary {key}: a value is repeated")
        out[key] = parsed
    if not out:
        raise GridError("--vary needs at least one SETTING=V1,V2,...")
    return out


def _folder_part(key: str, value) -> str:
    return f"{key.replace('_', '-')}-{re.sub(r'[^A-Za-z0-9.]+', '-', str(value))}"


def expand(vary: dict[str, list]) -> list[Run]:
    """Every combination, in order (the last setting changes fastest). Raises GridError."""
    keys = list(vary)
    count = math.prod(len(vary[k]) for k in keys)
    if count > MAX_RUNS:                     # before making them: lr=1,...,1e6 is a typo
        raise GridError(f"--vary makes {count:,} runs; a sweep has at most {MAX_RUNS}")
    runs = [Run(dict(zip(keys, c)), "_".join(_folder_part(k, v) for k, v in zip(keys, c)))
            for c in itertools.product(*(vary[k] for k in keys))]
    names = [r.name for r in runs]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash:          # init=a/b and init=a_b would train into one folder
        raise GridError(f"--vary: two runs would share the folder {clash!r}; give values that "
                        "differ in letters or digits")
    return runs


def check_runs(runs: list[Run], base: list[str]) -> None:
    """Each run's flags as the trainer would parse them, before anything is trained: a combination
    the trainer refuses (dim=30 with heads=4) is named with the trainer's own one line. Raises
    GridError."""
    from vit.train import parse_args
    for run in runs:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                parse_args([*base, *run.flags()])
        except SystemExit:
            line = said.getvalue().strip().splitlines()[-1] if said.getvalue().strip() else "refused"
            line = line.split("error: ", 1)[-1]
            raise GridError(f"run {run.name}: {line}") from None
