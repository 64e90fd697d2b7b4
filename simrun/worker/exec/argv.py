"""The ``command`` template of an unsplit task type as an argv (`expand_argv`, pure): split
like a POSIX shell, ``{settings}``, ``{out}`` and ``{input}`` (one ``<port>=<path>`` per port,
sorted) filled in, ``{{``/``}}`` literal braces."""

from __future__ import annotations

import io
import shlex
from collections.abc import Mapping
from pathlib import Path

from simrun.plugins import COMMAND_BRACES, COMMAND_PLACEHOLDERS


def _describe(template: str) -> str:
    return f"command template {template!r}"


def split_template(template: str) -> list[str]:
    """The parts of ``template`` after POSIX shell-like splitting, placeholders untouched;
    `ValueError` for an unclosed quote, a lone backslash, or an empty template."""
    if not isinstance(template, str):
        raise ValueError(f"command template must be a string, got {type(template).__name__}")
    stream = io.StringIO(template)
    lexer = shlex.shlex(stream, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # '#' is an ordinary character in an argv, not a comment
    parts: list[str] = []
    while True:
        start = stream.tell()
        try:
            token = lexer.get_token()
        except ValueError as exc:
            rest = template[start:].strip()
            raise ValueError(
                f"{_describe(template)}: the part {rest!r} cannot be split: {exc} "
                "(check its quotes and backslashes)"
            ) from None
        if token is None:  # posix mode returns None at the end of the input
            break
        parts.append(token)
    if not parts:
        raise ValueError(f"{_describe(template)} is empty: it must name a program to run")
    return parts


def _fill(template: str, part: str, values: Mapping[str, str]) -> str:
    """``part`` with its placeholders replaced by ``values`` and its braces undoubled."""
    pieces: list[str] = []
    last = 0
    for match in COMMAND_BRACES.finditer(part):
        pieces.append(part[last : match.start()])
        last = match.end()
        item = match.group()
        if item == "{{":
            pieces.append("{")
        elif item == "}}":
            pieces.append("}")
        elif item in ("{", "}"):
            raise ValueError(
                f"{_describe(template)}: the part {part!r} has an unmatched {item!r}; "
                f"write {item * 2!r} for a literal brace"
            )
        else:
            name = item[1:-1]
            if name not in COMMAND_PLACEHOLDERS:
                known = ", ".join("{" + p + "}" for p in COMMAND_PLACEHOLDERS)
                raise ValueError(
                    f"{_describe(template)}: the part {part!r} uses the unknown placeholder "
                    f"{item!r}; the placeholders are {known} (write {{{{ and }}}} for "
                    "literal braces)"
                )
            pieces.append(values[name])
    pieces.append(part[last:])
    return "".join(pieces)


def _uses_input(part: str) -> bool:
    return any(m.group() == "{input}" for m in COMMAND_BRACES.finditer(part))


def expand_argv(
    template: str, settings_file: Path, out: Path, inputs: Mapping[str, Path]
) -> list[str]:
    """The argv that ``template`` stands for, for a task with these files; `ValueError` names
    the template and the part at fault."""
    parts = split_template(template)
    for port in inputs:
        if not isinstance(port, str) or not port or "=" in port or "\0" in port:
            raise ValueError(
                f"{_describe(template)}: input port {port!r} cannot be passed as "
                "<port>=<path>; a port name is non-empty and has no '=' or NUL"
            )
    values = {"settings": str(settings_file), "out": str(out)}
    argv: list[str] = []
    for part in parts:
        if not _uses_input(part):
            argv.append(_fill(template, part, values))
            continue
        if not inputs:
            _fill(template, part, {**values, "input": ""})  # still report a bad part
            continue
        argv.extend(
            _fill(template, part, {**values, "input": f"{port}={inputs[port]}"})
            for port in sorted(inputs)
        )
    if not argv:
        raise ValueError(
            f"{_describe(template)}: nothing is left to run once the {{input}} parts are "
            "dropped for a task without inputs"
        )
    return argv
