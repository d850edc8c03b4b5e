"""What a request's output must match: ``StructuredSpec``, and ``StructuredOutputError``.

Plain data and the error type, shared by every structured*.py module and the server; this
module imports none of them (nor llguidance). Compiling a spec is structured.py's
(``grammar_of``); matching it token by token is structured_matcher.py's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

KINDS = ("json_object", "json_schema", "regex", "lark", "gbnf")
MAX_SPEC_CHARS = 256 * 1024  # longest schema / grammar text a request may send
# JSON generation options (llguidance JsonCompileOptions): compact, fixed separators
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# JSON Schema keywords for the walks over a request's schema (structured.py, structured_tools.py,
# strict_schema.py): values under DATA_KEYWORDS are data, not schemas; under NAME_MAPS every
# value is a schema, whatever its name
DATA_KEYWORDS = ("enum", "const", "default", "examples")
NAME_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


class StructuredOutputError(ValueError):
    """An invalid or unsupported structured-output spec; ``param`` names the request field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class StructuredSpec:
    """What a request's output must match. Build one with the classmethods."""

    kind: str  # one of KINDS
    value: str = ""  # json_schema: the schema as JSON text; regex: the pattern; lark/gbnf: the grammar
    strict: bool = True  # json_schema: False lets llguidance ignore keywords it does not implement
    # the request field the spec came from ("response_format", "tools"), named by errors met
    # while generating under it; not part of the spec's identity (equality, cache keys)
    param: str = field(default="structured", compare=False)

    @classmethod
    def json_object(cls) -> "StructuredSpec":
        return cls("json_object")

    @classmethod
    def json_schema(cls, schema, strict: bool = True) -> "StructuredSpec":
        """schema: a dict (or its JSON text)."""
        if isinstance(schema, (dict, bool)):
            try:
                schema = json.dumps(schema)  # key order kept: properties are generated in it
            except RecursionError:  # the encoder nests a frame per level
                raise StructuredOutputError("structured", "structured: the schema nests too deeply") from None
        return cls("json_schema", schema, bool(strict))

    @classmethod
    def regex(cls, pattern: str) -> "StructuredSpec":
        return cls("regex", pattern)

    @classmethod
    def lark(cls, grammar: str) -> "StructuredSpec":
        return cls("lark", grammar)

    @classmethod
    def gbnf(cls, grammar: str) -> "StructuredSpec":
        return cls("gbnf", grammar)

