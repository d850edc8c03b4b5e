"""llama-server's own routes on a real server over the tiny checkpoint (the real Qwen2.5
tokenizer and chat template): POST /apply-template renders what transformers renders for the
same messages and tools, and is the prompt /tokenize counts; GET /props gives the served model's
context, slots, template and special tokens; POST /completion continues a text as
/v1/completions does, streamed or not, from text or ids. Bad input gets the API's 4xx."""

from __future__ import annotations

import json

import pytest
import requests
from jsonschema import validate

from llaisys.server.infill.schema import INFILL_RESPONSE_SCHEMAS
from llaisys.server.protocol.response_schemas import RESPONSE_SCHEMAS
from server_helpers import MODEL_NAME, error_of

SLOTS = 5
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3? 🙂"}],
]


@pytest.fixture(scope="module")
def server(start_tiny_server):
    return start_tiny_server("--max-num-seqs", str(SLOTS), "--max-num-batched-tokens", "512")


@pytest.fixture(scope="module")
def reference(tiny_chat_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_chat_model))


def post(srv, path, body):
    return requests.post(srv.url + path, json=body, timeout=60)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("tools", [None, [WEATHER]])
@pytest.mark.parametrize("chat", range(len(CHATS)))
def test_apply_template_renders_what_transformers_renders(server, reference, chat, tools, add_generation_prompt):
    body = {"model": MODEL_NAME, "messages": CHATS[chat], "add_generation_prompt": add_generation_prompt}
    if tools is not None:
        body["tools"] = tools
    r = post(server, "/apply-template", body)
    assert r.status_code == 200, r.text
    validate(RESPONSE_SCHEMAS["ApplyTemplateResponse"], r.json())
    want = reference.apply_chat_template(CHATS[chat], tools=tools, add_generation_prompt=add_generation_prompt,
                                         tokenize=False)
    assert r.json()["prompt"] == want
    if tools is not None:
        assert json.dumps(WEATHER, ensure_ascii=False) in want  # the template wrote the tool in
    # the prompt a chat request runs: /tokenize of the same messages counts its tokens
    ids = post(server, "/tokenize", {"messages": CHATS[chat], "add_generation_prompt": add_generation_prompt}).json()
    if tools is None:
        assert ids["tokens"] == reference(want, add_special_tokens=False)["input_ids"]


def test_apply_template_refuses_bad_input(server):
    r = post(server, "/apply-template", {"model": MODEL_NAME})
    assert r.status_code == 400 and error_of(r)["param"] == "messages", r.text
    r = post(server, "/apply-template", {"messages": [{"role": "wizard", "content": "x"}]})
    assert r.status_code == 400 and error_of(r)["param"].startswith("messages"), r.text
    bad_tool = {"type": "function", "function": {"name": "no spaces allowed", "parameters": {"type": "object"}}}
    r = post(server, "/apply-template", {"messages": CHATS[0], "tools": [bad_tool]})
    assert r.status_code == 400 and error_of(r)["param"] == "tools", r.text
    r = post(server, "/apply-template", {"model": "nope", "messages": CHATS[0]})
    assert r.status_code == 404 and error_of(r)["code"] == "model_not_found", r.text


def test_props_describes_the_served_model(server, tiny_chat_model):
    r = requests.get(server.url + "/props", timeout=60)
    assert r.status_code == 200, r.text
    props = r.json()
    validate(RESPONSE_SCHEMAS["Props"], props)
    card = requests.get(server.url + f"/v1/models/{MODEL_NAME}", timeout=60).json()
    assert props["model_alias"] == MODEL_NAME and props["total_slots"] == SLOTS
    assert props["default_generation_settings"]["n_ctx"] == card["max_model_len"]
    config = json.loads((tiny_chat_model / "tokenizer_config.json").read_text())
    assert props["chat_template"] == config["chat_template"] and props["eos_token"] == config["eos_token"]
    assert props["model_path"].endswith(tiny_chat_model.name)
    params = props["default_generation_settings"]["params"]  # what /infill runs with when not told
    assert (params["temperature"], params["top_k"], params["top_p"], params["min_p"]) == (0.8, 40, 0.95, 0.05)
    assert requests.get(server.url + f"/props?model={MODEL_NAME}", timeout=60).json() == props
    r = requests.get(server.url + "/props?model=nope", timeout=60)
    assert r.status_code == 404 and error_of(r)["code"] == "model_not_found", r.text


PROMPT = "def fibonacci(n):\n    "


def test_completion_continues_the_text_as_it_is(server):
    # greedy: the same tokens as /v1/completions on the same prompt (one engine, one sampler)
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "return_tokens": True}
    r = post(server, "/completion", body)
    assert r.status_code == 200, r.text
    res = r.json()
    validate(INFILL_RESPONSE_SCHEMAS["InfillResponse"], res)
    oai = post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 12,
                                           "temperature": 0}).json()
    assert res["content"] == oai["choices"][0]["text"] and res["stop"] is True
    assert res["tokens_predicted"] == oai["usage"]["completion_tokens"] == len(res["tokens"])
    assert res["tokens_evaluated"] == oai["usage"]["prompt_tokens"] and res["prompt"] == PROMPT
    # its token ids give the same answer
    ids = post(server, "/tokenize", {"prompt": PROMPT, "add_special_tokens": True}).json()["tokens"]
    assert post(server, "/completion", dict(body, prompt=ids)).json()["content"] == res["content"]
    # streamed: the pieces add up to the same text, then one final event with stop true
    with requests.post(server.url + "/completion", json=dict(body, stream=True), stream=True, timeout=60) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    assert [e["stop"] for e in events].count(True) == 1 and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == res["content"]


def test_completion_refuses_bad_input(server):
    r = post(server, "/completion", {"n_predict": 4})
    assert r.status_code == 400 and error_of(r)["param"] == "prompt", r.text
    r = post(server, "/completion", {"prompt": [10 ** 9], "n_predict": 4})  # an id outside the vocabulary
    assert r.status_code == 400 and error_of(r)["param"] == "prompt", r.text
    r = post(server, "/completion", {"prompt": "x " * 100_000, "n_predict": 4})
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded", r.text
    r = post(server, "/completion", {"prompt": PROMPT, "logit_bias": [[1, -100]]})
    assert r.status_code == 400 and error_of(r)["param"] == "logit_bias", r.text
