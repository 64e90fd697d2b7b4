"""The Prometheus text exposition format 0.0.4, written from plain data (pure)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["CONTENT_TYPE", "Family", "render_families"]

#: The media type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class Family:
    """One metric: its name, type, help text and samples (labels, value)."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str
    samples: tuple[tuple[Mapping[str, str], float], ...] = ()


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render_families(metric_families: Iterable[Family]) -> str:
    """The text exposition format 0.0.4 of ``metric_families``: HELP and TYPE lines, then
    one line per sample; label values and help escaped. `ValueError` for a bad name or a
    name given twice."""
    lines: list[str] = []
    seen: set[str] = set()
    for family in metric_families:
        if not _NAME.fullmatch(family.name):
            raise ValueError(f"bad metric name {family.name!r}")
        if family.name in seen:
            raise ValueError(f"metric {family.name!r} is given twice")
        seen.add(family.name)
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            for label in labels:
                if not _LABEL.fullmatch(label) or label.startswith("__"):
                    raise ValueError(f"bad label name {label!r} of {family.name}")
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
            head = f"{family.name}{{{text}}}" if text else family.name
            lines.append(f"{head} {_number(value)}")
    return "\n".join(lines) + "\n" if lines else ""
