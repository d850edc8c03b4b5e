"""Structured output against hostile schemas and grammars (issue #39): a spec past the
compiler's limits, with no finite text, or with numeric bounds the grammar cannot keep is a
StructuredOutputError (a 400 at the server) naming the limit or the problem in plain words,
never a crash of the process, and never llguidance's internal state; strict schemas follow
OpenAI's rules. The reproducers of the issue are here, through the Python API."""

import copy
import json
import threading

import numpy as np
import pytest

from llaisys.engine.strict_schema import check_strict_schema
from llaisys.engine.structured import grammar_of
from llaisys.engine.structured_format import response_format_spec
from llaisys.engine.structured_matcher import StructuredBackend
from llaisys.engine.structured_spec import StructuredOutputError, StructuredSpec
from llaisys.engine import structured_limits as L

QWEN_VOCAB, QWEN_EOS = 151936, 151645
INTERNAL = ("NoExtensionBias", "<state>", "Too many items", "Parser:")


def ref_chain(n, required=False):
    defs = {f"d{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}},
                      **({"required": ["a"]} if required else {})} for i in range(n)}
    defs[f"d{n}"] = {"const": "end"} if required else {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def lark_chain(n):
    return "start: r0\n" + "".join(f'r{i}: "x" r{i + 1}\n' for i in range(n)) + f'r{n}: "y"\n'


def gbnf_chain(n):
    return "root ::= r0\n" + "".join(f'r{i} ::= "x" r{i + 1}\n' for i in range(n)) + f'r{n} ::= "y"\n'


def refused(spec, *needles):
    with pytest.raises(StructuredOutputError) as e:
        grammar_of(spec, "response_format")
    text = str(e.value)
    assert e.value.param == "response_format" and all(n in text for n in needles), text
    assert not any(i in text for i in INTERNAL), text
    return text


# ---- the issue's reproducers ---------------------------------------------------------------
def test_a_1000_deep_ref_chain_is_refused_by_its_limit():
    refused(StructuredSpec.json_schema(ref_chain(1000)), "MAX_REF_CHAIN", str(L.MAX_REF_CHAIN))
    assert grammar_of(StructuredSpec.json_schema(ref_chain(L.MAX_REF_CHAIN - 1)))  # at the limit it compiles


@pytest.mark.parametrize("syntax, chain, limit", [("lark", lark_chain, "MAX_LARK_RULES"),
                                                  ("gbnf", gbnf_chain, "MAX_GBNF_RULES")])
def test_a_5000_rule_chain_is_refused_by_its_limit(syntax, chain, limit):
    refused(StructuredSpec(syntax, chain(5000)), limit)


def test_a_rule_chain_under_the_rule_count_but_too_deep_is_refused():
    refused(StructuredSpec.lark(lark_chain(L.MAX_RULE_DEPTH + 10)), "MAX_RULE_DEPTH")
    assert grammar_of(StructuredSpec.lark(lark_chain(L.MAX_RULE_DEPTH - 10)))


@pytest.mark.parametrize("spec", [
    StructuredSpec.json_schema({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}),
    StructuredSpec.json_schema({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}),
    StructuredSpec.json_schema({"$ref": "#/$defs/a", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}}),
    StructuredSpec.lark('start: a\na: a "x"'),
], ids=["ref-cycle", "mutual-cycle", "allOf-cycle", "left-recursive-lark"])
def test_a_grammar_without_finite_text_is_refused_in_plain_words(spec):
    refused(spec, "accepts no finite text")


@pytest.mark.parametrize("schema, needle", [
    ({"type": "integer", "minimum": 1e300, "maximum": 1e308}, "64-bit"),
    ({"type": "integer", "maximum": 2 ** 64}, "64-bit"),
    ({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2}, "no integer"),
    ({"type": "number", "minimum": float("inf")}, "finite"),
])
def test_numeric_bounds_the_grammar_cannot_keep_are_refused(schema, needle):
    refused(StructuredSpec.json_schema(schema), needle)


def test_limits_of_schema_size_and_nesting_are_named():
    nest = {"type": "string"}
    for _ in range(L.MAX_JSON_DEPTH):
        nest = {"type": "array", "items": nest}
    refused(StructuredSpec.json_schema(nest), "MAX_JSON_DEPTH")
    props = {f"p{i}": {"type": "string"} for i in range(L.MAX_OBJECT_PROPERTIES + 1)}
    refused(StructuredSpec.json_schema({"type": "object", "properties": props}), "MAX_OBJECT_PROPERTIES")
    refused(StructuredSpec.lark("start: " + "(" * 40 + '"x"' + ")" * 40), "MAX_GROUP_DEPTH")
    bomb = {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}},
            "$defs": {"d0": {"type": "object", "properties": {"%json": {"type": "string"}}}}}
    refused(StructuredSpec.lark("start: %json " + json.dumps(ref_chain(1000))), "MAX_REF_CHAIN")
    assert grammar_of(StructuredSpec.json_schema(bomb))


# ---- strict schemas ------------------------------------------------------------------------
STRICT = {"type": "object", "properties": {
    "a": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"], "additionalProperties": False},
    "c": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/t"}]}},
    "required": ["a", "c"], "additionalProperties": False,
    "$defs": {"t": {"type": "object", "properties": {}, "additionalProperties": False}}}


@pytest.mark.parametrize("change, path", [
    (lambda s: s["properties"]["a"].pop("additionalProperties"), "schema.properties.a"),
    (lambda s: s["required"].remove("c"), "schema"),
    (lambda s: s["$defs"]["t"].update(additionalProperties=True), "schema.$defs.t"),
    (lambda s: s["properties"]["c"]["anyOf"].append({"properties": {"x": {}}}), "schema.properties.c.anyOf[2]"),
])
def test_strict_schema_needs_closed_objects_with_every_property_required(change, path):
    rf = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": copy.deepcopy(STRICT)}}
    assert response_format_spec(rf).strict
    change(rf["json_schema"]["schema"])
    with pytest.raises(StructuredOutputError) as e:
        response_format_spec(rf)
    assert e.value.param == f"response_format.json_schema.{path}", e.value
    rf["json_schema"]["strict"] = False  # not strict: OpenAI and llaisys accept it
    assert response_format_spec(rf)


def test_strict_check_is_iterative():
    deep = {"type": "string"}
    for _ in range(5000):  # deeper than Python's recursion limit
        deep = {"type": "object", "properties": {"a": deep}, "required": ["a"], "additionalProperties": False}
    check_strict_schema(deep, "p")
    deep["properties"]["a"]["additionalProperties"] = True
    with pytest.raises(StructuredOutputError, match=r"^p\.properties\.a:"):
        check_strict_schema(deep, "p")


# ---- the model's tokenizer: start states, masks and advances -------------------------------
@pytest.fixture(scope="module")
def backend(qwen05_dir):
    from tokenizers import Tokenizer

    b = StructuredBackend(Tokenizer.from_file(str(qwen05_dir / "tokenizer.json")), QWEN_VOCAB, [QWEN_EOS])
    b.warm()
    return b


def generate(matcher, steps):
    """Greedy on the highest allowed id (not eos while another is allowed), up to `steps`."""
    out = []
    for _ in range(steps):
        if matcher.done:
            break
        ids = np.nonzero(np.unpackbits(matcher.mask().view(np.uint8), bitorder="little"))[0]
        t = int(ids[-1]) if ids[-1] != QWEN_EOS or len(ids) == 1 else int(ids[-2])
        matcher.advance(t)
        out.append(t)
    return out


def test_grammars_at_the_limits_generate_on_an_8_mib_thread(backend):
    """The engine loop computes masks on a default (8 MiB) thread: grammars just under the
    limits compile on the compile thread and then generate there without crashing."""
    specs = [StructuredSpec.json_schema(ref_chain(L.MAX_REF_CHAIN - 1, required=True)),
             StructuredSpec.lark(lark_chain(L.MAX_RULE_DEPTH - 5)), StructuredSpec.gbnf(gbnf_chain(L.MAX_GBNF_RULES - 5))]
    results = []

    def run():
        for s in specs:  # each must be written to its deepest rule and end there
            m = backend.matcher(s)
            n = len(generate(m, 5000))
            results.append(m.done and n > 50)

    old = threading.stack_size()
    threading.stack_size(8 << 20)
    try:
        t = threading.Thread(target=run)
        t.start()
    finally:
        threading.stack_size(old)
    t.join(300)
    assert results == [True, True, True]


def test_a_required_self_reference_fails_while_generating_in_plain_words(backend):
    """{"child": {"$ref": "#"}} required has no finite instance; llguidance finds out after the
    first token. The error names the field and reads plainly (the server answers 400)."""
    spec = response_format_spec({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]}}})
    m = backend.matcher(spec)
    with pytest.raises(StructuredOutputError) as e:
        generate(m, 50)
    assert e.value.param == "response_format" and "structured output failed" in str(e.value)
    assert not any(i in str(e.value) for i in INTERNAL), e.value
