"""The one place that reads ``SIMRUN_*`` and ``REDIS_URL`` from the environment.

Everything else receives a `Config` (or plain arguments) from its caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_REDIS_URL", "DEFAULT_URL", "Config", "load_config"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_URL = "http://127.0.0.1:8765"


@dataclass(frozen=True)
class Config:
    """Settings shared by the service, the worker and the command line.

    ``redis_url`` is None when ``REDIS_URL`` is unset: embedded mode then starts its own
    Redis, and the service and workers fall back to `DEFAULT_REDIS_URL`.
    """

    redis_url: str | None = None
    store: Path = Path("simrun-store")
    url: str = DEFAULT_URL
    token: str | None = None

    @property
    def redis_url_or_default(self) -> str:
        """``redis_url``, or the local default."""
        return self.redis_url or DEFAULT_REDIS_URL


def load_config(environ: Mapping[str, str] | None = None) -> Config:
    """The configuration given by ``environ`` (the process environment by default)."""
    env = os.environ if environ is None else environ
    return Config(
        redis_url=env.get("REDIS_URL") or None,
        store=Path(env.get("SIMRUN_STORE") or "simrun-store"),
        url=(env.get("SIMRUN_URL") or DEFAULT_URL).rstrip("/"),
        token=env.get("SIMRUN_TOKEN") or None,
    )
