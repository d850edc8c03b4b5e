"""The chat output readers without an engine: the reasoning split, the tool-call parser and
their combination (stop strings in the answer, parallel_tool_calls), fed token-sized pieces
and the whole text at once, which must give the same message."""

import json
import random

import pytest

from llaisys.server.openai.chat_output import ChatSetup, ChoiceOutput, delta_bodies
from llaisys.server.protocol.errors import APIError
from llaisys.server.openai.reasoning import ReasoningSplitter, opened_in_prompt, parser_for_template, resolve_parser
from llaisys.server.openai.tool_calls import ToolCallParser, check_tools, template_messages

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def pieces(text: str, seed: int) -> list:
    """`text` cut at random places (1 to 4 characters), as a detokenizer might hand it over."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        k = rng.randint(1, 4)
        out.append(text[i:i + k])
        i += k
    return out


def run(setup: ChatSetup, text: str, seed: int = 0, final_reason: str = "stop"):
    """(message, finish_reason, streamed bodies) of `text` fed in pieces."""
    co = setup.new_output()
    bodies = []
    parts = pieces(text, seed)
    for k, p in enumerate(parts):
        bodies += delta_bodies(co.feed(p, final=k == len(parts) - 1))
        if co.stopped:
            break
    if not co.done and not co.stopped:
        bodies += delta_bodies(co.feed("", final=True))
    return co.message(), co.finish_reason(final_reason), bodies


def reassemble(bodies: list) -> dict:
    """What a client builds from the streamed deltas (OpenAI's accumulation rules)."""
    msg = {"content": "", "reasoning_content": "", "tool_calls": []}
    for b in bodies:
        msg["content"] += b.get("content", "")
        msg["reasoning_content"] += b.get("reasoning_content", "")
        for tc in b.get("tool_calls", []):
            if "id" in tc:
                assert tc["index"] == len(msg["tool_calls"]) and tc["type"] == "function"
                assert tc["function"]["arguments"] == ""
                msg["tool_calls"].append({"id": tc["id"], "type": "function",
                                          "function": {"name": tc["function"]["name"], "arguments": ""}})
            else:
                assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
                msg["tool_calls"][tc["index"]]["function"]["arguments"] += tc["function"]["arguments"]
    return msg


R1 = "deepseek_r1"


# ---- reasoning -------------------------------------------------------------------------------
def test_parser_is_picked_from_the_template():
    assert parser_for_template("{{'<｜Assistant｜><think>\\n'}}") == "deepseek_r1"
    assert parser_for_template("{%- if enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}") == "qwen3"
    assert parser_for_template("<|im_start|>assistant\n") is None and parser_for_template(None) is None
    assert resolve_parser("none", "<think>") is None and resolve_parser("qwen3", None) == "qwen3"
    with pytest.raises(ValueError):
        resolve_parser("r1", None)
    assert opened_in_prompt("<｜User｜>hi<｜Assistant｜><think>\n") and not opened_in_prompt("<|im_start|>assistant\n")


@pytest.mark.parametrize("seed", range(6))
def test_reasoning_split_streams_to_the_same_fields(seed):
    text = "Two and two.\nThat is 4.</think>\n\nThe answer is **4**."
    msg, reason, bodies = run(ChatSetup(R1, True), text, seed)
    assert msg == {"role": "assistant", "content": "The answer is **4**.",
                   "reasoning_content": "Two and two.\nThat is 4."}
    assert reason == "stop"
    got = reassemble(bodies)
    assert (got["content"], got["reasoning_content"]) == (msg["content"], msg["reasoning_content"])


def test_reasoning_variants():
    # the model writes its own <think> (older R1 templates, qwen3 without the prompt opener)
    for parser, opened in ((R1, False), ("qwen3", False), ("qwen3", True)):
        msg, _, _ = run(ChatSetup(parser, opened), "<think>\nhmm</think>ok", 1)
        assert (msg["reasoning_content"], msg["content"]) == ("\nhmm", "ok"), (parser, opened)
    # qwen3: an output that does not open a block is all answer
    msg, _, _ = run(ChatSetup("qwen3", False), "Just <b>text</b>", 2)
    assert msg == {"role": "assistant", "content": "Just <b>text</b>", "reasoning_content": None}
    # R1: no </think> at all -> everything is reasoning, no answer
    msg, reason, _ = run(ChatSetup(R1, True), "still thinking about </thi", 3, final_reason="length")
    assert msg["content"] is None and msg["reasoning_content"] == "still thinking about </thi" and reason == "length"


def test_splitter_holds_a_cut_tag():
    s = ReasoningSplitter(R1, True)
    assert s.feed("abc</th").reasoning == "abc"
    d = s.feed("ink>x")
    assert (d.reasoning, d.content) == ("", "x")


def test_stop_strings_match_the_answer_not_the_reasoning():
    setup = ChatSetup(R1, True, stops=["STOP"])
    msg, reason, bodies = run(setup, "I will not STOP here.</think>Answer STOP and more", 4)
    assert msg["reasoning_content"] == "I will not STOP here." and msg["content"] == "Answer "
    assert reason == "stop" and reassemble(bodies)["content"] == "Answer "
    setup.include_stop = True
    msg, _, _ = run(setup, "x</think>Answer STOP and more", 5)
    assert msg["content"] == "Answer STOP"


def test_stop_strings_wait_for_min_tokens():
    """As the engine does: a stop string matches only once min_tokens tokens are out (here one
    piece per token, so token 3 ends the first "STOP" and token 6 the second)."""
    setup = ChatSetup(R1, True, stops=["STOP"], min_tokens=5)
    co = setup.new_output()
    texts = ["a</think>", "A ", "STOP", " b", "c ", "STOP", " tail"]
    out = "".join(co.feed(t, final=(i == len(texts) - 1), num_tokens=i + 1).content for i, t in enumerate(texts))
    assert out == "A STOP bc " and co.finish_reason("length") == "stop"
    setup.min_tokens = 0
    co = setup.new_output()
    out = "".join(co.feed(t, num_tokens=i + 1).content for i, t in enumerate(texts[:4]))
    assert out == "A " and co.stopped


# ---- tools -----------------------------------------------------------------------------------
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": {"c": [1, 2]}}}\n</tool_call>'


@pytest.mark.parametrize("seed", range(6))
def test_tool_call_streams_head_then_arguments(seed):
    setup = ChatSetup(tools=check_tools([WEATHER, TIME], "auto", None))
    msg, reason, bodies = run(setup, CALL, seed)
    assert msg["content"] is None and reason == "tool_calls"
    (tc,) = msg["tool_calls"]
    assert tc["id"].startswith("call_") and tc["function"]["name"] == "get_weather"
    assert json.loads(tc["function"]["arguments"]) == {"city": "Paris", "unit": {"c": [1, 2]}}
    assert tc["function"]["arguments"] == '{"city": "Paris", "unit": {"c": [1, 2]}}'
    got = reassemble(bodies)
    assert got["tool_calls"] == msg["tool_calls"] and got["content"] == ""
    assert "id" in bodies[0]["tool_calls"][0]  # the head comes first


def test_parallel_calls_content_and_non_calls():
    two = "Let me check.\n" + CALL + "\n" + CALL.replace("get_weather", "get_time").replace(
        '{"city": "Paris", "unit": {"c": [1, 2]}}', "{}")
    tools = check_tools([WEATHER, TIME], None, None)
    msg, reason, bodies = run(ChatSetup(tools=tools), two, 7)
    assert msg["content"] == "Let me check.\n" and [c["function"]["name"] for c in msg["tool_calls"]] == \
        ["get_weather", "get_time"]
    assert msg["tool_calls"][1]["function"]["arguments"] == "{}" and reason == "tool_calls"
    assert reassemble(bodies)["tool_calls"] == msg["tool_calls"]
    # parallel_tool_calls false: the first call ends the choice
    one = check_tools([WEATHER, TIME], None, False)
    msg, reason, bodies = run(ChatSetup(tools=one), two, 8)
    assert len(msg["tool_calls"]) == 1 and reason == "tool_calls" and len(reassemble(bodies)["tool_calls"]) == 1
    # a block that holds no call of a known function stays in the content
    text = 'x <tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>'
    msg, reason, _ = run(ChatSetup(tools=tools), text, 9)
    assert msg["content"] == text and "tool_calls" not in msg and reason == "stop"
    # tool_choice none: nothing is parsed
    msg, _, _ = run(ChatSetup(tools=check_tools([WEATHER], "none", None)), CALL, 10)
    assert msg["content"] == CALL


def test_reasoning_then_tool_call():
    setup = ChatSetup(R1, True, tools=check_tools([WEATHER], "auto", None))
    msg, reason, bodies = run(setup, "need weather</think>\n\n" + CALL, 11)
    assert msg["reasoning_content"] == "need weather" and msg["content"] is None and reason == "tool_calls"
    assert reassemble(bodies)["tool_calls"] == msg["tool_calls"]


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_cut_call_is_dropped_and_never_content(choice):
    """max_tokens inside a call: the cut call is not returned and its markup is not content;
    the complete calls before it are, with finish_reason tool_calls (the 0.5B under
    "required" at max_tokens 32 leaked '\n<tool_call>\n{...' into content)."""
    setup = ChatSetup(tools=check_tools([WEATHER], choice, None))
    for cut in (11, 14, 30, 60, len(CALL) - 3):  # after the tag (one token), before the head, in the head, ...
        msg, reason, bodies = run(setup, CALL[:cut], cut, final_reason="length")
        assert reason == "length" and "tool_calls" not in msg and msg["content"] == "", (cut, msg)
        assert bodies == []
        msg, reason, bodies = run(setup, CALL + "\n" + CALL.replace("Paris", "Oslo")[:cut], cut, final_reason="length")
        assert reason == "tool_calls" and msg["content"] is None, (cut, msg)
        assert [json.loads(c["function"]["arguments"])["city"] for c in msg["tool_calls"]] == ["Paris"]
        got = reassemble(bodies)
        assert got["tool_calls"] == msg["tool_calls"] and got["content"] == ""
    # text before the cut call stays content, the markup does not; a bare call cut is dropped too
    msg, reason, _ = run(setup, "Checking.\n" + CALL[:40], 3, final_reason="length")
    assert msg["content"] == "Checking.\n" and reason == "length"
    msg, reason, _ = run(setup, '{"name": "get_weather", "arguments": {"city": "Pa', 4, final_reason="length")
    assert msg["content"] == "" and "tool_calls" not in msg


def test_a_stop_string_inside_a_call_drops_it():
    setup = ChatSetup(R1, True, tools=check_tools([WEATHER], "auto", None), stops=["Par"])
    msg, reason, _ = run(setup, "ok</think>" + CALL, 13)
    assert msg["content"] is None or "<tool_call>" not in msg["content"]
    assert "tool_calls" not in msg and reason == "stop"


def test_a_repeated_call_ends_the_list():
    """The 0.5B under "required" with parallel calls wrote get_weather(Paris) again and again
    until max_tokens: a call equal to an earlier one (same name, same arguments JSON, key order
    and spacing aside) ends the choice and is not returned."""
    other = CALL.replace('"Paris"', '"Rome"')
    same = CALL.replace('{"city": "Paris", "unit": {"c": [1, 2]}}', '{"unit": {"c": [1,2]}, "city": "Paris"}')
    for seed in range(4):
        setup = ChatSetup(tools=check_tools([WEATHER, TIME], "required", None))
        co = setup.new_output()
        bodies = []
        for p in pieces("\n".join([CALL, other, same, CALL.replace("Paris", "Tokyo")]), seed):
            bodies += delta_bodies(co.feed(p))
            if co.stopped:
                break
        assert co.stopped and co.finish_reason(None) == "tool_calls"  # the route aborts: engine reason None
        msg = co.message()
        assert [json.loads(c["function"]["arguments"])["city"] for c in msg["tool_calls"]] == ["Paris", "Rome"]
        assert reassemble(bodies)["tool_calls"] == msg["tool_calls"] and msg["content"] is None


def test_calls_are_bounded():
    from llaisys.engine.structured_tools import MAX_TOOL_CALLS

    text = "\n".join(CALL.replace("Paris", f"City{i}") for i in range(MAX_TOOL_CALLS + 3))
    co = ChatSetup(tools=check_tools([WEATHER], "auto", None)).new_output()
    for p in pieces(text, 1):
        co.feed(p)
        if co.stopped:
            break
    assert co.stopped and len(co.calls) == MAX_TOOL_CALLS == 8 and co.finish_reason(None) == "tool_calls"


def test_a_block_whose_arguments_do_not_parse_is_not_a_call():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": }}\n</tool_call>'
    msg, reason, _ = run(ChatSetup(tools=check_tools([WEATHER], "auto", None)), text, 14)
    assert msg["content"] == text and "tool_calls" not in msg and reason == "stop"


def test_tool_checks_name_the_parameter():
    for tools, choice, param in (([WEATHER, WEATHER], None, "tools"),
                                 ([dict(WEATHER, function={"name": "bad name"})], None, "tools"),
                                 ([WEATHER], {"type": "function", "function": {"name": "other"}}, "tool_choice"),
                                 ([], "required", "tool_choice")):
        with pytest.raises(APIError) as e:
            check_tools(tools, choice, None)
        assert e.value.status == 400 and e.value.param == param
    named = check_tools([WEATHER], {"type": "function", "function": {"name": "get_weather"}}, None)
    assert named.choice == "named" and named.named == "get_weather" and named.parallel


def test_template_messages_decode_arguments():
    msgs = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}]
    assert template_messages(msgs)[0]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    bad = [dict(msgs[0], tool_calls=[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{x"}}])]
    with pytest.raises(APIError) as e:
        template_messages(bad)
    assert e.value.param == "messages"


def test_parser_names_filter():
    p = ToolCallParser(["a"])
    ev = p.feed('<tool_call>{"name": "a", "arguments": {"k": 1}}</tool_call>', final=True)
    assert [c.name for c in ev.started] == ["a"] and p.calls[0].arguments == '{"k": 1}'


@pytest.mark.parametrize("seed", range(4))
def test_bare_json_call_at_the_start(seed):
    tools = check_tools([WEATHER], "auto", None)
    bare = '{"name": "get_weather", "arguments": {"city": "Paris \\"}\\" x"}} and then text'
    msg, reason, bodies = run(ChatSetup(tools=tools), bare, seed)
    assert msg["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris \\"}\\" x"}'
    assert msg["content"] == " and then text" and reason == "tool_calls"
    assert reassemble(bodies)["tool_calls"] == msg["tool_calls"]
    # JSON that is not a call of a known function stays content
    msg, reason, _ = run(ChatSetup(tools=tools), '{"name": "x", "arguments": {}}', seed)
    assert msg["content"] == '{"name": "x", "arguments": {}}' and reason == "stop"
    msg, _, _ = run(ChatSetup(tools=tools), '{"a": 1}', seed)
    assert msg["content"] == '{"a": 1}'
