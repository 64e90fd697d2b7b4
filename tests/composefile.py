"""Reading docker-compose.yml and .env.example the way compose does, for the tests that
check the deployment files and the one that starts a worker exactly as compose would."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
#: The password the tests resolve ${REDIS_PASSWORD} with (.env.example leaves it empty).
PASSWORD = "pw4tests"

VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\})")


class MissingVariable(ValueError):
    pass


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution: ``$$`` is a literal ``$``; ``${V}``, ``${V:-d}``
    (d when V is unset or empty), ``${V-d}`` (d when unset), ``${V:?m}`` / ``${V?m}``
    (an error with message m when unset or empty / unset)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.groups()
        if name is None:
            return "$"
        value = env.get(name)
        empty = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in (":-", "-"):
            return arg if empty else str(value)
        if op in (":?", "?") and empty:
            raise MissingVariable(f"{name}: {arg}")
        return value or ""

    return VAR.sub(one, text)


def _walk(obj: Any, env: Mapping[str, str]) -> Any:
    if isinstance(obj, str):
        return interpolate(obj, env)
    if isinstance(obj, list):
        return [_walk(o, env) for o in obj]
    if isinstance(obj, dict):
        return {k: _walk(v, env) for k, v in obj.items()}
    return obj


def env_example() -> dict[str, str]:
    """The variables .env.example sets."""
    out: dict[str, str] = {}
    for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example: {line!r} is not KEY=VALUE"
            out[key.strip()] = value.strip()
    return out


def compose(**overrides: str) -> dict[str, Any]:
    """docker-compose.yml with the values of .env.example, a password, and ``overrides``."""
    env = {**env_example(), "REDIS_PASSWORD": PASSWORD, **overrides}
    doc = _walk(yaml.safe_load(COMPOSE.read_text(encoding="utf-8")), env)
    assert isinstance(doc, dict)
    return doc


def services(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = doc["services"]
    return result


def compose_bytes(text: str) -> float:
    """Bytes of a compose memory value such as "8g" or "512m" (binary units)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([bkmg]?)b?", str(text).strip().lower())
    assert match, f"not a compose memory value: {text!r}"
    units = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}
    return float(match.group(1)) * units[match.group(2)]


def kube_bytes(text: str) -> float:
    """Bytes of a Kubernetes memory quantity such as "8Gi" or "512Mi"."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti)?", str(text).strip())
    assert match, f"not a binary Kubernetes quantity: {text!r}"
    units = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return float(match.group(1)) * units[match.group(2)]


def seconds(duration: str) -> float:
    """Seconds of a compose duration such as "75s", "1m15s" or "1h"."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert "".join(n + u for n, u in parts) == duration, f"not a compose duration: {duration!r}"
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * scale[u] for n, u in parts)
