"""The Anthropic Messages API's pieces without a model: an Anthropic body read into the chat
request it stands for (anthropic.chat_body), max_tokens fitted to the context, and the
content blocks with the stream events that build them (anthropic_stream.Blocks)."""

import json
from types import SimpleNamespace

import pytest

from llaisys.server.anthropic.routes import _max_tokens, chat_body
from llaisys.server.anthropic.stream import Blocks, error_body, event
from llaisys.server.openai.chat_output import ChoiceDelta
from llaisys.server.protocol.errors import APIError
from llaisys.server.openai.tool_parser import Call

WEATHER = {"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}


def test_system_turns_tools_and_fields():
    body = {"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief",
                                                                                       "cache_control": {}}],
            "messages": [
                {"role": "user", "content": "weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "x"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]},
                    {"type": "text", "text": "and "}, {"type": "text", "text": "tomorrow?"}]}],
            "tools": [WEATHER], "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "stop_sequences": ["\n\n"], "temperature": 0.5, "top_k": 3, "metadata": {"user_id": "u1"},
            "thinking": {"type": "enabled", "budget_tokens": 1024}, "stream": True, "unknown": 1}
    chat, prefill = chat_body(body)
    assert prefill is None
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief"},
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
        {"role": "user", "content": "and tomorrow?"}]
    assert chat["tools"] == [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"},
                                                               "description": "weather"}}]
    assert (chat["tool_choice"], chat["parallel_tool_calls"]) == ("required", False)
    assert (chat["stop"], chat["temperature"], chat["top_k"], chat["user"], chat["stream"]) == (
        ["\n\n"], 0.5, 3, "u1", True)
    assert "max_tokens" not in chat and "thinking" not in chat and "unknown" not in chat


@pytest.mark.parametrize("choice,want", [({"type": "auto"}, "auto"), ({"type": "none"}, "none"),
                                         ({"type": "tool", "name": "get_weather"},
                                          {"type": "function", "function": {"name": "get_weather"}})])
def test_tool_choice(choice, want):
    chat, _ = chat_body({"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER], "tool_choice": choice})
    assert chat["tool_choice"] == want and "parallel_tool_calls" not in chat


def test_tool_only_assistant_turn_and_result_order():
    chat, _ = chat_body({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}},
                                          {"type": "tool_use", "id": "b", "name": "f", "input": {"x": 1}}]},
        {"role": "user", "content": [{"type": "text", "text": "first"},
                                     {"type": "tool_result", "tool_use_id": "a", "content": "ra"},
                                     {"type": "tool_result", "tool_use_id": "b", "is_error": True}]}]})
    assert chat["messages"][1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}
    assert chat["messages"][2:] == [{"role": "user", "content": "first"},
                                    {"role": "tool", "tool_call_id": "a", "content": "ra"},
                                    {"role": "tool", "tool_call_id": "b", "content": ""}]


def test_prefill_and_output_config():
    chat, prefill = chat_body({"messages": [{"role": "user", "content": "Name a color."},
                                            {"role": "assistant", "content": [{"type": "text", "text": "The color "},
                                                                              {"type": "thinking", "thinking": "t"}]}],
                               "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}},
                                                 "effort": "low"}})
    assert prefill == "The color " and chat["messages"] == [{"role": "user", "content": "Name a color."}]
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "output",
                                                                             "schema": {"type": "object"}}}


@pytest.mark.parametrize("messages,words", [
    ([{"role": "user", "content": [{"type": "image", "source": {}}]}], "image blocks are not supported"),
    ([{"role": "user", "content": [{"type": "document", "source": {}}]}], "document blocks are not supported"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                                    "content": [{"type": "image", "source": {}}]}]}], "image blocks"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": 5}]}], "string or an array"),
    ([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]}],
     "not supported in assistant turns"),
    ([{"role": "user", "content": [{"type": "thinking", "thinking": "t"}]}], "not supported in user turns"),
    ([{"role": "user", "content": [{"type": "server_tool_use"}]}], "'server_tool_use' block"),
    ([{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "a", "name": "f", "input": []}]}], "object input"),
])
def test_refused_blocks(messages, words):
    with pytest.raises(APIError) as e:
        chat_body({"messages": messages})
    assert e.value.status == 400 and e.value.param == "messages" and words in e.value.message


def test_max_tokens_fits_the_context():
    served = SimpleNamespace(max_model_len=100)
    assert _max_tokens(32000, 40, served, None) == 60  # agent CLIs ask for 32k whatever the model
    assert _max_tokens(10, 40, served, None) == 10
    assert _max_tokens(50, 40, served, 16) == 16  # the server's --max-tokens-cap
    assert _max_tokens(50, 100, served, None) == 50  # no room: kept, the 400 comes later


def _stream_sum(events: list) -> list:
    """The blocks a client rebuilds from the events (as the anthropic client accumulates them)."""
    blocks, bufs = [], {}
    for kind, f in events:
        if kind == "content_block_start":
            assert f["index"] == len(blocks)
            blocks.append(dict(f["content_block"]))
        elif kind == "content_block_delta":
            d, b = f["delta"], blocks[f["index"]]
            key = {"text_delta": "text", "thinking_delta": "thinking"}.get(d["type"])
            if key:
                b[key] += d[key]
            else:
                bufs[f["index"]] = bufs.get(f["index"], "") + d["partial_json"]
                b["input"] = json.loads(bufs[f["index"]])
    return blocks


def test_blocks_and_their_events():
    w = Blocks()
    c0, c1 = Call(0, "call_abc", "f", '{"a": 1}'), Call(1, "call_def", "g", "{}")
    events = w.feed(ChoiceDelta(reasoning="Think"))
    events += w.feed(ChoiceDelta(reasoning="ing.", content="Hi"))
    events += w.feed(ChoiceDelta(content=" there", started=[c0], arguments=[(0, '{"a": 1}')]))
    events += w.feed(ChoiceDelta(started=[c1], arguments=[(1, "{}")]))
    events += w.close()
    assert w.close() == []
    assert w.blocks == [{"type": "thinking", "thinking": "Thinking.", "signature": ""},
                        {"type": "text", "text": "Hi there"},
                        {"type": "tool_use", "id": "toolu_abc", "name": "f", "input": {"a": 1}},
                        {"type": "tool_use", "id": "toolu_def", "name": "g", "input": {}}]
    assert [k for k, _ in events] == [
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop"]
    assert events[8][1] == {"index": 2, "content_block": {"type": "tool_use", "id": "toolu_abc", "name": "f",
                                                           "input": {}}}
    assert events[9][1] == {"index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'}}
    assert _stream_sum(events) == w.blocks


def test_event_and_error_shapes():
    assert event("ping") == b'event: ping\ndata: {"type": "ping"}\n\n'
    assert error_body(401, "no")["error"] == {"type": "authentication_error", "message": "no"}
    assert [error_body(s, "m")["error"]["type"] for s in (400, 404, 409, 413, 429, 500, 503, 504)] == [
        "invalid_request_error", "not_found_error", "invalid_request_error", "request_too_large",
        "rate_limit_error", "api_error", "overloaded_error", "timeout_error"]
