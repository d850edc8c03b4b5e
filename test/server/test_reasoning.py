"""The reasoning split through a real server: an R1-distill-style model (the real 0.5B weights
with DeepSeek-R1-Distill-Qwen's tokens and chat template, whose generation prompt opens
<think>: test/r1_checkpoint.py) picked up by `--reasoning-parser auto`, streaming and not,
max_tokens cutting inside the reasoning; and the real 0.5B under `--reasoning-parser
deepseek_r1` writing a `</think>` the split must cut at, with a stop string that matches the
answer only."""

import openai
import pytest
import requests

from r1_checkpoint import make_r1_checkpoint
from server_helpers import MODEL_NAME, launch


@pytest.fixture(scope="module")
def r1_server(qwen05_dir, tmp_path_factory, request):
    model = make_r1_checkpoint(tmp_path_factory.mktemp("r1") / "r1-distill-style", qwen05_dir)
    srv = launch(model, tmp_path_factory.mktemp("r1srv"))
    yield srv
    srv.stop()
    if request.session.testsfailed:
        print(srv.log()[-20000:])


@pytest.fixture(scope="module")
def split_server(start_server):
    return start_server("--reasoning-parser", "deepseek_r1")


def client_of(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=600)


def streamed(client, **kw):
    """(reasoning, content or None, finish_reason) added up from a stream's deltas."""
    reasoning, content, reason = "", None, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        extra = d.model_extra or {}
        reasoning += extra.get("reasoning_content") or ""
        if d.content:
            content = (content or "") + d.content
        reason = chunk.choices[0].finish_reason or reason
    return reasoning, content, reason


def test_max_tokens_inside_the_reasoning(r1_server):
    client = client_of(r1_server)
    kw = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "What is 7 * 6? Think first, then answer."}],
              temperature=0, max_tokens=10, extra_body={"ignore_eos": True})
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 10
    reasoning = msg.model_extra["reasoning_content"]
    assert reasoning.strip() and "<think>" not in reasoning and msg.content is None
    assert streamed(client, **kw) == (reasoning, None, "length")
    body = dict({k: v for k, v in kw.items() if k != "extra_body"}, ignore_eos=True)
    raw = requests.post(r1_server.url + "/v1/chat/completions", json=body, timeout=600).json()
    assert raw["choices"][0]["message"] == {"role": "assistant", "content": None, "reasoning_content": reasoning}


def test_the_prompt_opened_the_block(r1_server):
    tok = requests.post(r1_server.url + "/tokenize", json={"messages": [{"role": "user", "content": "hi"}]},
                        timeout=60).json()
    text = requests.post(r1_server.url + "/detokenize", json={"tokens": tok["tokens"]}, timeout=60).json()["prompt"]
    assert text.endswith("<｜Assistant｜><think>\n")


ECHO = [{"role": "user", "content": "Echo back the following string exactly: 'hmm</think>Done.'"}]


def test_answer_after_think_is_content(split_server):
    client = client_of(split_server)
    kw = dict(model=MODEL_NAME, messages=ECHO, temperature=0, max_tokens=30)
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    reasoning = msg.model_extra["reasoning_content"]
    assert "hmm" in reasoning and "</think>" not in reasoning
    assert "Done" in msg.content and "</think>" not in msg.content
    assert streamed(client, **kw) == (reasoning, msg.content, r.choices[0].finish_reason)


def test_stop_string_matches_the_answer_not_the_reasoning(split_server):
    client = client_of(split_server)
    kw = dict(model=MODEL_NAME, messages=ECHO, temperature=0, max_tokens=30, stop=["m", "on"])
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    # "m" is in the reasoning ("hmm") and not in the answer; "on" cuts the answer ("Done")
    assert "hmm" in msg.model_extra["reasoning_content"]
    assert msg.content == "D" and r.choices[0].finish_reason == "stop"
    assert streamed(client, **kw) == (msg.model_extra["reasoning_content"], "D", "stop")


def test_stop_string_waits_for_min_tokens(split_server):
    client = client_of(split_server)
    kw = dict(model=MODEL_NAME, messages=ECHO, temperature=0, max_tokens=30, stop=["m", "on"],
              extra_body={"min_tokens": 30})
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    # as the engine does: no stop string ends the answer before 30 tokens, so "Done" is whole
    assert msg.content.startswith("Done"), msg.content
    assert r.usage.completion_tokens == 30
    assert streamed(client, **kw)[1] == msg.content


def test_auto_keeps_plain_templates_unsplit(start_server):
    plain = client_of(start_server())  # --reasoning-parser auto; Qwen2.5's template has no <think>
    r = plain.chat.completions.create(model=MODEL_NAME, messages=ECHO, temperature=0, max_tokens=30)
    msg = r.choices[0].message
    assert "</think>" in msg.content and "reasoning_content" not in (msg.model_extra or {})
