"""Structured output through the engine (engine/structured*.py): specs and their errors, and
the real Qwen2.5-Coder-0.5B constrained by JSON schemas, a regex, Lark and GBNF grammars and
the forced tool-call grammar, batched with unconstrained requests."""

import json
import re

import jsonschema
import numpy as np
import pytest

from llaisys.engine import SamplingParams, SamplingParamsError
from llaisys.engine.structured import grammar_of
from llaisys.engine.structured_format import response_format_spec
from llaisys.engine.structured_spec import StructuredOutputError, StructuredSpec
from llaisys.engine.structured_tools import tool_call_spec

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "langs": {"type": "array", "items": {"enum": ["python", "c", "rust"]}, "maxItems": 3}},
    "required": ["name", "age", "langs"], "additionalProperties": False}
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}}, "required": ["zone"],
        "additionalProperties": False}}}]


# ---- specs (no model) ----------------------------------------------------------------------
@pytest.mark.parametrize("spec, text", [
    (StructuredSpec.regex("[a-"), "invalid regex"),
    (StructuredSpec.lark("start: nothing_defined"), "invalid lark"),
    (StructuredSpec.gbnf("root ::= undefined-rule"), "invalid GBNF"),
    (StructuredSpec("json_schema", "{not json"), "not valid JSON"),
    (StructuredSpec.json_schema({"type": "strin"}), "strin"),
    (StructuredSpec.json_schema({"type": "string", "format": "no-such-format"}), "format"),
    (StructuredSpec("xml", "<a/>"), "kind must be one of"),
    (StructuredSpec("json_schema", "[" * 100_000 + "]" * 100_000), "nests too deeply"),
])
def test_bad_specs_name_the_field(spec, text):
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(structured=spec)
    assert e.value.param == "structured" and text in str(e.value)


def test_unbounded_integers_get_the_safe_range():
    """Integers a schema leaves open are generated within |n| <= 2^53 - 1 (16 digits): a
    sampled row otherwise wrote digits until max_tokens. A bound the schema gives is kept, and
    data (enum, const, default, examples) is not touched."""
    from llaisys.engine.structured import SAFE_INT, _bound_integers

    data = {"type": "integer"}
    schema = {"type": "object", "$defs": {"n": {"type": ["integer", "null"]}}, "properties": {
        "a": {"type": "integer"},
        "b": {"type": "integer", "minimum": 0},
        "c": {"type": "integer", "exclusiveMaximum": 10},
        "d": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
        "e": {"const": data, "default": data, "enum": [data], "examples": [data]},
        "f": {"type": "number"}}}
    out = _bound_integers(schema)["properties"]
    assert (out["a"]["minimum"], out["a"]["maximum"]) == (-SAFE_INT, SAFE_INT) and SAFE_INT == 2 ** 53 - 1
    assert (out["b"]["minimum"], out["b"]["maximum"]) == (0, SAFE_INT)
    assert out["c"] == {"type": "integer", "exclusiveMaximum": 10, "minimum": -SAFE_INT}
    assert out["d"]["items"]["anyOf"][0]["maximum"] == SAFE_INT and "maximum" not in out["d"]["items"]["anyOf"][1]
    assert schema["$defs"]["n"]["minimum"] == -SAFE_INT
    assert data == {"type": "integer"} and out["f"] == {"type": "number"}
    deep = {"type": "integer"}
    for _ in range(5000):  # deeper than Python's recursion limit: the walk is iterative
        deep = {"type": "array", "items": deep}
    _bound_integers(deep)
    assert grammar_of(StructuredSpec.json_schema(schema))


def test_lenient_schema_ignores_what_strict_refuses():
    schema = {"type": "string", "format": "no-such-format"}
    with pytest.raises(StructuredOutputError):
        grammar_of(StructuredSpec.json_schema(schema, strict=True))
    assert grammar_of(StructuredSpec.json_schema(schema, strict=False))


def test_response_format_shapes():
    assert response_format_spec(None) is None and response_format_spec({"type": "text"}) is None
    assert response_format_spec({"type": "json_object"}).kind == "json_object"
    s = response_format_spec({"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON, "strict": True}})
    assert s.kind == "json_schema" and s.strict and json.loads(s.value) == PERSON
    assert response_format_spec({"type": "json_schema", "name": "p", "schema": PERSON}).strict is False  # Responses
    assert response_format_spec({"type": "grammar", "grammar": 'root ::= "a"', "syntax": "gbnf"}).kind == "gbnf"
    for bad in ({"type": "json_schema"}, {"type": "json_schema", "json_schema": {"name": "has space", "schema": {}}},
                {"type": "regex"}, {"type": "grammar", "grammar": "x", "syntax": "peg"}, {"type": "yaml"}, "json"):
        with pytest.raises(StructuredOutputError) as e:
            response_format_spec(bad)
        assert e.value.param == "response_format"


def test_tool_call_spec_choices_and_errors():
    assert tool_call_spec(WEATHER, "auto") is None and tool_call_spec(WEATHER, "none") is None
    many = tool_call_spec(WEATHER, "required", parallel=True).value
    assert "fn_0 | fn_1" in many and '("\\n" call){0,7}' in many
    one = tool_call_spec(WEATHER, {"type": "function", "function": {"name": "get_time"}}).value
    assert "get_time" in one and "get_weather" not in one and "call)*" not in one
    for tools, choice, param in ((WEATHER, {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
                                 (WEATHER, "sometimes", "tool_choice"), ([], "required", "tools"),
                                 ([{"type": "function", "function": {"name": "f", "parameters": {"type": "strin"}}}],
                                  "required", "tools")):
        with pytest.raises(StructuredOutputError) as e:
            tool_call_spec(tools, choice)
        assert e.value.param == param


# ---- the real model ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llm(qwen05_dir):
    from llaisys.engine import LLM

    with LLM(str(qwen05_dir), max_num_seqs=8, kv_cache_memory=64 << 20, seed=0) as m:
        yield m


def ask(text):
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def llm_async(qwen05_dir):
    """The same engine with async scheduling: a grammar row's mask is made on the step thread from
    a copy of its matcher advanced over the token in flight (Matcher.ahead)."""
    from llaisys.engine import LLM

    with LLM(str(qwen05_dir), max_num_seqs=8, kv_cache_memory=64 << 20, seed=0, async_scheduling=True) as m:
        yield m


def test_async_scheduling_gives_the_constrained_rows_their_synchronous_tokens(llm, llm_async):
    chats = [ask("Describe a programmer as JSON."), ask("Write a haiku about tests."), ask("Invent a person, as JSON."),
             ask("Give me a phone number."), ask("Pick a color.")]
    params = [SamplingParams(max_tokens=40, structured=StructuredSpec.json_schema(PERSON)),
              SamplingParams(max_tokens=12, presence_penalty=0.8),
              SamplingParams(max_tokens=40, temperature=1.0, seed=3, n=2, structured=StructuredSpec.json_schema(PERSON)),
              SamplingParams(max_tokens=20, structured=StructuredSpec.regex(r"[0-9]{3}-[0-9]{4}")),
              SamplingParams(max_tokens=20, structured=StructuredSpec.gbnf('root ::= "color: " ("red" | "green" | "blue")'))]
    want = [[(c.token_ids, c.finish_reason) for c in o.outputs] for o in llm.chat(chats, params)]
    before = llm_async.engine.step_runner.num_started_ahead
    got = [[(c.token_ids, c.finish_reason) for c in o.outputs] for o in llm_async.chat(chats, params)]
    assert got == want
    assert llm_async.engine.step_runner.num_started_ahead - before > 10  # the grammar rows went ahead


def test_a_mask_made_ahead_is_the_one_after_the_token(llm):
    """Matcher.ahead: a copy advanced over the token in flight gives the mask the matcher gives
    once it has advanced itself; where the grammar takes nothing more, every id is allowed."""
    backend = llm.engine.structured
    m = backend.matcher(StructuredSpec.regex(r"ab"))
    tok = llm.tokenizer
    first = tok.encode("a", add_special_tokens=False)
    assert len(first) == 1
    ahead = m.ahead()
    ahead.fill(first[0])
    m.advance(first[0])
    assert np.array_equal(ahead.out, m.mask()) and ahead.out.sum() != 0
    last = tok.encode("b", add_special_tokens=False)[0]
    end = m.ahead()
    end.fill(last)  # "ab" is complete: the request ends with this token, and its next row is dropped
    m.advance(last)
    assert m.done and (end.out == 0xFFFFFFFF).all()


def test_constrained_rows_batch_with_free_ones(llm):
    free = SamplingParams(max_tokens=12)
    alone = llm.chat([ask("Write a haiku about tests.")], free)[0].outputs[0]
    person = SamplingParams(max_tokens=60, structured=StructuredSpec.json_schema(PERSON))
    hot = SamplingParams(max_tokens=60, temperature=1.0, seed=3, n=2, structured=StructuredSpec.json_schema(PERSON))
    outs = llm.chat([ask("Describe a programmer as JSON."), ask("Write a haiku about tests."),
                     ask("Invent a person, as JSON.")], [person, free, hot])
    assert outs[1].outputs[0].token_ids == alone.token_ids  # the free row is unchanged by its neighbours
    for o in (outs[0].outputs[0], *outs[2].outputs):
        assert o.finish_reason == "stop"
        jsonschema.validate(json.loads(o.text), PERSON)


def test_regex_lark_and_gbnf(llm):
    specs = [StructuredSpec.regex(r"[0-9]{3}-[0-9]{4}"),
             StructuredSpec.lark('start: ("yes" | "no") "." '),
             StructuredSpec.gbnf('root ::= "color: " ("red" | "green" | "blue")')]
    outs = llm.chat([ask("Give me a phone number."), ask("Is water wet?"), ask("Pick a color.")],
                    [SamplingParams(max_tokens=20, structured=s) for s in specs])
    texts = [o.outputs[0].text for o in outs]
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", texts[0])
    assert texts[1] in ("yes.", "no.") and re.fullmatch("color: (red|green|blue)", texts[2])
    assert all(o.outputs[0].finish_reason == "stop" for o in outs)  # the grammar ended them


def test_forced_tool_call_parses(llm):
    tok = llm.tokenizer
    conv = [{"role": "user", "content": "What's the weather in Paris, and what time is it in Tokyo?"}]
    prompt = tok.apply_chat_template(conv, tools=WEATHER, add_generation_prompt=True)
    one, many = (SamplingParams(max_tokens=m, skip_special_tokens=False, structured=tool_call_spec(WEATHER, "required",
                                                                                                  parallel=p))
                 for m, p in ((40, False), (60, True)))
    outs = [o.outputs[0] for o in llm.generate([prompt, prompt], [one, many])]
    params = {t["function"]["name"]: t["function"]["parameters"] for t in WEATHER}
    for out in outs:
        calls = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", out.text, re.S)
        assert calls, out.text
        for c in calls:  # every complete call parses and matches its function's schema
            call = json.loads(c)
            assert list(call) == ["name", "arguments"]
            jsonschema.validate(call["arguments"], params[call["name"]])
    # one call: the grammar ends after it (parallel calls may go on to max_tokens on this model)
    assert outs[0].finish_reason == "stop" and outs[0].text.count("<tool_call>") == 1, outs[0].text


def test_model_step_greedy_takes_the_best_allowed_logit(llm):
    """The step's greedy rows with a mask (decided by the lm_head screen over their allowed ids)
    take the argmax of the full logits over the allowed ids."""
    from llaisys.models.qwen2 import RowSampling

    model = llm.worker.model
    ids = np.array(llm.tokenizer.encode("def add(a, b):\n    return"), np.int64)
    vocab = model.config.vocab_size
    allowed = np.arange(100, vocab, 97)
    bits = np.zeros((vocab + 31) // 32 * 32, np.uint8)
    bits[allowed] = 1
    mask = np.packbits(bits, bitorder="little").view(np.uint32)

    def run(**kw):
        cache = model.create_kv_cache("slot", n_slots=64)
        try:
            return model.step(cache, token_ids=ids, positions=np.arange(len(ids)), query_start=[0, len(ids)],
                              sample_rows=[len(ids) - 1], seq_ids=[0], **kw)
        finally:
            cache.close()

    logits = run(sampling=[RowSampling()], want_logits=True).logits[0]
    got = run(sampling=[RowSampling(allowed_mask=mask)], want_logprobs=False).token_ids[0]
    assert got == allowed[np.argmax(logits[allowed])]
    assert got != np.argmax(logits)  # the mask changed the answer
