"""ResourceKey's text form and resource_key, the one place a task's key is derived."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from simrun.plugins import TaskType
from simrun.resources import ResourceKey, resource_key


class Grid(StrEnum):
    coarse = "coarse"
    fine = "fine"


class HeatSettings(BaseModel):
    grid: int = 64
    steps: int = 100


class FitSettings(BaseModel):
    subset: dict[str, Any] = Field(default_factory=lambda: {"b": 2, "a": 1})
    tolerance: float = 1e-6


class MeshSettings(BaseModel):
    resolution: Grid = Grid.coarse
    label: str = "default"


class RequiredSettings(BaseModel):
    size: int


def task_type(settings: type[BaseModel], cost_setting: str | None) -> TaskType:
    return TaskType(
        name="demo",
        settings=settings,
        count_units="m:count",
        compute_unit="m:unit",
        cost_setting=cost_setting,
    )


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (ResourceKey("heat", "plate", "64"), "heat/plate/64"),
        (ResourceKey("heat", "plate"), "heat/plate"),
        (ResourceKey("heat", ""), "heat/"),
        (ResourceKey("heat", "", "64"), "heat//64"),
        (ResourceKey("fit", "m", '{"a":1}'), 'fit/m/{"a":1}'),
        (ResourceKey("fit", "m", "a/b/c"), "fit/m/a/b/c"),
    ],
)
def test_text_form_and_back(key: ResourceKey, text: str) -> None:
    """text() is type/model[/variant] and from_text reads it back to the same key."""
    assert key.text() == text
    assert str(key) == text
    assert ResourceKey.from_text(text) == key


@given(
    st.text(min_size=1).filter(lambda s: "/" not in s),
    st.text().filter(lambda s: "/" not in s),
    st.text(),
)
def test_text_round_trip_is_exact(task_type_name: str, model: str, variant: str) -> None:
    """Any key whose type and model have no '/' reads back from its text unchanged."""
    key = ResourceKey(task_type_name, model, variant)
    assert ResourceKey.from_text(key.text()) == key


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "m", ""), "task_type is empty"),
        (("a/b", "m", ""), "task_type 'a/b' contains '/'"),
        (("heat", "pl/ate", ""), "model 'pl/ate' contains '/'"),
    ],
)
def test_bad_keys_are_refused(args: tuple[str, str, str], message: str) -> None:
    """A key whose text would be ambiguous is refused, naming the part at fault."""
    with pytest.raises(ValueError, match=message):
        ResourceKey(*args)


def test_text_without_separator_is_refused() -> None:
    """from_text of text without '/' says which text it could not read."""
    with pytest.raises(ValueError, match="'heat' is not 'task_type/model'"):
        ResourceKey.from_text("heat")


@pytest.mark.parametrize(
    ("settings_model", "cost", "settings", "variant"),
    [
        # no cost setting: empty variant, whatever the settings
        (HeatSettings, None, {"grid": 128}, ""),
        # the setting as given, an int as JSON
        (HeatSettings, "grid", {"grid": 128}, "128"),
        # the task leaves it out: the model's default
        (HeatSettings, "grid", {}, "64"),
        (HeatSettings, "grid", {"steps": 5}, "64"),
        # a string setting: the text as is
        (MeshSettings, "label", {"label": "wing tip"}, "wing tip"),
        (MeshSettings, "label", {}, "default"),
        # an enum reads as its value
        (MeshSettings, "resolution", {"resolution": "fine"}, "fine"),
        # a mapping: canonical JSON with sorted keys, default or given in any order
        (FitSettings, "subset", {}, '{"a":1,"b":2}'),
        (FitSettings, "subset", {"subset": {"z": [1, 2], "a": None}}, '{"a":null,"z":[1,2]}'),
        # a float setting: the model's reading, so 1 and 1.0 are one key
        (FitSettings, "tolerance", {"tolerance": 1}, "1.0"),
        (FitSettings, "tolerance", {"tolerance": 1.0}, "1.0"),
    ],
)
def test_resource_key_variants(
    settings_model: type[BaseModel], cost: str | None, settings: dict[str, Any], variant: str
) -> None:
    """The variant is the cost setting's value (default when unset) as text or canonical
    JSON, and empty for a type without a cost setting."""
    key = resource_key(task_type(settings_model, cost), settings, "plate")
    assert key == ResourceKey("demo", "plate", variant)


def test_equal_values_in_any_order_give_equal_keys() -> None:
    """Two mappings that differ only in key order give one key."""
    tt = task_type(FitSettings, "subset")
    one = resource_key(tt, {"subset": {"x": 1, "y": {"q": 2, "p": 3}}}, "m")
    two = resource_key(tt, {"subset": {"y": {"p": 3, "q": 2}, "x": 1}}, "m")
    assert one == two
    assert one.variant == '{"x":1,"y":{"p":3,"q":2}}'


def test_model_is_part_of_the_key() -> None:
    """The model (the run's first source) separates keys; empty without sources."""
    tt = task_type(HeatSettings, "grid")
    assert resource_key(tt, {}, "") == ResourceKey("demo", "", "64")
    assert resource_key(tt, {}, "plate") != resource_key(tt, {}, "beam")


def test_unset_required_cost_setting_is_an_error() -> None:
    """A cost setting with no value and no default cannot give a key: the error names it."""
    with pytest.raises(ValueError, match="cost setting 'size'"):
        resource_key(task_type(RequiredSettings, "size"), {}, "m")


def test_cost_setting_that_is_not_a_field_is_an_error() -> None:
    """A cost_setting naming no field of the settings model is reported by name."""
    with pytest.raises(ValueError, match="cost_setting 'mesh' is not a field of HeatSettings"):
        resource_key(task_type(HeatSettings, "mesh"), {}, "m")
