"""The progress of a run as the Python API shows it: one display updated in place in a
notebook, the live bars of ``simrun run`` on a terminal, plain lines elsewhere (the drawing
is `simrun.cli.progress`'s), always from the caller's thread."""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from typing import Any

from simrun.app.follow import ProgressView
from simrun.cli import progress as draw
from simrun.core.views import RunView

#: Width of a notebook's display, in characters.
NOTEBOOK_WIDTH = 110
#: Seconds between two progress lines when the output is no terminal.
PLAIN_EVERY_S = 10.0


def in_notebook() -> bool:
    """Whether this Python runs in a Jupyter kernel (or another kernel-based notebook:
    VS Code's, Colab's): IPython is imported and its shell has a kernel."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None) if ipython is not None else None
    shell = get() if callable(get) else None
    return getattr(shell, "kernel", None) is not None


def _notebook_display() -> Callable[..., Any]:
    from IPython.display import display  # in a notebook, IPython is there

    return display


class NotebookDisplay:
    """One output of a notebook cell, replaced by each view (`IPython.display` with a
    display id): the live bars as HTML, with plain text for a front end without HTML."""

    def __init__(self, display: Callable[..., Any] | None = None) -> None:
        self._display = display or _notebook_display()
        self._handle: Any = None
        self.started = time.monotonic()

    def bundle(self, run: RunView) -> dict[str, str]:
        """The view drawn as ``text/html`` and ``text/plain``."""
        from rich.console import Console

        console = Console(
            file=io.StringIO(),
            record=True,
            width=NOTEBOOK_WIDTH,
            force_terminal=True,
            force_jupyter=False,
            color_system="truecolor",
        )
        console.print(draw.render_live(run, time.monotonic() - self.started, time.time()))
        html = console.export_html(inline_styles=True, clear=False, code_format="<pre>{code}</pre>")
        return {"text/html": html, "text/plain": console.export_text()}

    def update(self, run: RunView) -> None:
        data = self.bundle(run)
        if self._handle is None:
            self._handle = self._display(data, raw=True, display_id=True)
        else:
            self._handle.update(data, raw=True)

    def close(self) -> None:
        """Nothing to undo: the last view stays in the cell."""


class TerminalDisplay:
    """`simrun.cli.progress`'s view on stdout: live bars on a terminal, else plain lines
    (and the run's last line at the end)."""

    def __init__(self) -> None:
        from simrun.cli.common import console

        self._console = console()
        self._view = draw.make_view(self._console, PLAIN_EVERY_S)
        self._last: RunView | None = None

    def update(self, run: RunView) -> None:
        self._last = run
        self._view.update(run)

    def close(self) -> None:
        self._view.close()
        if isinstance(self._view, draw.PlainView) and self._last is not None:
            self._console.print(draw.run_header(self._last), markup=False, highlight=False)


def timeout_text(run_id: str, timeout_s: float, view: RunView | None) -> str:
    """What `simrun.api.RunTimeout` says: the run's progress when it was given up on."""
    lines = "; ".join(draw.plain_lines(view)) if view is not None else ""
    where = f" ({lines})" if lines else ""
    took = draw.format_duration(timeout_s)
    return f"run {run_id} did not end within {took}{where}; it goes on: wait again or cancel it"


def make_display(progress: bool) -> ProgressView | None:
    """The display for ``progress`` here: None when it is off, the notebook's in a
    notebook, else the terminal's."""
    if not progress:
        return None
    if in_notebook():
        return NotebookDisplay()
    return TerminalDisplay()
