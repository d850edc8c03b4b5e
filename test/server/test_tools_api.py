"""Tool calling and the rest of the OpenAI surface against a real server over the real 0.5B,
through the official `openai` client where it has the call: a weather-tool conversation
with tool_choice="required" (call -> tool result -> answer), streamed calls reassembling to
the non-streamed ones, a named tool_choice, the 400s naming their parameter, GET
/v1/models/{id}, the developer role, OpenAI's defaults and ranges, /v1/responses; and
tool calls that behave (issue #39): tool_choice "required" at temperature 1 over ten seeds
ends with complete, non-repeated calls and finish_reason tool_calls, a call cut by
max_tokens is dropped without its markup reaching content, pydantic-style `$defs` tools can
be forced, tools are strict only with strict: true."""

import json
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import jsonschema
import openai
import pytest
import requests

from pydantic_trip import TRIP_PARAMS
from server_helpers import MODEL_NAME

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "the current time in a time zone",
                                         "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                                        "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


@pytest.fixture(scope="module")
def server(start_server):
    return start_server()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


def post(server, path, body):
    return requests.post(server.url + path, json=body, timeout=600)


def test_weather_round_trip_with_required_tool_choice(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER], tool_choice="required",
                                       parallel_tool_calls=False, temperature=0, max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str) and set(args) <= {"city", "unit"}
    msgs = ASK + [ch.message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 18})}]
    answer = client.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=[WEATHER], tool_choice="none",
                                            temperature=0, max_tokens=30)
    a = answer.choices[0]
    assert a.message.tool_calls is None and isinstance(a.message.content, str) and a.message.content.strip()
    assert a.finish_reason in ("stop", "length")


def _collect(stream):
    calls, reason, content = {}, None, ""
    for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        content += ch.delta.content or ""
        for tc in ch.delta.tool_calls or []:
            if tc.id is not None:  # the head: index, id, type, name, empty arguments
                assert tc.index not in calls and tc.type == "function" and tc.function.name
                assert tc.function.arguments == ""
                calls[tc.index] = {"name": tc.function.name, "arguments": ""}
            else:
                assert tc.function.name is None and tc.index in calls
                calls[tc.index]["arguments"] += tc.function.arguments
        reason = ch.finish_reason or reason
    return [calls[i] for i in sorted(calls)], reason, content


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_streamed_tool_calls_reassemble_to_the_non_streamed(client, choice):
    kw = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Rome and the time in Tokyo?"}],
              tools=[WEATHER, TIME], tool_choice=choice, temperature=0, max_tokens=80, parallel_tool_calls=False)
    whole = client.chat.completions.create(**kw).choices[0]
    calls, reason, content = _collect(client.chat.completions.create(stream=True, **kw))
    assert reason == whole.finish_reason == "tool_calls" and content == ""
    assert calls == [{"name": c.function.name, "arguments": c.function.arguments} for c in whole.message.tool_calls]
    if isinstance(choice, dict):
        assert [c["name"] for c in calls] == ["get_time"]
    for c in calls:
        json.loads(c["arguments"])


@pytest.mark.parametrize("body,param", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, "tools"),
    ({"messages": ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}]},
     "messages"),
])
def test_malformed_tools_are_a_400_naming_the_parameter(server, body, param):
    r = post(server, "/v1/chat/completions", dict({"messages": ASK, "max_tokens": 2}, **body))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_models_by_id(server, client):
    m = client.models.retrieve(MODEL_NAME)
    assert m.id == MODEL_NAME and m.object == "model"
    r = requests.get(server.url + "/v1/models/no-such-model", timeout=30)
    assert r.status_code == 404
    assert r.json() == {"error": {"message": "The model 'no-such-model' does not exist", "type": "invalid_request_error",
                                  "param": "model", "code": "model_not_found"}}
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_developer_role_is_the_system_prompt(client):
    def ask(role):
        return client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=8, messages=[
            {"role": role, "content": "Answer in French."}, {"role": "user", "content": "Say hello."}])
    dev, sys_ = ask("developer"), ask("system")
    assert dev.choices[0].message.content == sys_.choices[0].message.content
    assert dev.usage.prompt_tokens == sys_.usage.prompt_tokens


def test_openai_defaults_and_ranges(server):
    r = post(server, "/v1/completions", {"prompt": "1, 2, 3, 4,", "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 16  # OpenAI's default max_tokens
    assert r.json()["choices"][0]["finish_reason"] == "length"
    for t in (2.0001, -0.1):
        r = post(server, "/v1/chat/completions", {"messages": ASK, "temperature": t, "max_tokens": 1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    assert post(server, "/v1/chat/completions", {"messages": ASK, "temperature": 2, "max_tokens": 1}).status_code == 200


def test_out_of_vocabulary_logit_bias_fails_that_request_alone(server):
    r = post(server, "/v1/chat/completions", {"messages": ASK, "max_tokens": 2, "logit_bias": {"999999": 5}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias"
    assert "999999" in r.json()["error"]["message"]
    ok = post(server, "/v1/chat/completions", {"messages": ASK, "max_tokens": 2, "logit_bias": {"15": 1}})
    assert ok.status_code == 200


# ---- /v1/responses -----------------------------------------------------------------------------
def test_responses_text_instructions_and_previous_response(client):
    r = client.responses.create(model=MODEL_NAME, input="Name one primary colour.", instructions="Be brief.",
                                temperature=0, max_output_tokens=12)
    assert r.object == "response" and r.status in ("completed", "incomplete") and r.output_text
    assert r.output[0].type == "message" and r.output[0].content[0].type == "output_text"
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    follow = client.responses.create(model=MODEL_NAME, input="Name another.", previous_response_id=r.id,
                                     temperature=0, max_output_tokens=8)
    assert follow.previous_response_id == r.id and follow.output_text
    # the history came first: more input than the new turn alone, most of it from the prefix cache
    assert follow.usage.input_tokens > r.usage.input_tokens
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL_NAME, input="x", previous_response_id="resp_nope", max_output_tokens=2)
    assert e.value.body["param"] == "previous_response_id"


def test_responses_stream_events_add_up(client):
    kw = dict(model=MODEL_NAME, input=[{"role": "user", "content": [{"type": "input_text", "text": "Count to five."}]}],
              temperature=0, max_output_tokens=16)
    whole = client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[1] == "response.in_progress"
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == events[-1].response.output_text
    assert "response.output_item.added" in kinds and "response.output_text.done" in kinds


def test_responses_tool_round_trip(client):
    tool = {"type": "function", **WEATHER["function"]}
    r = client.responses.create(model=MODEL_NAME, input="What is the weather in Oslo?", tools=[tool],
                                tool_choice="required", parallel_tool_calls=False, temperature=0,
                                max_output_tokens=60)
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str)
    events = list(client.responses.create(model=MODEL_NAME, input="What is the weather in Oslo?", tools=[tool],
                                          tool_choice="required", parallel_tool_calls=False, temperature=0,
                                          max_output_tokens=60, stream=True))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert args == call.arguments
    answer = client.responses.create(model=MODEL_NAME, previous_response_id=r.id, tools=[tool], tool_choice="none",
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": json.dumps({"temperature_c": 3})}],
                                     temperature=0, max_output_tokens=20)
    assert answer.output_text.strip() and not [o for o in answer.output if o.type == "function_call"]


def test_responses_errors_name_their_parameter(server):
    for body, param in (({"input": ""}, "input"), ({"input": [{"type": "image"}]}, "input"),
                        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
                        ({"input": "x", "tool_choice": {"type": "function", "name": "f"}}, "tool_choice"),
                        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text")):
        r = post(server, "/v1/responses", body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)


# ---- tool calls that behave (issue #39) -------------------------------------------------------
MARKUP = ("<tool_call>", "</tool_call>", '{"name"')


def _clean_calls(message, params: dict) -> list:
    """The message's calls, checked: each parses and matches its function's schema, none
    repeats, and the content holds no call markup. Returns [(name, arguments dict)]."""
    for m in MARKUP:
        assert m not in (message.content or ""), message
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
    for name, args in calls:
        jsonschema.validate(args, params[name])
    keys = [(n, json.dumps(a, sort_keys=True)) for n, a in calls]
    assert len(set(keys)) == len(keys), keys
    return calls


def _streamed_message(stream):
    """(message, finish_reason) a streamed chat answer adds up to, shaped as the client's."""
    calls, reason, content = _collect(stream)
    tcs = [SimpleNamespace(function=SimpleNamespace(**c)) for c in calls]
    return SimpleNamespace(content=content or None, tool_calls=tcs or None), reason


def _ask(client, stream: bool, **kw):
    """(message, finish_reason) of one chat request, streamed or not."""
    if stream:
        return _streamed_message(client.chat.completions.create(stream=True, **kw))
    ch = client.chat.completions.create(**kw).choices[0]
    return ch.message, ch.finish_reason


def test_required_tool_calls_end_cleanly_over_ten_seeds(client):
    """The 0.5B under tool_choice "required" with parallel calls called get_weather(Paris),
    then London, Tokyo... and Paris again, until max_tokens: finish_reason "length" and the
    last call cut mid-JSON. Now every reply ends with complete, distinct calls (at most 8) and
    finish_reason tool_calls, streamed (odd seeds) or not. The ten requests run at once (the
    server batches them)."""
    params = {"get_weather": WEATHER["function"]["parameters"]}

    def one(seed):
        return _ask(client, seed % 2 == 1, model=MODEL_NAME, messages=ASK, tools=[WEATHER], tool_choice="required",
                    temperature=1, seed=seed, max_tokens=100)

    t0 = time.monotonic()
    with ThreadPoolExecutor(10) as pool:
        replies = list(pool.map(one, range(10)))
    n_calls = []
    for seed, (msg, reason) in enumerate(replies):
        calls = _clean_calls(msg, params)
        assert reason == "tool_calls" and 1 <= len(calls) <= 8 and msg.content is None, (seed, msg)
        n_calls.append(len(calls))
    print(f"\nrequired x10 at temperature 1: calls per reply {n_calls}, {time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize("choice", ["required", "auto"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_max_tokens_is_dropped(client, choice, stream):
    """max_tokens 32 under "required": the second call was cut and its markup
    ('\n<tool_call>\n{...') leaked into content. Under "auto", max_tokens 12 cuts the first
    call: no call, no markup, finish_reason length."""
    max_tokens = 32 if choice == "required" else 12
    msg, reason = _ask(client, stream, model=MODEL_NAME, messages=ASK, tools=[WEATHER], tool_choice=choice,
                       temperature=0, max_tokens=max_tokens)
    calls = _clean_calls(msg, {"get_weather": WEATHER["function"]["parameters"]})
    if choice == "required":
        assert reason == "tool_calls" and calls and msg.content is None, msg
    else:
        assert reason == "length" and not calls and not (msg.content or "").strip(), msg


TRIP = {"type": "function", "function": {"name": "plan_trip", "description": "Plan a trip",
                                         "parameters": TRIP_PARAMS}}


def test_pydantic_defs_tools_can_be_forced(client):
    """Forced ("required", and a named tool, streamed), a tool whose parameters use $defs /
    $ref was a 400 "Pointer '/$defs/Place' does not exist"."""
    params = {"plan_trip": TRIP_PARAMS, "get_weather": WEATHER["function"]["parameters"]}

    def one(choice):
        return _ask(client, isinstance(choice, dict), model=MODEL_NAME, tools=[WEATHER, TRIP], tool_choice=choice,
                    temperature=0, max_tokens=80, parallel_tool_calls=False,
                    messages=[{"role": "user", "content": "Plan a trip from Paris with two nights in Rome."}])

    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(one, ["required", {"type": "function", "function": {"name": "plan_trip"}}]))
    for msg, reason in replies:
        calls = _clean_calls(msg, params)
        assert reason == "tool_calls" and len(calls) == 1 and msg.content is None, msg
    assert _clean_calls(replies[1][0], params)[0][0] == "plan_trip"


def test_tools_are_strict_only_when_they_say_so(server):
    """OpenAI's default is strict false: uniqueItems (which the grammar compiler does not
    implement) was a 400 under a forced call; with strict true OpenAI's strict rules apply,
    whatever tool_choice is."""
    tags = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2,
                                                      "uniqueItems": True}},
            "required": ["tags"], "additionalProperties": False}
    fn = {"name": "tag", "parameters": tags}
    body = {"messages": [{"role": "user", "content": "Tag this: a red car."}], "max_tokens": 24, "temperature": 0,
            "tool_choice": "required", "tools": [{"type": "function", "function": fn}]}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    strict = [{"type": "function", "function": dict(fn, strict=True)}]
    r = post(server, "/v1/chat/completions", dict(body, tools=strict))
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools" and "uniqueItems" in r.text
    loose = {"type": "object", "properties": {"city": {"type": "string"}}}
    for choice in ("auto", "required"):
        r = post(server, "/v1/chat/completions", dict(body, tool_choice=choice, tools=[
            {"type": "function", "function": {"name": "f", "parameters": loose, "strict": True}}]))
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "tools" and "tools[0].function.parameters" in err["message"], err


def test_responses_required_calls_are_complete_and_distinct(client):
    tool = {"type": "function", **WEATHER["function"]}
    r = client.responses.create(model=MODEL_NAME, input="What is the weather in Paris?", tools=[tool],
                                tool_choice="required", temperature=1, top_p=1, max_output_tokens=32,
                                extra_body={"seed": 1})
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and calls and not [o for o in r.output if o.type == "message"], r.output
    keys = [(c.name, json.dumps(json.loads(c.arguments), sort_keys=True)) for c in calls]
    assert len(set(keys)) == len(keys)
