"""What test_api.py's OpenAI routes promise without a real model, against a real server over the
tiny checkpoint (the real tokenizer and chat template, random weights), with test_api.py's limits:
/tokenize and /detokenize round trips and the prompt count a chat reports, each bad request
answered with the status, code, param and type OpenAI's API gives, the official client's typed
errors, and no CORS header unless one is configured."""

import openai
import pytest
import requests

from server_helpers import API_MAX_MODEL_LEN, API_SERVER_ARGS, MODEL_NAME, error_of, openai_client, post, repeat_word

MAX_MODEL_LEN = API_MAX_MODEL_LEN


@pytest.fixture(scope="module")
def server(start_tiny_server):
    return start_tiny_server(*API_SERVER_ARGS)


# ---- tokenize ----------------------------------------------------------------------------
def test_tokenize_round_trip_and_chat_count(server):
    client = openai_client(server)
    text = "def héllo(): return '世界' # ünïcödé"
    tok = post(server, "/tokenize", {"model": MODEL_NAME, "prompt": text}).json()
    assert tok["count"] == len(tok["tokens"]) > 5 and tok["max_model_len"] == MAX_MODEL_LEN
    assert post(server, "/detokenize", {"model": MODEL_NAME, "tokens": tok["tokens"]}).json() == {"prompt": text}
    msgs = repeat_word("melon")
    n = post(server, "/tokenize", {"messages": msgs}).json()["count"]
    r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == n


# ---- errors ------------------------------------------------------------------------------
LONG_IDS = [100] * (MAX_MODEL_LEN + 10)

ERROR_CASES = [  # (method, path, body or raw bytes, status, code, param)
    ("POST", "/v1/chat/completions", b"{not json", 400, "invalid_json", None),
    ("POST", "/v1/chat/completions", b"", 400, "invalid_json", None),
    ("POST", "/v1/chat/completions", [1, 2], 400, "invalid_json", None),
    ("POST", "/v1/chat/completions", {"max_tokens": 4}, 400, "missing_required_parameter", "messages"),
    ("POST", "/v1/chat/completions", {"messages": "hi"}, 400, "invalid_value", "messages"),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "invalid_value",
     "messages"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "temperature": "hot"}, 400, "invalid_type",
     "temperature"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "temperature": -1}, 400, "invalid_value",
     "temperature"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "top_p": 1.5}, 400, "invalid_value", "top_p"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "max_tokens": 0}, 400, "invalid_value",
     "max_tokens"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "max_tokens": 257}, 400, "invalid_value",
     "max_tokens"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "max_completion_tokens": 1000}, 400,
     "invalid_value", "max_completion_tokens"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "n": 5}, 400, "invalid_value", "n"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "stop": ["x"] * 17}, 400, "invalid_value",
     "stop"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "stop": 5}, 400, "invalid_type", "stop"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "top_logprobs": 2}, 400, "invalid_value",
     "top_logprobs"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "logprobs": True, "top_logprobs": 21}, 400,
     "invalid_value", "top_logprobs"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "logit_bias": {"x": 1}}, 400, "invalid_value",
     "logit_bias"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "stream_options": {"include_usage": True}},
     400, "invalid_value", "stream_options"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "chat_template": "{{ messages }}"}, 400,
     "unsupported_parameter", "chat_template"),
    ("POST", "/v1/chat/completions", {"messages": repeat_word("a"), "model": "gpt-9"}, 404, "model_not_found",
     "model"),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 600}]}, 400,
     "context_length_exceeded", "messages"),
    ("POST", "/v1/completions", {"prompt": ""}, 400, "empty_prompt", "prompt"),
    ("POST", "/v1/completions", {"prompt": []}, 400, "invalid_value", "prompt"),
    ("POST", "/v1/completions", {"prompt": [[1, 2], []]}, 400, "empty_prompt", "prompt"),
    ("POST", "/v1/completions", {"prompt": [1, 10 ** 7]}, 400, "invalid_value", "prompt"),
    ("POST", "/v1/completions", {"prompt": LONG_IDS}, 400, "context_length_exceeded", "prompt"),
    ("POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 256, "logprobs": True}, 400, "invalid_type",
     "logprobs"),
    ("POST", "/v1/completions", {"prompt": "x", "seed": 1.5}, 400, "invalid_type", "seed"),
    ("POST", "/detokenize", {"tokens": [1, -4]}, 400, "invalid_value", "tokens"),
    ("POST", "/tokenize", {"prompt": "a", "messages": []}, 400, "invalid_value", "prompt"),
    ("POST", "/v1/chat/completions", b"x" * 70000, 413, "request_too_large", None),
    ("GET", "/v1/chat/completions", None, 405, "method_not_allowed", None),
    ("POST", "/v1/models", {}, 405, "method_not_allowed", None),
    ("POST", "/v1/nothing-here", {}, 404, "not_found", None),
    ("GET", "/nothing-here", None, 404, "not_found", None),
    ("POST", "/v1/requests/chatcmpl-unknown/cancel", None, 404, "request_not_found", None),
]


@pytest.mark.parametrize("method,path,body,status,code,param", ERROR_CASES,
                         ids=[f"{c[0]} {c[1]} {c[3]} {c[4]} {c[5]}" for c in ERROR_CASES])
def test_error_cases(server, method, path, body, status, code, param):
    kw = {"data": body, "headers": {"Content-Type": "application/json"}} if isinstance(body, bytes) else (
        {"json": body} if body is not None else {})
    r = requests.request(method, server.url + path, timeout=60, **kw)
    assert r.status_code == status, r.text
    err = error_of(r)
    assert (err["code"], err["param"]) == (code, param), err
    assert err["type"] == {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error",
                           413: "invalid_request_error"}[status]
    if code == "context_length_exceeded":
        assert err["n_ctx"] == MAX_MODEL_LEN and err["n_prompt_tokens"] > MAX_MODEL_LEN
        assert str(err["n_prompt_tokens"]) in err["message"] and str(MAX_MODEL_LEN) in err["message"]
    if status == 405:
        assert "POST" in r.headers["Allow"] or "GET" in r.headers["Allow"]


def test_openai_client_raises_typed_errors(server):
    client = openai_client(server)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=repeat_word("a"), max_tokens=2)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=2, presence_penalty=3)
    assert e.value.param == "presence_penalty"


def test_no_cors_headers_without_cors_origin(server):
    r = requests.get(server.url + "/v1/models", headers={"Origin": "http://example.test"}, timeout=30)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers
