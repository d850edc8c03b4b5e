"""The validator the routes check request bodies with, and the JSON Schema (2020-12, the
dialect of OpenAPI 3.1) building blocks and bounds every body is made of. The bodies
themselves are built in ``request_schemas.py`` (``request_schemas(limits)``) and
``response_schemas.py`` (``RESPONSE_SCHEMAS``) from the blocks here; this module imports
neither, so each of them and ``parse.py`` can import it.

The same dicts are served as the OpenAPI description (``openapi.py``), so what the server
accepts and what it documents cannot drift apart. Schemas that depend on the server's
options (``n``, ``max_tokens``, stop strings) are built from its ``Limits``.

The validator knows the subset of JSON Schema used here (type, enum, const, minimum,
maximum, exclusiveMinimum, minLength, maxLength, pattern, minItems, maxItems, items,
properties, required, additionalProperties, propertyNames, maxProperties, anyOf) plus two
extensions for the error it raises: ``x-code`` (the error code of any failure at or under
that node; default ``invalid_type`` for a wrong type, ``invalid_value`` for the rest) and
``x-message`` (the message when none of an ``anyOf``'s branches fits). Its error is a 400
naming the body's top-level field (``param``) and the path inside it. ``anyOf`` branches
must differ by JSON type, so the branch to report is the one whose type the value has.

Integers are Python ints (not bools); numbers are finite ints or floats. Valid Unicode
(no lone surrogate, which JSON can carry as ``\\ud800``) is checked once for the whole body,
keys included, where it is parsed (``app.parse_json_body``), before any schema runs.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Optional

from .errors import APIError

MAX_PROMPTS = 64  # most prompts in one /v1/completions request
MAX_EMBEDDING_INPUTS = 256  # most inputs in one /v1/embeddings request
MAX_MESSAGES = 4096  # most messages in one chat request
MAX_LOGIT_BIAS_ENTRIES = 300  # OpenAI's limit
MAX_TOKEN_ID = 2 ** 31 - 1  # the widest id a model's vocabulary could hold (ids are int32 in the core)
MAX_SEED = 2 ** 64 - 1  # seeds are 64-bit
MAX_INT = 2 ** 31 - 1  # counts (max_tokens, min_tokens, top_k) never need more
MAX_NAME_LEN = 256  # model, user, name fields
MAX_ID_LEN = 128  # session ids
F32_TINY = 1e-30  # the least top_p / repetition_penalty: a smaller double can be 0 as the core's float32
ROLES = ("system", "user", "assistant", "tool", "developer")  # the chat roles a request may use

_JSON_TYPES = {"string": "a string", "integer": "an integer", "number": "a finite number", "boolean": "a boolean",
               "array": "an array", "object": "an object", "null": "null"}


# ---- the validator -------------------------------------------------------------------------
def _type_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _has_type(v, t: str) -> bool:
    got = _type_of(v)
    if t == "number":
        return got in ("integer", "number") and (got == "integer" or math.isfinite(v))
    return got == t


def _types(schema: dict) -> Optional[list]:
    t = schema.get("type")
    return None if t is None else ([t] if isinstance(t, str) else list(t))


def _where(path: tuple) -> str:
    out = str(path[0]) if path else "the request body"
    for p in path[1:]:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


class _Fail(Exception):
    def __init__(self, path: tuple, message: str, code: str, type_error: bool = False):
        super().__init__(message)
        self.path, self.message, self.code, self.type_error = path, message, code, type_error


def _check(schema: dict, v, path: tuple, code: Optional[str]) -> None:
    code = schema.get("x-code", code)  # an ancestor's x-code applies under it
    where = _where(path)

    def fail(message, default_code, type_error=False):
        raise _Fail(path, message, code or default_code, type_error)

    types = _types(schema)
    if types is not None and not any(_has_type(v, t) for t in types):
        if isinstance(v, float) and not math.isfinite(v) and "number" in types:
            fail(f"'{where}' must be a finite number, got {v}", "invalid_type", True)
        fail(f"'{where}' must be {' or '.join(_JSON_TYPES[t] for t in types)}, got {_type_of(v)}", "invalid_type",
             True)
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if _types(b) is None or any(_has_type(v, t) for t in _types(b))]
        if not branches:
            fail(schema.get("x-message", f"'{where}' has the wrong type ({_type_of(v)})").format(where=where,
                                                                                                 got=_type_of(v)),
                 "invalid_type", True)
        errors = []
        for b in branches:
            try:
                _check(b, v, path, code)
                break
            except _Fail as e:
                errors.append(e)
        else:
            raise errors[0]
    if "const" in schema and v != schema["const"]:
        fail(f"'{where}' must be {schema['const']!r}, got {v!r}", "invalid_value")
    if "enum" in schema and v not in schema["enum"]:
        fail(f"'{where}' must be one of {', '.join(map(repr, schema['enum']))}, got {_short(v)}", "invalid_value")
    if isinstance(v, str):
        _check_string(schema, v, path, where, fail)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        _check_number(schema, v, where, fail)
    elif isinstance(v, list):
        if len(v) < schema.get("minItems", 0):
            fail(f"'{where}' must hold at least {schema['minItems']} item(s), got {len(v)}", "invalid_value")
        if "maxItems" in schema and len(v) > schema["maxItems"]:
            fail(f"'{where}' may hold at most {schema['maxItems']} items, got {len(v)}", "invalid_value")
        items = schema.get("items")
        if items is not None:
            for i, x in enumerate(v):
                _check(items, x, path + (i,), code)
    elif isinstance(v, dict):
        _check_object(schema, v, path, where, code, fail)


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _check_string(schema: dict, v: str, path: tuple, where: str, fail) -> None:
    if len(v) < schema.get("minLength", 0):
        fail(f"'{where}' must not be empty" if schema["minLength"] == 1 else
             f"'{where}' must be at least {schema['minLength']} characters", "invalid_value")
    if "maxLength" in schema and len(v) > schema["maxLength"]:
        fail(f"'{where}' may be at most {schema['maxLength']} characters, got {len(v)}", "invalid_value")
    if "pattern" in schema and not _regex(schema["pattern"]).search(v):
        fail(f"'{where}' must match {schema['pattern']}, got {_short(v)}", "invalid_value")


@functools.lru_cache(maxsize=None)
def _regex(pattern: str):
    return re.compile(pattern)


def _check_number(schema: dict, v, where: str, fail) -> None:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    xlo = schema.get("exclusiveMinimum")
    bad = (lo is not None and v < lo) or (hi is not None and v > hi) or (xlo is not None and v <= xlo)
    if bad:
        left = f"({xlo}" if xlo is not None else (f"[{lo}" if lo is not None else "(-inf")
        right = f"{hi}]" if hi is not None else "inf)"
        fail(schema.get("x-range-message", "'{where}' must be in {left}, {right}, got {got}").format(
            where=where, left=left, right=right, got=_short(v), lo=lo, hi=hi), "invalid_value")


def _check_object(schema: dict, v: dict, path: tuple, where: str, code, fail) -> None:
    if "maxProperties" in schema and len(v) > schema["maxProperties"]:
        fail(f"'{where}' may hold at most {schema['maxProperties']} entries, got {len(v)}", "invalid_value")
    for name in schema.get("required", ()):  # null is absent unless the field's schema takes null
        sub = schema.get("properties", {}).get(name, {})
        if name not in v or (v[name] is None and not is_valid(sub, None)):
            raise _Fail(path + (name,), f"'{_where(path + (name,))}' is a required field",
                        "missing_required_parameter" if not path else (code or "invalid_value"))
    names = schema.get("propertyNames")
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for k, x in v.items():
        if names is not None:
            _check(names, k, path + (k,), code)
        sub = props.get(k)
        if sub is None:
            if extra is False:
                raise _Fail(path + (k,), f"'{_where(path + (k,))}' is not a known field", code or "invalid_value")
            if isinstance(extra, dict):
                _check(extra, x, path + (k,), code)
            continue
        if x is None and not path:  # a top-level null is the same as leaving the field out (OpenAI's clients send them)
            continue
        _check(sub, x, path + (k,), code)


def validate(schema: dict, value, path: tuple = ()) -> None:
    """Check `value` against `schema`; APIError 400 naming the top-level field otherwise."""
    try:
        _check(schema, value, path, None)
    except _Fail as e:
        param = str(e.path[0]) if e.path else None
        raise APIError(400, e.message, param=param, code=e.code) from None


def is_valid(schema: dict, value) -> bool:
    try:
        _check(schema, value, (), None)
    except _Fail:
        return False
    return True


# ---- building blocks -------------------------------------------------------------------------
def _nullable(schema: dict) -> dict:
    """Top-level optional fields also take null (it means absent)."""
    s = dict(schema)
    t = s.get("type")
    if isinstance(t, str):
        s["type"] = [t, "null"]
    elif isinstance(t, list) and "null" not in t:
        s["type"] = t + ["null"]
    elif "anyOf" in s:
        s["anyOf"] = list(s["anyOf"]) + [{"type": "null"}]
    return s


def _num(lo=None, hi=None, xlo=None, desc: str = "") -> dict:
    s = {"type": "number"}
    if lo is not None:
        s["minimum"] = lo
    if xlo is not None:
        s["exclusiveMinimum"] = xlo
    if hi is not None:
        s["maximum"] = hi
    if desc:
        s["description"] = desc
    return s


def _int(lo=None, hi=None, desc: str = "") -> dict:
    s = {"type": "integer"}
    if lo is not None:
        s["minimum"] = lo
    if hi is not None:
        s["maximum"] = hi
    if desc:
        s["description"] = desc
    return s


def _str(desc: str = "", **kw) -> dict:
    s = {"type": "string", **kw}
    if desc:
        s["description"] = desc
    return s


BOOL = {"type": "boolean"}
TOKEN_ID = _int(0, MAX_TOKEN_ID)
TOKEN_IDS = {"type": "array", "items": TOKEN_ID}


def _obj(props: dict, required=(), desc: str = "", **kw) -> dict:
    s = {"type": "object", "properties": props, **kw}
    if required:
        s["required"] = list(required)
    if desc:
        s["description"] = desc
    return s


def _body(props: dict, required=(), desc: str = "") -> dict:
    """A request body: optional fields take null; unknown fields are ignored (OpenAI-compatible servers do)."""
    return _obj({k: (v if k in required else _nullable(v)) for k, v in props.items()}, required, desc)
