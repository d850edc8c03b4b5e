"""Fuzzing structured output (issue #39): depth and size sweeps up to and past the limits for
$ref chains, nesting, Lark and GBNF rule chains, and hypothesis-made schemas, through the Python
API (a crash of llguidance would kill this test process) and a smaller set through a real tiny
server: no crash, no hang past a bound, no 5xx, llguidance's internals never shown, and the
server answers afterwards. Bounded: ~60 examples, each sweep a handful of sizes."""

import json
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llaisys.engine import structured_limits as L
from llaisys.engine.structured import grammar_of
from llaisys.engine.structured_spec import StructuredOutputError, StructuredSpec

INTERNAL = ("NoExtensionBias", "<state>", "Too many items", "Parser:")


def ref_chain(n):
    defs = {f"d{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def nest(n):
    s = {"type": "string"}
    for _ in range(n):
        s = {"type": "object", "properties": {"a": s}}
    return s


def lark_chain(n):
    return "start: r0\n" + "".join(f'r{i}: "x" r{i + 1}\n' for i in range(n)) + f'r{n}: "y"\n'


def gbnf_chain(n):
    return "root ::= r0\n" + "".join(f'r{i} ::= "x" r{i + 1}\n' for i in range(n)) + f'r{n} ::= "y"\n'


def compiles(make) -> bool:
    """True if make() gives a spec that compiles, False if refused with a clean StructuredOutputError."""
    try:
        grammar_of(make(), "response_format")
        return True
    except StructuredOutputError as e:
        assert e.param in ("response_format", "structured") and not any(i in str(e) for i in INTERNAL), e
        return False


SWEEPS = [
    ("ref", lambda n: StructuredSpec.json_schema(ref_chain(n)), L.MAX_REF_CHAIN, [10, 1000, 2000, 8000]),
    ("nest", lambda n: StructuredSpec.json_schema(nest(n)), L.MAX_JSON_DEPTH // 2, [5, 200, 2000, 6000]),
    ("lark", lambda n: StructuredSpec.lark(lark_chain(n)), L.MAX_RULE_DEPTH, [10, 1500, 3000, 6000]),
    ("gbnf", lambda n: StructuredSpec.gbnf(gbnf_chain(n)), L.MAX_GBNF_RULES, [10, 600, 4000, 8000]),
]


@pytest.mark.parametrize("name, make, limit, past", SWEEPS, ids=[s[0] for s in SWEEPS])
def test_depth_sweeps_up_to_and_past_the_limits(name, make, limit, past):
    """Under the limit compiles; past it (up to ~9x the native crash point) is a clean refusal."""
    for n in sorted({limit - 2, limit + 2, *past}):
        t0 = time.monotonic()
        ok = compiles(lambda: make(n))
        assert time.monotonic() - t0 < 30, (name, n)  # generous: no hang
        assert ok == (n <= limit - 2), (name, n, ok)


# a random schema: objects, arrays, anyOf / allOf, enums, bounds, and $refs into 3 $defs
_leaf = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "boolean", "null", "number"])}),
    st.fixed_dictionaries({"type": st.just("integer"), "minimum": st.integers(-2 ** 70, 2 ** 70),
                           "maximum": st.integers(-2 ** 70, 2 ** 70)}),
    st.fixed_dictionaries({"enum": st.lists(st.integers(0, 9) | st.text(max_size=3), max_size=3)}),
    st.sampled_from([{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}, {"$ref": "#"}, {"$ref": "#/$defs/c"}]),
)
_schema = st.recursive(_leaf, lambda inner: st.one_of(
    st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(st.sampled_from("pqrs"), inner,
                                                                                        max_size=3),
                           "required": st.lists(st.sampled_from("pqrs"), max_size=2, unique=True)}),
    st.fixed_dictionaries({"type": st.just("array"), "items": inner, "minItems": st.integers(0, 2)}),
    st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"allOf": st.lists(inner, min_size=1, max_size=2)})), max_leaves=12)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(root=_schema, a=_schema, b=_schema, strict=st.booleans())
def test_random_schemas_compile_or_are_refused_cleanly(root, a, b, strict):
    schema = dict(root) if isinstance(root, dict) else {"anyOf": [root]}
    schema["$defs"] = {"a": a, "b": b}  # "#/$defs/c" stays dangling: an error, never a crash
    compiles(lambda: StructuredSpec.json_schema(schema, strict=strict))


# ---- through a real server -----------------------------------------------------------------
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # server_helpers (test/server)


@pytest.fixture(scope="module")
def tiny_server(qwen05_dir, tmp_path_factory):
    from server_helpers import launch
    from tiny_checkpoint import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path_factory.mktemp("fuzz_tiny"), qwen05_dir, tie=True)
    srv = launch(model, tmp_path_factory.mktemp("fuzz_server"), "--max-num-seqs", "4")
    yield srv
    srv.stop()


BOMBS = [
    {"type": "json_schema", "json_schema": {"name": "x", "schema": ref_chain(1000)}},
    {"type": "json_schema", "json_schema": {"name": "x", "schema": nest(400)}},
    {"type": "grammar", "grammar": lark_chain(5000)},
    {"type": "grammar", "syntax": "gbnf", "grammar": gbnf_chain(5000)},
    {"type": "grammar", "grammar": 'start: a\na: a "x"'},
    {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}}},
    {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]}}},
    {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "integer", "minimum": 1e300, "maximum": 1e308}}},
    {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}},
]


def test_bombs_through_a_server_are_400s_and_it_keeps_serving(tiny_server):
    import requests
    from server_helpers import MODEL_NAME

    url = tiny_server.url + "/v1/chat/completions"
    for rf in BOMBS:
        t0 = time.monotonic()
        r = requests.post(url, json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
                                     "max_tokens": 4, "temperature": 0, "response_format": rf}, timeout=120)
        assert time.monotonic() - t0 < 60
        assert r.status_code == 400, (json.dumps(rf)[:200], r.status_code, r.text[:500])
        err = r.json()["error"]
        assert err["param"].startswith("response_format") and not any(i in err["message"] for i in INTERNAL), err
        assert tiny_server.proc.poll() is None
    r = requests.post(url, json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                      timeout=120)
    assert r.status_code == 200, r.text
