"""The forced tool-call constraint and the tool checks (engine/structured_tools.py) without a
model: pydantic-style `$defs` / `$ref` parameters, OpenAI's strictness default (absent = not
strict), strict tools under OpenAI's strict rules, the bound on parallel calls."""

import json

import pytest

from llaisys.engine.structured_spec import StructuredOutputError
from llaisys.engine.structured_tools import MAX_TOOL_CALLS, rebase_refs, tool_call_spec
from pydantic_trip import TRIP_PARAMS


def tool(name, params, **kw):
    return {"type": "function", "function": dict({"name": name, "parameters": params}, **kw)}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "plan_trip"}}])
def test_pydantic_defs_compile_when_forced(choice):
    """Nested under the call's "arguments", "#/$defs/Place" pointed nowhere: a 400 "Pointer
    '/$defs/A' does not exist". The references are rebased to where the parameters sit."""
    tools = [tool("plan_trip", TRIP_PARAMS), tool("get_time", {"type": "object", "properties": {"zone": {"type": "string"}}})]
    spec = tool_call_spec(tools, choice)
    assert '"$ref": "#/properties/arguments/$defs/Place"' in spec.value
    assert TRIP_PARAMS["properties"]["start"] == {"$ref": "#/$defs/Place"}  # the request's schema is not changed
    recursive = {"type": "object", "properties": {"name": {"type": "string"},
                                                  "children": {"type": "array", "items": {"$ref": "#"}}}}
    assert tool_call_spec([tool("tree", recursive)], "required")


def test_rebase_refs_leaves_data_and_foreign_refs():
    schema = {"properties": {"default": {"$ref": "#/definitions/X"}, "a": {"const": {"$ref": "#/x"}},
                             "b": {"$ref": "other.json#/x"}, "c": {"enum": [{"$ref": "#"}]}},
              "definitions": {"X": {"$ref": "#"}}}
    out = rebase_refs(schema, "#/p")
    assert out["properties"]["default"] == {"$ref": "#/p/definitions/X"}  # a property named like a data keyword
    assert out["definitions"]["X"] == {"$ref": "#/p"}
    assert out["properties"]["a"] == {"const": {"$ref": "#/x"}} and out["properties"]["c"] == {"enum": [{"$ref": "#"}]}
    assert out["properties"]["b"] == {"$ref": "other.json#/x"}
    deep = {"$ref": "#/$defs/A"}
    for _ in range(5000):  # deeper than Python's recursion limit: the walk is iterative
        deep = {"type": "array", "items": deep}
    out = rebase_refs(deep, "#/q")
    for _ in range(5000):
        out = out["items"]
    assert out == {"$ref": "#/q/$defs/A"}


def test_tools_are_lenient_unless_strict_true():
    """OpenAI's default is strict false: a keyword the grammar compiler does not implement
    (uniqueItems) is ignored; with strict true it is refused, as are OpenAI's strict rules'
    breaches, whatever tool_choice is, naming the JSON path."""
    params = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                        "uniqueItems": True}},
              "required": ["tags"], "additionalProperties": False}
    assert tool_call_spec([tool("tag", params)], "required")
    assert tool_call_spec([tool("tag", params, strict=False)], "required")
    with pytest.raises(StructuredOutputError) as e:
        tool_call_spec([tool("tag", params, strict=True)], "required")
    assert e.value.param == "tools" and "uniqueItems" in str(e.value)
    loose = {"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {"type": "string"}},
                                                    "required": ["y"]}}, "required": ["x"],
             "additionalProperties": False}
    assert tool_call_spec([tool("f", loose)], "required")
    for choice in ("required", "auto"):
        with pytest.raises(StructuredOutputError) as e:
            tool_call_spec([tool("g", {"type": "object"}), tool("f", loose, strict=True)], choice)
        assert e.value.param == "tools" and "tools[1].function.parameters.properties.x" in str(e.value)
    assert tool_call_spec([tool("f", None, strict=True)], "required")  # no parameters: an empty object


def test_parallel_calls_are_bounded_in_the_grammar():
    spec = tool_call_spec([tool("f", {"type": "object", "properties": {}})], "required").value
    assert MAX_TOOL_CALLS == 8 and spec.startswith('start: call ("\\n" call){0,7}\n')
    one = tool_call_spec([tool("f", None)], "required", parallel=False).value
    assert one.startswith("start: call\n")
    body = json.loads(one.split("%json ", 1)[1])
    assert body["properties"]["arguments"]["additionalProperties"] is False


def test_open_integers_in_tool_parameters_are_bounded_and_impossible_bounds_refused():
    from llaisys.engine.structured import SAFE_INT
    from llaisys.engine.structured_tools import _call_schema

    params = {"type": "object", "properties": {"n": {"type": "integer"}, "m": {"type": "integer", "minimum": 0}}}
    args = _call_schema("f", params, False)["properties"]["arguments"]
    assert args["properties"]["n"] == {"type": "integer", "minimum": -SAFE_INT, "maximum": SAFE_INT}
    assert args["properties"]["m"] == {"type": "integer", "minimum": 0, "maximum": SAFE_INT}
    assert params["properties"]["n"] == {"type": "integer"}  # the request's own schema is not changed
    huge = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1e300}}}
    with pytest.raises(StructuredOutputError) as e:
        tool_call_spec([{"type": "function", "function": {"name": "f", "parameters": huge}}], "required")
    assert e.value.param == "tools"
