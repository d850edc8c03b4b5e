"""OpenAI's rules for ``strict: true`` JSON schemas (response_format json_schema, and tools).

OpenAI refuses a strict schema in which an object may carry keys the schema does not name, or
may leave one of its properties out: with strict true every object schema must set
``"additionalProperties": false`` and list all of its ``properties`` in ``required`` (an
optional field is written as a required one whose type admits null). ``check_strict_schema``
applies these rules to every object schema reachable in the document: properties,
items / prefixItems, anyOf / oneOf / allOf / not, $defs / definitions, if / then / else,
patternProperties, dependentSchemas and a schema-valued additionalProperties. Data keywords
(enum, const, default, examples) are not schemas and are not looked into.

An "object schema" is a dict whose ``type`` is "object" (or a list holding "object"), or that has
``properties`` without a ``type``. The walk is iterative (a request's schema may nest deeper than
Python's recursion limit) and visits each node once, so it is linear in the schema's size.
"""

from __future__ import annotations

import json
import re

from .structured_spec import NAME_MAPS, StructuredOutputError

# keyword -> how its value holds subschemas: "one" a schema, "list" a list of schemas,
# "map" a dict of name -> schema (NAME_MAPS)
_SUBSCHEMAS = {
    "items": "one_or_list", "additionalItems": "one", "contains": "one", "not": "one", "if": "one",
    "then": "one", "else": "one", "additionalProperties": "one", "propertyNames": "one",
    "unevaluatedItems": "one", "unevaluatedProperties": "one",
    "prefixItems": "list", "anyOf": "list", "oneOf": "list", "allOf": "list",
    **{kw: "map" for kw in NAME_MAPS},
}
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")


def _key(path: str, name) -> str:
    """path extended by a dict key: .name when it reads plainly, else ["name"] (JSON-quoted)."""
    name = str(name)
    if _IDENT.fullmatch(name):
        return f"{path}.{name}"
    return f"{path}[{json.dumps(name)[:80]}]"


def _is_object(node: dict) -> bool:
    t = node.get("type")
    if t is None:
        return "properties" in node
    return t == "object" or (isinstance(t, list) and "object" in t)


def _check_object(node: dict, path: str) -> None:
    if node.get("additionalProperties") is not False:
        raise StructuredOutputError(path, f"{path}: with strict true every object schema must set "
                                          f"\"additionalProperties\": false (as OpenAI requires)")
    props = node.get("properties", {})
    if not isinstance(props, dict):
        raise StructuredOutputError(path, f"{path}.properties must be an object")
    required = node.get("required", [])
    if not isinstance(required, list):
        raise StructuredOutputError(path, f"{path}.required must be a list of property names")
    missing = [k for k in props if k not in required]
    if missing:
        raise StructuredOutputError(path, f"{path}: with strict true \"required\" must list every property "
                                          f"(as OpenAI requires; write an optional one as a type that allows "
                                          f"null); missing: {', '.join(repr(k) for k in missing[:5])[:200]}")


def check_strict_schema(schema, param: str) -> None:
    """Raises StructuredOutputError unless every object schema in `schema` follows OpenAI's
    strict rules (``additionalProperties: false``, all properties required).

    Args:
      schema: the JSON schema (a dict or a bool; a bool has no objects and passes).
      param: the JSON path of `schema` in the request, e.g.
        ``"response_format.json_schema.schema"`` or ``"tools[0].function.parameters"``.

    The error's ``param`` and message name the JSON path of the offending object, e.g.
    ``response_format.json_schema.schema.properties.a`` (list members as ``anyOf[1]``)."""
    stack = [(schema, param)]
    seen = set()  # ids of the dicts visited (a shared subtree is checked once)
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        if _is_object(node):
            _check_object(node, path)
        for kw, how in _SUBSCHEMAS.items():
            sub = node.get(kw)
            if sub is None:
                continue
            if isinstance(sub, dict) and how in ("one", "one_or_list"):
                stack.append((sub, _key(path, kw)))
            elif isinstance(sub, list) and how in ("list", "one_or_list"):
                stack.extend((s, f"{_key(path, kw)}[{i}]") for i, s in enumerate(sub))
            elif isinstance(sub, dict) and how == "map":
                stack.extend((s, _key(_key(path, kw), name)) for name, s in sub.items())
