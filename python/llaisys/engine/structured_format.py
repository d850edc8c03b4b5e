"""OpenAI's ``response_format`` (and this server's grammar extension) as a StructuredSpec.

Accepted shapes (anything else is a StructuredOutputError with param "response_format"):

    {"type": "text"}                                   no constraint (None)
    {"type": "json_object"}                            any JSON object
    {"type": "json_object", "schema": {...}}           llama.cpp's form: JSON matching the schema
    {"type": "json_schema", "json_schema": {"name": "a-zA-Z0-9_-, 1..64", "description": str,
                                            "schema": {...}, "strict": bool | null}}
    {"type": "json_schema", "name": ..., "schema": {...}, "strict": ...}
                                                       the Responses API's text.format (flat)
    {"type": "regex", "regex": "<pattern>"}            extension: text matching the regex
    {"type": "grammar", "grammar": "<text>", "syntax": "lark" | "gbnf"}
                                                       extension: a Lark (default; llguidance's
                                                       dialect) or GBNF context-free grammar

``strict`` true compiles the schema exactly: a keyword llguidance does not implement is an
error, and the schema must follow OpenAI's strict rules (strict_schema.py: every object sets
``additionalProperties: false`` and lists all its properties in ``required``; the error names
the offending object's JSON path, e.g. ``response_format.json_schema.schema.properties.a``). Absent, null or false (OpenAI's default), such keywords are ignored; what is enforced is
always enforced. A missing ``schema`` allows any JSON value.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from .strict_schema import check_strict_schema
from .structured import grammar_of
from .structured_spec import MAX_SPEC_CHARS, StructuredOutputError, StructuredSpec

PARAM = "response_format"
TYPES = ("text", "json_object", "json_schema", "regex", "grammar")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

# JSON Schema of the field (for the request schemas and /openapi.json)
RESPONSE_FORMAT_SCHEMA = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": list(TYPES)},
        "json_schema": {"type": "object", "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 64},
            "description": {"type": "string"},
            "schema": {"type": ["object", "boolean"]},
            "strict": {"type": ["boolean", "null"]}}, "required": ["name"]},
        "schema": {"type": ["object", "boolean"], "description": "json_object only: llama.cpp's schema field"},
        "regex": {"type": "string", "maxLength": MAX_SPEC_CHARS},
        "grammar": {"type": "string", "maxLength": MAX_SPEC_CHARS},
        "syntax": {"type": "string", "enum": ["lark", "gbnf"]},
        "name": {"type": "string", "minLength": 1, "maxLength": 64, "description": "Responses API text.format"},
        "strict": {"type": ["boolean", "null"], "description": "Responses API text.format"},
    },
    "required": ["type"],
    "description": "text; json_object; json_schema {name, schema, strict}; extensions: regex {regex}, "
                   "grammar {grammar, syntax: lark | gbnf}",
}


def _fail(message: str):
    raise StructuredOutputError(PARAM, f"{PARAM}: {message}")


def _text_field(rf: dict, key: str) -> str:
    v = rf.get(key)
    if not isinstance(v, str) or not v:
        _fail(f"type {rf['type']!r} needs a non-empty string {key!r}")
    return v


def response_format_spec(rf) -> Optional[StructuredSpec]:
    """The constraint of a request's ``response_format`` (None: free text), validated and
    compiled (cached), so a bad schema or grammar is refused before the engine sees it."""
    if rf is None:
        return None
    if not isinstance(rf, dict) or rf.get("type") not in TYPES:
        _fail(f"must be an object whose type is one of {', '.join(TYPES)}, got {rf!r:.200}")
    kind = rf["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        spec = StructuredSpec.json_object() if rf.get("schema") is None else \
            StructuredSpec.json_schema(rf["schema"], strict=False)
    elif kind == "json_schema":
        js = rf.get("json_schema")
        if js is None and "name" in rf:  # the Responses API's flat text.format
            js = rf
        if not isinstance(js, dict):
            _fail("type 'json_schema' needs a 'json_schema' object {name, schema, strict}")
        name = js.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            _fail(f"json_schema.name must be 1 to 64 letters, digits, '_' or '-', got {name!r:.80}")
        schema = js.get("schema", {})
        if not isinstance(schema, (dict, bool)):
            _fail(f"json_schema.schema must be a JSON Schema object, got {type(schema).__name__}")
        strict = js.get("strict")
        if strict is not None and not isinstance(strict, bool):
            _fail(f"json_schema.strict must be a boolean or null, got {strict!r:.80}")
        if strict:  # OpenAI's rules: every object closed (additionalProperties false), all fields required
            check_strict_schema(schema, f"{PARAM}.json_schema.schema" if js is not rf else f"{PARAM}.schema")
        spec = StructuredSpec.json_schema(schema, strict=bool(strict))
    elif kind == "regex":
        spec = StructuredSpec.regex(_text_field(rf, "regex"))
    else:
        syntax = rf.get("syntax", "lark")
        if syntax not in ("lark", "gbnf"):
            _fail(f"grammar syntax must be 'lark' or 'gbnf', got {syntax!r:.80}")
        spec = StructuredSpec(syntax, _text_field(rf, "grammar"))
    spec = dataclasses.replace(spec, param=PARAM)  # errors while generating name response_format
    grammar_of(spec, PARAM)  # StructuredOutputError naming response_format
    return spec
