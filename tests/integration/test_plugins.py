"""The plugin interface: task types, references, and loading them from real entry points.

Entry points here are real: each test writes a tiny distribution (a ``.dist-info`` folder
with ``entry_points.txt`` and the plugin module beside it) into a temporary directory that
goes on ``sys.path``, and `importlib.metadata` finds it as it finds any installed package.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import Distribution, EntryPoint
from pathlib import Path

import pytest
from pydantic import BaseModel

from simrun.plugins import (
    ENTRY_POINT_GROUP,
    PluginError,
    ResourceHint,
    TaskPaths,
    TaskType,
    load_plugin_ref,
    load_task_types,
    resolve,
    task_type_problems,
)

PLUGIN_HEADER = """
from pydantic import BaseModel
from simrun.plugins import ResourceHint, TaskType

class Settings(BaseModel):
    points: int = 4
    grid: int = 32

def count(settings): return settings["points"]
def unit(settings, index, paths): return None
"""


def make_distribution(
    root: Path, dist: str, module: str, body: str, entries: dict[str, str]
) -> list[EntryPoint]:
    """Write module ``module`` and a distribution ``dist`` whose entry points are ``entries``
    (name → object in ``module``); return those entry points as importlib sees them."""
    (root / f"{module}.py").write_text(textwrap.dedent(PLUGIN_HEADER) + textwrap.dedent(body))
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {module}:{obj}" for name, obj in entries.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}\n")
    return list(Distribution.at(info).entry_points)


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


class Settings(BaseModel):
    grid: int = 16


def test_resource_hint_defaults_match_the_spec() -> None:
    """A hint without arguments asks for 2 GiB base, 6 GiB per worker, no scratch, no GPU."""
    assert ResourceHint() == ResourceHint(2.0, 6.0, 0.0, 0)


def test_splittable_means_a_compute_unit() -> None:
    """A type is splittable exactly when it has a compute_unit."""
    split = TaskType("a", Settings, count_units="m:c", compute_unit="m:u")
    whole = TaskType("b", Settings, command="run {out}")
    assert split.splittable
    assert not whole.splittable


def test_task_paths_layout() -> None:
    """for_task lays a task out as store/runs/<run>/<task>/out."""
    paths = TaskPaths.for_task(Path("/s"), "r1", "sweep", {"plate": Path("/p")})
    assert paths.run_dir == Path("/s/runs/r1")
    assert paths.task_dir == Path("/s/runs/r1/sweep")
    assert paths.out == Path("/s/runs/r1/sweep/out")
    assert paths.inputs == {"plate": Path("/p")}


@pytest.mark.parametrize(
    ("task_type", "expected"),
    [
        (TaskType("t", Settings), "neither a command nor a compute_unit"),
        (TaskType("t", Settings, compute_unit="m:u"), "no count_units"),
        (
            TaskType("t", Settings, command="x", count_units="m:c", compute_unit="m:u"),
            "both a command and a compute_unit",
        ),
        (TaskType("t", Settings, command="x", cost_setting="mesh"), "'mesh' is not a field"),
        (TaskType("t", Settings, count_units="m", compute_unit="m:u"), "'m' is not of the form"),
        (TaskType("t", Settings, command="x", merge="m:"), "not of the form"),
        (TaskType("t", Settings, command="x", plan="a-b:f"), "not a module path"),
        (TaskType("t", Settings, command="x", inputs=("a", "a")), "port named twice"),
        (TaskType("t", Settings, command="x", outputs=()), "no output port"),
        (TaskType("", Settings, command="x"), "empty name"),
        (TaskType("t", dict, command="x"), "not a pydantic BaseModel"),  # type: ignore[arg-type]  # the wrong type is the point
        (TaskType("t", Settings, command="x", hint=ResourceHint(-1.0)), "memory_base_gb"),
        (TaskType("t", Settings, command="x", hint=ResourceHint(gpus=-1)), "hint.gpus"),
        ("not a task type", "not a simrun.plugins.TaskType"),
    ],
)
def test_a_type_that_can_never_run_has_problems(task_type: object, expected: str) -> None:
    """Each way a type can never run is named in its problems."""
    problems = task_type_problems(task_type)
    assert any(expected in p for p in problems), problems


def test_a_sound_type_has_no_problems() -> None:
    """A complete splittable type with a valid cost setting has no problems."""
    tt = TaskType(
        "t", Settings, count_units="m:c", compute_unit="m:u", merge="m:g", cost_setting="grid"
    )
    assert task_type_problems(tt) == []


def test_resolve_imports_the_function() -> None:
    """resolve returns the callable a 'module:function' string names, dotted attributes too."""
    assert resolve("os.path:join") is __import__("os").path.join
    assert resolve("pathlib:Path.exists") is Path.exists


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("os.path.join", "not of the form 'module:function'"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("os.path:no_such_function", "has no attribute 'no_such_function'"),
        ("os:sep", "is a str, not callable"),
        (":f", "not of the form"),
    ],
)
def test_resolve_says_which_part_failed(ref: str, expected: str) -> None:
    """A reference that cannot be resolved raises PluginError saying which step failed."""
    with pytest.raises(PluginError) as info:
        resolve(ref)
    assert expected in str(info.value)


def test_load_task_types_from_a_real_distribution(plugin_dir: Path) -> None:
    """Entry points of an installed distribution load as task types, keyed by name."""
    eps = make_distribution(
        plugin_dir,
        "good-plugin",
        "good_plugin_mod",
        """
        SWEEP = TaskType("sweep", Settings, count_units="good_plugin_mod:count",
                         compute_unit="good_plugin_mod:unit", cost_setting="grid")
        SOLVE = TaskType("solve", Settings, command="solver {settings} {out}")
        """,
        {"sweep": "SWEEP", "solve": "SOLVE"},
    )
    types = load_task_types(eps)
    assert sorted(types) == ["solve", "sweep"]
    assert types["sweep"].splittable
    assert resolve(types["sweep"].count_units or "")({"points": 7}) == 7


def test_a_type_that_cannot_run_is_refused_naming_its_entry_point(plugin_dir: Path) -> None:
    """Loading refuses a type with neither command nor compute_unit and names the entry point."""
    eps = make_distribution(
        plugin_dir,
        "lazy-plugin",
        "lazy_plugin_mod",
        'LAZY = TaskType("lazy", Settings)\n',
        {"lazy": "LAZY"},
    )
    with pytest.raises(PluginError) as info:
        load_task_types(eps)
    message = str(info.value)
    assert "entry point 'lazy' = 'lazy_plugin_mod:LAZY'" in message
    assert "lazy-plugin" in message
    assert "neither a command nor a compute_unit" in message


def refused(plugin_dir: Path, name: str, body: str, entry_points: dict[str, str]) -> str:
    """The message of the `PluginError` that loading the distribution ``name`` (module
    ``<name>_mod`` with ``body``, ``-`` as ``_``) raises."""
    module = name.replace("-", "_") + "_mod"
    eps = make_distribution(plugin_dir, name, module, body, entry_points)
    with pytest.raises(PluginError) as info:
        load_task_types(eps)
    return str(info.value)


def test_a_bad_cost_setting_is_refused(plugin_dir: Path) -> None:
    """A cost_setting that is not a field of the settings model is refused at load."""
    body = 'FIT = TaskType("fit", Settings, command="fit", cost_setting="subset")\n'
    message = refused(plugin_dir, "cost-plugin", body, {"fit": "FIT"})
    assert "cost_setting 'subset' is not a field" in message


def test_a_malformed_reference_is_refused(plugin_dir: Path) -> None:
    """A callable reference without the 'module:function' form is refused at load."""
    body = (
        'BAD = TaskType("bad", Settings, count_units="ref_plugin_mod.count", '
        'compute_unit="ref_plugin_mod:unit")\n'
    )
    message = refused(plugin_dir, "ref-plugin", body, {"bad": "BAD"})
    assert "count_units: 'ref_plugin_mod.count' is not of the form" in message


def test_an_entry_point_that_fails_to_import_is_reported(plugin_dir: Path) -> None:
    """An import error inside a plugin is reported with the entry point, not swallowed."""
    body = 'import no_such_dependency_xyz\nX = TaskType("x", Settings, command="x")\n'
    message = refused(plugin_dir, "broken-plugin", body, {"x": "X"})
    assert "entry point 'x' = 'broken_plugin_mod:X'" in message
    assert "no_such_dependency_xyz" in message


def test_a_name_registered_twice_names_both_entry_points(plugin_dir: Path) -> None:
    """Two distributions registering one name raise ValueError naming both entry points."""
    body = 'T = TaskType("mesh", Settings, command="mesh {out}")\n'
    first = make_distribution(plugin_dir, "mesh-one", "mesh_one_mod", body, {"mesh": "T"})
    second = make_distribution(plugin_dir, "mesh-two", "mesh_two_mod", body, {"mesh": "T"})
    with pytest.raises(ValueError, match="registered twice") as info:
        load_task_types([*first, *second])
    assert "mesh_one_mod:T" in str(info.value)
    assert "mesh_two_mod:T" in str(info.value)


def test_entry_point_name_must_match_the_type(plugin_dir: Path) -> None:
    """An entry point whose name differs from its type's name is refused (names must agree)."""
    body = 'T = TaskType("real", Settings, command="x")\n'
    message = refused(plugin_dir, "alias-plugin", body, {"alias": "T"})
    assert "differs from the task type's name 'real'" in message


def test_installed_entry_points_are_found_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """A distribution on the path of a new Python process is discovered by load_task_types()."""
    make_distribution(
        tmp_path,
        "fresh-plugin",
        "fresh_plugin_mod",
        'F = TaskType("fresh", Settings, command="fresh {out}", description="d")\n',
        {"fresh": "F"},
    )
    code = "from simrun.plugins import load_task_types; t = load_task_types(); print(sorted(t))"
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert "'fresh'" in out
    assert "'heat'" in out


def test_resolve_reports_a_module_that_raises_on_import(plugin_dir: Path) -> None:
    """A plugin module raising something other than ImportError is still a PluginError."""
    (plugin_dir / "raising_plugin_mod.py").write_text("raise RuntimeError('no licence')\n")
    with pytest.raises(PluginError) as info:
        resolve("raising_plugin_mod:f")
    assert "importing module 'raising_plugin_mod' failed: RuntimeError: no licence" in str(
        info.value
    )


def test_load_plugin_ref_gives_the_task_type_it_names(plugin_dir: Path) -> None:
    """A "module:OBJECT" reference loads the TaskType it names, a dotted object path too,
    without the type being installed as an entry point."""
    (plugin_dir / "ref_types_mod.py").write_text(
        textwrap.dedent(PLUGIN_HEADER)
        + textwrap.dedent(
            """
            SWEEP = TaskType("sweep", Settings, count_units="ref_types_mod:count",
                             compute_unit="ref_types_mod:unit")
            class Catalog:
                SOLVE = TaskType("solve", Settings, command="solve {out}")
            """
        )
    )
    import ref_types_mod  # type: ignore[import-not-found]  # written by this test

    assert load_plugin_ref("ref_types_mod:SWEEP") is ref_types_mod.SWEEP
    assert load_plugin_ref("ref_types_mod:Catalog.SOLVE").name == "solve"


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("ref_bad_mod.SWEEP", "'ref_bad_mod.SWEEP' is not of the form 'module:OBJECT'"),
        (":SWEEP", "is not of the form 'module:OBJECT'"),
        ("ref_bad_mod:", "is not of the form 'module:OBJECT'"),
        ("ref-bad:SWEEP", "'ref-bad' is not a module path"),
        ("no_such_plugin_xyz:SWEEP", "cannot import module 'no_such_plugin_xyz'"),
        ("ref_raising_mod:SWEEP", "importing module 'ref_raising_mod' failed: RuntimeError"),
        ("ref_bad_mod:MISSING", "module 'ref_bad_mod' has no attribute 'MISSING'"),
        ("ref_bad_mod:count", "task type is a function, not a simrun.plugins.TaskType"),
        ("ref_bad_mod:LAZY", "task type has neither a command nor a compute_unit"),
    ],
)
def test_load_plugin_ref_says_what_is_wrong(plugin_dir: Path, ref: str, expected: str) -> None:
    """A reference that does not give a usable TaskType raises PluginError naming the
    reference and the step that failed: its form, the import, the attribute, the type."""
    (plugin_dir / "ref_bad_mod.py").write_text(
        textwrap.dedent(PLUGIN_HEADER) + 'LAZY = TaskType("lazy", Settings)\n'
    )
    (plugin_dir / "ref_raising_mod.py").write_text("raise RuntimeError('no licence')\n")
    with pytest.raises(PluginError) as info:
        load_plugin_ref(ref)
    message = str(info.value)
    assert message.startswith(f"plugin reference {ref!r}"), message
    assert expected in message, message


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("fit {settings} {out} --in={input}", None),
        ("fit {{literal}} {out}", None),
        ("fit {setting} {out}", "unknown placeholder '{setting}'"),
        ("fit --x={ {out}", "unmatched '{'"),
        ("fit 'open {out}", "cannot be split"),
    ],
)
def test_a_command_template_is_checked_before_it_runs(command: str, expected: str | None) -> None:
    """A command whose template `simrun-exec` could not expand (an unknown placeholder, a
    lone brace, an unclosed quote) is a problem of the type, found without running it."""
    problems = task_type_problems(TaskType("fit", Settings, command=command))
    if expected is None:
        assert problems == []
    else:
        (problem,) = problems
        assert expected in problem


def test_a_bad_command_template_is_refused_at_load(plugin_dir: Path) -> None:
    """Loading refuses a type whose command template uses an unknown placeholder, naming
    the entry point and the distribution."""
    body = 'FIT = TaskType("fit", Settings, command="fit {setting} {out}")\n'
    message = refused(plugin_dir, "tmpl-plugin", body, {"fit": "FIT"})
    assert "entry point 'fit' = 'tmpl_plugin_mod:FIT' (distribution tmpl-plugin)" in message
    assert "unknown placeholder '{setting}'" in message
