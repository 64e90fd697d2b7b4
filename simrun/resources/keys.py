"""What observations are grouped by: `ResourceKey`, and `resource_key`, the one place a
task's key is derived."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from simrun.plugins import TaskType

#: Separates the parts of a key's text: ``task_type/model`` or ``task_type/model/variant``.
KEY_SEPARATOR = "/"


@dataclass(frozen=True, order=True)
class ResourceKey:
    """The group a task's observations belong to: its type, its model (the run's first source)
    and a variant (the value of its cost setting); the type and the model hold no ``/``."""

    task_type: str
    model: str
    variant: str = ""

    def __post_init__(self) -> None:
        for name in ("task_type", "model", "variant"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(
                    f"ResourceKey.{name} must be a str, got {type(getattr(self, name)).__name__}"
                )
        if not self.task_type:
            raise ValueError("ResourceKey.task_type is empty")
        for name in ("task_type", "model"):
            if KEY_SEPARATOR in getattr(self, name):
                raise ValueError(
                    f"ResourceKey.{name} {getattr(self, name)!r} contains {KEY_SEPARATOR!r}"
                )

    def text(self) -> str:
        """The key as stored: ``heat/plate``, or ``heat/plate/64`` with a variant."""
        base = f"{self.task_type}{KEY_SEPARATOR}{self.model}"
        return f"{base}{KEY_SEPARATOR}{self.variant}" if self.variant else base

    @classmethod
    def from_text(cls, text: str) -> ResourceKey:
        """The key whose `text` is ``text``; `ValueError` when it has no ``/``."""
        parts = text.split(KEY_SEPARATOR, 2)
        if len(parts) < 2:
            raise ValueError(
                f"resource key {text!r} is not 'task_type/model' or 'task_type/model/variant'"
            )
        return cls(*parts)

    def __str__(self) -> str:
        return self.text()


def _variant_text(value: Any) -> str:
    """A setting's value as a variant: text as is, anything else as canonical JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def resource_key(task_type: TaskType, settings: Mapping[str, Any], model: str) -> ResourceKey:
    """The key of a task: the variant is its ``cost_setting``'s value as the settings model reads
    it (``64`` and ``64.0`` of a float are one key; defaults count), text as is, else JSON."""
    name = task_type.cost_setting
    if name is None:
        return ResourceKey(task_type.name, model)
    if name not in task_type.settings.model_fields:
        raise ValueError(
            f"task type {task_type.name!r}: its cost_setting {name!r} is not a field of "
            f"{task_type.settings.__name__}"
        )
    try:
        parsed = task_type.settings.model_validate(dict(settings))
    except ValidationError as exc:
        raise ValueError(
            f"task type {task_type.name!r}: cannot read the cost setting {name!r} from "
            f"settings that do not validate: {exc}"
        ) from exc
    value = parsed.model_dump(mode="json", include={name})[name]
    return ResourceKey(task_type.name, model, _variant_text(value))


def unknown_key_message(text: str, known: Iterable[str]) -> str:
    """The line saying ``text`` names no known key, with the closest ``known`` keys."""
    try:
        ResourceKey.from_text(text)
    except ValueError as exc:
        problem = str(exc)
    else:
        problem = f"no observations of resource key {text!r}"
    keys = sorted(set(known))
    # Keys the text begins (a type, or a type and its model), then keys spelled alike.
    close = [k for k in keys if k.startswith(text.rstrip(KEY_SEPARATOR) + KEY_SEPARATOR)][:3]
    close += [k for k in difflib.get_close_matches(text, keys, n=3, cutoff=0.5) if k not in close]
    close = close[:3]
    if close:
        return f"{problem}; did you mean {', '.join(close)}?"
    return f"{problem} (`simrun resources` lists the known keys)"
