"""Every setting ViT Explorer reads from the environment, in one place.

`Settings.from_env()` reads them once and checks each (a bad value: `SettingError`, one line
naming the variable); the app reads them at start-up and passes each down to what it bounds
(vit/ui/app.py `create_app(settings=…)`); a library function's default (the device, a cache
folder) reads its own one, `Settings.read(field)`, when no value is passed. Nothing else in
`vit/` reads the environment, but for torchrun's own variables (RANK, WORLD_SIZE, …:
vit/training/distributed.py) and `app.py`, which must look at SPACES_ZERO_GPU before torch is
imported. `TABLE` is the table docs/hosting.md shows ("Settings"; a test holds them together).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping


class SettingError(ValueError):
    """A setting's value is unusable; the message is one line naming the variable."""


@dataclass(frozen=True)
class Setting:
    env: str            # the environment variable
    field: str          # the Settings field it sets
    kind: str           # "int", "flag" (0 or 1), "text", "list" (comma-separated), "set" (any value = on)
    default: object
    lo: int = 0
    hi: int = 0


# (variable, field, kind, default[, lo, hi]) — in the order docs/hosting.md lists them.
TABLE: tuple[Setting, ...] = (
    Setting("VIT_CHECKPOINTS", "checkpoints", "text", ""),
    Setting("VIT_HUB_MODELS", "hub_models", "list", ()),
    Setting("VIT_DEVICE", "device", "text", "auto"),
    Setting("VIT_DATA_DIR", "data_dir", "text", ""),
    Setting("VIT_DATA_URL", "data_url", "text", ""),
    Setting("VIT_THREADS", "threads", "int", 1, 1, 4 * (os.cpu_count() or 1)),
    Setting("VIT_SESSIONS", "sessions", "int", 2000, 10, 1_000_000),
    # About a second of events on 2 cores: at 16 a crowd drawing at once was turned away while
    # each lift was still answered quickly (docs/benchmarks.md, "The model in the page").
    Setting("VIT_QUEUE_SIZE", "queue_size", "int", 64, 1, 10_000),
    Setting("VIT_CONNECTIONS", "connections", "int", 2000, 10, 100_000),
    Setting("VIT_UPLOADS_PER_MINUTE", "uploads_per_minute", "int", 30, 1, 100_000),
    Setting("VIT_UPLOADS_IN_FLIGHT", "uploads_in_flight", "int", 4, 1, 1000),
    Setting("VIT_UPLOAD_CACHE_MB", "upload_cache_mb", "int", 1000, 100, 10_000_000),
    Setting("VIT_TRUSTED_PROXIES", "trusted_proxies", "int", None, 0, 10),
    Setting("VIT_UNLIMITED_LOCAL", "unlimited_local", "flag", False),
    Setting("VIT_MONITORING", "monitoring", "flag", False),
    Setting("VIT_INPAGE", "inpage", "flag", True),
    Setting("VIT_WARM", "warm", "flag", True),
    Setting("VIT_MCP", "mcp", "flag", True),
    Setting("VIT_GRADIO_SPEEDUPS", "gradio_speedups", "flag", True),
    Setting("SPACE_ID", "space_id", "text", ""),
    Setting("SPACES_ZERO_GPU", "zero_gpu", "zerogpu", False),
    Setting("VIT_COMMIT", "commit", "text", ""),
    Setting("VIT_CACHE_DIR", "cache_dir", "text", ""),
    Setting("XDG_CACHE_HOME", "xdg_cache_home", "text", ""),
)


@dataclass(frozen=True)
class Settings:
    checkpoints: str = ""              # a folder of checkpoint folders to serve ("" = bundled)
    hub_models: tuple[str, ...] = ()   # Hub models served beside them
    device: str = "auto"
    data_dir: str = ""                 # test sets ("" = the trainer's default data/)
    data_url: str = ""                 # a mirror for MNIST's and Fashion-MNIST's test splits
    threads: int = 1                   # torch CPU threads per request
    sessions: int = 2000
    queue_size: int = 64
    connections: int = 2000
    uploads_per_minute: int = 30
    uploads_in_flight: int = 4
    upload_cache_mb: int = 1000
    trusted_proxies: int | None = None  # None: 1 on a Space (its proxy), else 0
    unlimited_local: bool = False
    monitoring: bool = False
    inpage: bool = True
    warm: bool = True
    mcp: bool = True
    gradio_speedups: bool = True
    space_id: str = ""                 # set by a Hugging Face Space
    zero_gpu: bool = False             # set by a ZeroGPU Space
    commit: str = ""                   # the commit a run records, when a command names it
    cache_dir: str = ""                # the trainer's prepared-data cache ("none" = off)
    xdg_cache_home: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """Every setting from `env` (default: the process's environment). Raises SettingError."""
        env = os.environ if env is None else env
        return cls(**{s.field: _parse(s, env.get(s.env)) for s in TABLE})

    @staticmethod
    def read(field: str, env: Mapping[str, str] | None = None):
        """One setting alone, for a library function's default (the device, the cache folder):
        a bad value of another setting is not that function's to refuse. Raises SettingError."""
        env = os.environ if env is None else env
        s = next(s for s in TABLE if s.field == field)
        return _parse(s, env.get(s.env))

    @property
    def on_space(self) -> bool:
        return bool(self.space_id)

    @property
    def proxies(self) -> int:
        """Proxies in front that append the visitor's address: a Space's one unless told."""
        return (1 if self.on_space else 0) if self.trusted_proxies is None else self.trusted_proxies



def user_cache() -> Path:
    """The user's cache folder ($XDG_CACHE_HOME, else ~/.cache)."""
    given = Settings.read("xdg_cache_home")
    return Path(given) if given else Path.home() / ".cache"


def _parse(s: Setting, raw: str | None):
    if s.kind == "zerogpu":               # read as the `spaces` package reads it
        return (raw or "").lower() in ("1", "t", "true")
    raw = (raw or "").strip()
    if not raw:
        return s.default
    if s.kind == "text":
        return raw
    if s.kind == "list":
        return tuple(x.strip() for x in raw.split(",") if x.strip())
    lo, hi = (0, 1) if s.kind == "flag" else (s.lo, s.hi)
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{s.env}={raw[:20]!r} is not a whole number") from None
    if not lo <= value <= hi:
        raise SettingError(f"{s.env} must be between {lo} and {hi}, not {value}")
    return value == 1 if s.kind == "flag" else value


assert {s.field for s in TABLE} == {f.name for f in fields(Settings)}, "TABLE and Settings differ"
