"""Tool schemas and argument checks come from the signature, through pydantic."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Annotated, Any, Literal

import orjson
import pytest
from pydantic import AfterValidator, BaseModel, Field

from polyloop import ToolContext, tool
from polyloop._run.observe import observation_text

CTX = ToolContext("r", 1, 1, "s1-a1", "pl-key")


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: int
    y: int = 0


@dataclasses.dataclass
class Box:
    label: str
    points: list[Point]


def _props(t: Any) -> dict[str, Any]:
    return t.spec()["parameters"]["properties"]


def test_plain_types_give_the_same_schema_as_before_plus_defaults() -> None:
    @tool
    def write(path: str, count: int, ratio: float, force: bool = False) -> str:
        """Write a file."""
        return ""

    spec = write.spec()
    assert list(spec) == ["name", "description", "parameters"]
    assert (spec["name"], spec["description"]) == ("write", "Write a file.")
    params = spec["parameters"]
    assert {k: v for k, v in params.items() if k != "properties"} == {
        "type": "object", "required": ["path", "count", "ratio"], "additionalProperties": False
    }
    kinds = {name: (s["type"], s.get("default", "-")) for name, s in params["properties"].items()}
    assert kinds == {"path": ("string", "-"), "count": ("integer", "-"), "ratio": ("number", "-"), "force": ("boolean", False)}


def test_list_items_literal_enum_and_optional() -> None:
    @tool
    def pick(tags: list[str], mode: Literal["fast", "slow"], color: Color, note: str | None = None) -> str:
        return ""

    props = _props(pick)
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert props["color"] == {"$ref": "#/$defs/Color"}
    assert pick.parameters["$defs"]["Color"] == {"type": "string", "enum": ["red", "blue"]}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert pick.parameters["required"] == ["tags", "mode", "color"]


def test_nested_models_and_dataclasses_are_described_in_defs() -> None:
    @tool
    def draw(box: Box, origin: Point) -> str:
        return ""

    defs = draw.parameters["$defs"]
    assert _props(draw)["box"] == {"$ref": "#/$defs/Box"}
    assert defs["Point"] == {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
        "required": ["x"],
    }
    assert defs["Box"]["properties"]["points"] == {"type": "array", "items": {"$ref": "#/$defs/Point"}}
    orjson.dumps(draw.spec())  # what the adapters send is plain JSON


def test_descriptions_come_from_annotated_fields_and_the_docstring_args() -> None:
    @tool
    def search(
        query: Annotated[str, Field(description="what to look for")],
        limit: Annotated[int, Field(description="from Field", ge=1)] = 10,
        title: str = "",
    ) -> str:
        """Search the notes.

        Longer explanation that stays.

        Args:
            query: ignored, the Field wins.
            limit: also ignored.
            title (str): the note's title,
                on two lines.

        Returns:
            The matches.
        """
        return ""

    props = _props(search)
    assert props["query"] == {"type": "string", "description": "what to look for"}
    assert props["limit"] == {"type": "integer", "description": "from Field", "minimum": 1, "default": 10}
    # a parameter called `title` keeps its schema and its description
    assert props["title"] == {"type": "string", "description": "the note's title, on two lines.", "default": ""}
    assert search.description == "Search the notes.\n\nLonger explanation that stays.\n\nReturns:\n    The matches."


def test_an_explicit_description_overrides_the_docstring() -> None:
    @tool(description="Custom.")
    def f(a: int) -> str:
        """Doc.

        Args:
            a: the a.
        """
        return ""

    assert f.description == "Custom."
    assert _props(f)["a"] == {"type": "integer", "description": "the a."}


def test_ctx_is_excluded_by_name_and_by_annotation() -> None:
    @tool
    def a(x: int, ctx) -> str:  # type: ignore[no-untyped-def]
        return ""

    @tool
    def b(x: int, context: ToolContext) -> str:
        return ""

    for t in (a, b):
        assert list(_props(t)) == ["x"] and t.parameters["required"] == ["x"]


def test_names_that_clash_with_pydantic_attributes_are_fine() -> None:
    @tool
    def f(json: str, copy: int, model_id: str, schema: str = "x") -> str:
        return f"{json}{copy}{model_id}{schema}"

    assert list(_props(f)) == ["json", "copy", "model_id", "schema"]
    assert f.check_args({"json": "j", "copy": 1, "model_id": "m"}) is None


def test_unknown_and_unresolvable_types_become_any_value() -> None:
    class Opaque:
        pass

    @tool
    def f(thing: Opaque, other: "NotDefinedAnywhere", free=3) -> str:  # type: ignore[name-defined] # noqa: F821
        return ""

    assert _props(f)["thing"] == {} and _props(f)["other"] == {}
    assert _props(f)["free"] == {"default": 3}
    assert f.check_args({"thing": 1, "other": [1]}) is None


def test_kwargs_allow_extra_fields() -> None:
    @tool
    def f(a: int, **rest: Any) -> str:
        return ""

    assert "additionalProperties" not in f.parameters
    assert f.check_args({"a": 1, "b": 2}) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"path": "p"}, "count: required field missing"),
        ({"path": "p", "count": "ten"}, "count: Input should be a valid integer, unable to parse string as an integer (got 'ten')"),
        ({"path": 3, "count": 1}, "path: Input should be a valid string (got 3)"),
        ({"path": "p", "count": 1, "extra": 1}, "extra: unexpected field"),
        ({"path": "p", "count": 1, "mode": "x"}, "mode: Input should be 'a' or 'b' (got 'x')"),
        ({"path": "p", "count": 1, "color": "green"}, "color: Input should be 'red' or 'blue' (got 'green')"),
        ({"path": "p", "count": 1, "tags": ["a", 2]}, "tags.1: Input should be a valid string (got 2)"),
        ({"path": "p", "count": 1, "at": {"y": 1}}, "at.x: required field missing"),
        ({"path": "p", "count": 0}, "count: Input should be greater than or equal to 1 (got 0)"),
        ([1, 2], "the arguments must be a JSON object, not an array"),
        ("p", "the arguments must be a JSON object, not a string"),
    ],
)
def test_check_args_names_each_bad_field(args: Any, message: str) -> None:
    @tool
    def write(
        path: str,
        count: Annotated[int, Field(ge=1)],
        mode: Literal["a", "b"] = "a",
        color: Color = Color.RED,
        tags: list[str] | None = None,
        at: Point | None = None,
    ) -> str:
        return ""

    assert write.check_args(args) == f"invalid arguments for tool 'write': {message}"


def test_check_args_lists_every_problem_on_one_line() -> None:
    @tool
    def f(a: int, b: str) -> str:
        return ""

    msg = f.check_args({"a": "x", "c": 1})
    assert msg is not None and "\n" not in msg
    assert msg.startswith("invalid arguments for tool 'f': a: ")
    assert "b: required field missing" in msg and "c: unexpected field" in msg
    assert f.check_args({"a": 1, "b": "y"}) is None


async def test_invoke_passes_validated_values_and_never_mutates_args() -> None:
    seen: dict[str, Any] = {}

    @tool
    def draw(box: Box, color: Color, origin: Point | None = None, times: int = 1, ctx: ToolContext | None = None) -> str:
        seen.update(box=box, color=color, origin=origin, times=times, ctx=ctx)
        return "ok"

    args = {"box": {"label": "b", "points": [{"x": 1}]}, "color": "blue", "origin": {"x": 2, "y": 3}}
    frozen = orjson.dumps(args)
    assert await draw.invoke(args, CTX) == "ok"
    assert orjson.dumps(args) == frozen
    assert seen["box"] == Box("b", [Point(x=1, y=0)])
    assert seen["color"] is Color.BLUE and seen["origin"] == Point(x=2, y=3)
    assert seen["times"] == 1 and seen["ctx"] is CTX


async def test_invoke_async_and_positional_only_and_kwargs() -> None:
    @tool
    async def f(a: int, /, b: str, **rest: Any) -> str:
        return f"{a}-{b}-{sorted(rest.items())}"

    assert await f.invoke({"a": "4", "b": "x", "z": 1}, CTX) == "4-x-[('z', 1)]"


async def test_invoke_refuses_invalid_arguments_without_calling() -> None:
    calls = []

    @tool
    def f(a: int) -> str:
        calls.append(a)
        return ""

    with pytest.raises(TypeError, match=r"^invalid arguments for tool 'f': a: required field missing$"):
        await f.invoke({}, CTX)
    assert calls == []


_VALIDATED: list[int] = []


def _counted(v: int) -> int:
    _VALIDATED.append(v)
    return v


async def test_calls_checked_together_are_each_validated_once() -> None:
    # Concurrent runs share a tool: each checks its call, waits for its
    # intent's fsync, then invokes; the others' checks in between must not
    # make it validate again (nor mix up whose values are whose).
    _VALIDATED.clear()

    @tool
    def f(n: Annotated[int, AfterValidator(_counted)]) -> str:
        return str(n)

    calls = [{"n": i} for i in range(3)]
    assert [f.check_args(a) for a in calls] == [None, None, None]
    assert [await f.invoke(a, CTX) for a in reversed(calls)] == ["2", "1", "0"]
    assert _VALIDATED == [0, 1, 2]
    assert await f.invoke({"n": 7}, CTX) == "7" and _VALIDATED == [0, 1, 2, 7]  # never checked: validated here


def test_calling_the_tool_object_still_calls_the_function() -> None:
    @tool
    def add(a: int, b: int) -> int:
        return a + b

    assert add(1, 2) == 3 and repr(add) == "<Tool add replay=never>"


@dataclasses.dataclass
class Report:
    name: str
    when: datetime.date
    at: Point


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (None, ""),
        (Point(x=1), '{"x":1,"y":0}'),
        (Report("r", datetime.date(2026, 1, 2), Point(x=3)), '{"name":"r","when":"2026-01-02","at":{"x":3,"y":0}}'),
        ({"a": [1, 2], "p": Point(x=5)}, '{"a":[1,2],"p":{"x":5,"y":0}}'),
        ([Report("q", datetime.date(2026, 1, 1), Point(x=0))], '[{"name":"q","when":"2026-01-01","at":{"x":0,"y":0}}]'),
        (42, "42"),
        ({"c": Color.RED, "s": {1}}, '{"c":"red","s":"{1}"}'),
    ],
    ids=["str", "none", "model", "dataclass", "nested-model", "list-of-dataclasses", "int", "fallback-str"],
)
def test_observation_text(value: Any, text: str) -> None:
    assert observation_text(value) == text


def test_a_default_json_cannot_hold_is_left_out_of_the_schema() -> None:
    marker = object()

    @tool
    def f(a: Any = marker) -> str:
        return ""

    assert _props(f)["a"] == {}
    assert f.check_args({}) is None


def test_importing_polyloop_does_not_load_pydantic() -> None:
    import subprocess
    import sys

    code = "import sys, polyloop, polyloop.testing; print('pydantic' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
