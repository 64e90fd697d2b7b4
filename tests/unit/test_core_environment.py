"""The environment rules of plugin code (`simrun.core.environment`), without I/O."""

from __future__ import annotations

import pytest

from simrun.core.environment import (
    PROCESSES_VARIABLE,
    THREAD_VARIABLES,
    command_program,
    thread_environment,
    with_threads,
)


@pytest.mark.parametrize(
    ("template", "program"),
    [
        ("simrun-heat-report {settings} {out} {input}", "simrun-heat-report"),
        ("'my tool' --x {out}", "my tool"),
        ("./bin/run {out}", "./bin/run"),
        ("", None),
        ("'unclosed {out}", None),
    ],
)
def test_the_program_of_a_command_is_its_first_part(template: str, program: str | None) -> None:
    """The program is the first word as a shell splits it; None for no or bad words."""
    assert command_program(template) == program


def test_a_command_sized_for_n_processes_is_told_n_everywhere() -> None:
    """SIMRUN_PROCESSES and each thread count are n (at least 1)."""
    expected = {PROCESSES_VARIABLE: "4", **dict.fromkeys(THREAD_VARIABLES, "4")}
    assert thread_environment(4) == expected
    assert set(thread_environment(0).values()) == {"1"}


def test_a_thread_count_set_by_the_user_is_kept_but_simrun_processes_is_always_set() -> None:
    """A non-empty user value wins over the default; an empty one does not; the rest of the
    environment is kept; SIMRUN_PROCESSES is simrun's."""
    base = {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "", "SIMRUN_PROCESSES": "9", "X": "y"}
    merged = with_threads(base, 2)
    assert merged["OMP_NUM_THREADS"] == "3"
    assert merged["MKL_NUM_THREADS"] == "2"
    assert merged["SIMRUN_PROCESSES"] == "2"
    assert merged["X"] == "y"
    assert base["MKL_NUM_THREADS"] == ""  # not changed in place
