"""Server pieces that need no engine: request parsing, admission control, error bodies, log
escaping, model arguments."""

import threading
import time

import pytest

from llaisys.server.protocol.errors import APIError, escape_controls
from llaisys.server.state.limits import Admission, ClientGone, ServerLimits
from llaisys.server.protocol.parse import Limits, parse_chat, parse_completion, resolve_max_tokens
from llaisys.server.state.registry import parse_model_arg

MSG = [{"role": "user", "content": "hi"}]


def err(fn, *args):
    with pytest.raises(APIError) as e:
        fn(*args)
    return e.value


# ---- parsing -----------------------------------------------------------------------------
def test_chat_fields_are_typed_and_defaults_follow_openai():
    req = parse_chat({"messages": MSG}, Limits())
    assert req.model is None and req.stream is False and req.logprobs is None and req.max_tokens is None
    assert req.sampling == {"n": 1, "temperature": 1.0}
    req = parse_chat({"messages": MSG, "max_tokens": 5, "max_completion_tokens": 7, "logprobs": True,
                      "top_logprobs": 3, "stop": "x", "seed": 1, "stream": True,
                      "stream_options": {"include_usage": True}, "user": "u", "top_k": 4, "min_p": 0.1,
                      "repetition_penalty": 1.1, "ignore_eos": True, "logit_bias": {"5": -1}}, Limits())
    assert req.max_tokens == 7 and req.logprobs == 3 and req.include_usage and req.user == "u"
    assert req.sampling["stop"] == ["x"] and req.sampling["top_k"] == 4 and req.sampling["logit_bias"] == {"5": -1}


@pytest.mark.parametrize("body,code,param", [
    ({"messages": MSG, "n": True}, "invalid_type", "n"),
    ({"messages": MSG, "temperature": float("nan")}, "invalid_type", "temperature"),
    ({"messages": MSG, "frequency_penalty": 2.5}, "invalid_value", "frequency_penalty"),
    ({"messages": MSG, "stream": "yes"}, "invalid_type", "stream"),
    ({"messages": MSG, "stop": ["a", 1]}, "invalid_type", "stop"),
    ({"messages": MSG, "n": 9}, "invalid_value", "n"),
    ({"messages": MSG, "best_of": 3}, "unsupported_parameter", "best_of"),
    ({"messages": MSG, "tools": [{}]}, "invalid_value", "tools"),
    ({"messages": MSG, "functions": [{}]}, "unsupported_parameter", "functions"),
    ({"messages": MSG, "response_format": {"type": "xml"}}, "invalid_value", "response_format"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "invalid_value", "messages"),
    ({"messages": MSG, "session_id": ""}, "invalid_value", "session_id"),
    ({"messages": []}, "invalid_value", "messages"),
])
def test_chat_rejections_name_the_field(body, code, param):
    e = err(parse_chat, body, Limits())
    assert (e.status, e.code, e.param) == (400, code, param)


def test_content_parts_become_text():
    req = parse_chat({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                  {"type": "text", "text": "b"}]}]}, Limits())
    assert req.messages == [{"role": "user", "content": "ab"}]


def test_completion_prompt_forms():
    lim = Limits()
    assert parse_completion({"prompt": "a"}, lim).prompts == ["a"]
    assert parse_completion({"prompt": [1, 2]}, lim).prompts == [[1, 2]]
    assert parse_completion({"prompt": ["a", [3]]}, lim).prompts == ["a", [3]]
    for bad in ([], [[]], [1, "a"], {"x": 1}, 5, [True]):
        e = err(parse_completion, {"prompt": bad}, lim)
        assert e.status == 400 and e.param == "prompt"
    assert err(parse_completion, {"prompt": "a" * 0}, lim).code == "empty_prompt"
    assert err(parse_completion, {"prompt": ["x"] * 65}, lim).param == "prompt"
    assert err(parse_completion, {"prompt": "a", "echo": True, "logprobs": 1}, lim).param == "echo"


def test_max_tokens_cap_and_context():
    lim = Limits(max_tokens_cap=100)
    assert err(parse_completion, {"prompt": "a", "max_tokens": 101}, lim).param == "max_tokens"
    assert resolve_max_tokens(None, 10, 50, 100) == 40  # the cap, bounded by the room left
    assert resolve_max_tokens(None, 10, 500, 100) == 100
    assert resolve_max_tokens(None, 10, 500, None) is None  # up to the context
    e = err(resolve_max_tokens, 20, 40, 50, None)
    assert e.code == "context_length_exceeded" and e.extra == {"n_prompt_tokens": 40, "n_ctx": 50}
    assert "40" in e.message and "50" in e.message
    assert err(resolve_max_tokens, None, 50, 50, None).code == "context_length_exceeded"


# ---- admission ---------------------------------------------------------------------------
def test_slots_queue_in_order_and_overflow_gets_429():
    adm = Admission(ServerLimits(max_concurrent_requests=1, max_queue=2))
    far = time.monotonic() + 60
    first = adm.acquire("a", far)
    order, tickets = [], []

    def waiter(name):
        t = adm.acquire(name, far)
        order.append(name)
        tickets.append(t)

    threads = []
    for name in ("b", "c"):
        threads.append(threading.Thread(target=waiter, args=(name,)))
        threads[-1].start()
        while adm.num_queued < len(threads):
            time.sleep(0.01)
    e = err(adm.acquire, "d", far)
    assert (e.status, e.code) == (429, "queue_full") and int(e.headers["Retry-After"]) >= 1
    first.release()
    first.release()  # idempotent
    threads[0].join(5)
    assert order == ["b"] and adm.num_active == 1
    tickets[0].release()
    threads[1].join(5)
    assert order == ["b", "c"]
    tickets[1].release()
    assert adm.num_active == 0 and adm.num_queued == 0


def test_queue_deadline_client_gone_and_close():
    adm = Admission(ServerLimits(max_concurrent_requests=1, max_queue=4))
    held = adm.acquire("a", time.monotonic() + 60)
    assert err(adm.acquire, "b", time.monotonic() + 0.3).code == "queue_timeout"
    with pytest.raises(ClientGone):
        adm.acquire("c", time.monotonic() + 60, lambda: True)
    assert adm.num_queued == 0
    adm.close()
    assert err(adm.acquire, "d", time.monotonic() + 60).code == "shutting_down"
    held.release()
    assert adm.num_active == 0


def test_per_user_concurrency_and_token_budget():
    now = [0.0]
    adm = Admission(ServerLimits(per_user_concurrency=1, per_user_token_budget=100, token_budget_window_s=60),
                    clock=lambda: now[0])
    t = adm.acquire("u", 1e9)
    assert err(adm.acquire, "u", 1e9).code == "user_concurrency_limit"
    adm.acquire("v", 1e9).release()  # other users are not affected
    t.release()
    adm.charge("u", 60)
    adm.acquire("u", 1e9).release()
    now[0] = 10.0
    adm.charge("u", 50)
    e = err(adm.acquire, "u", 1e9)
    assert e.code == "token_budget_exceeded" and int(e.headers["Retry-After"]) == 51  # the first charge ages out at 60
    now[0] = 61.0
    adm.acquire("u", 1e9).release()


# ---- small pieces ------------------------------------------------------------------------
def test_error_body_shape_and_extras():
    e = APIError(400, "too long", code="context_length_exceeded", param="prompt", n_prompt_tokens=9, n_ctx=8)
    assert e.body() == {"error": {"message": "too long", "type": "invalid_request_error", "param": "prompt",
                                  "code": "context_length_exceeded", "n_prompt_tokens": 9, "n_ctx": 8}}
    assert APIError(429, "x").body()["error"]["type"] == "rate_limit_error"


def test_log_values_keep_one_line():
    assert escape_controls("plain é 世") == "plain é 世"
    assert escape_controls("a\nb\r\x1b[2J\x00") == "a\\nb\\r\\x1b[2J\\x00"


def test_model_arguments():
    assert (parse_model_arg("/m/qwen-dir/").source, parse_model_arg("/m/qwen-dir/").served_name) == ("/m/qwen-dir/",
                                                                                                     "qwen-dir")
    spec = parse_model_arg("/m/x=fast")
    assert (spec.source, spec.served_name) == ("/m/x", "fast")
    assert parse_model_arg("/m/qwen2.5-coder-0.5b-instruct.gguf").served_name == "qwen2.5-coder-0.5b-instruct"
    assert parse_model_arg("/m/Model.Q4_K_M.GGUF").served_name == "Model.Q4_K_M"
    assert parse_model_arg("/m/a.gguf=chat").served_name == "chat"
    with pytest.raises(ValueError):
        parse_model_arg("/m/x=")


def _guarded(body):
    """guard_stream over `body`; returns (frames read, statuses finish got)."""
    from llaisys.server.openai.respond import guard_stream

    finished = []
    frames = guard_stream(body, finished.append, lambda e: [f"fault {e.status} {e.code} {e.message}"], "r1")
    return frames, finished


def test_guard_stream_ends_every_stream_once_with_its_status():
    def body(fail=None, status=200):
        yield "a"
        if fail is not None:
            raise fail
        yield "b"
        return status

    frames, done = _guarded(body())  # a stream that ends: its own status
    assert list(frames) == ["a", "b"] and done == [200]
    frames, done = _guarded(body(status=429))  # the generation's failure status
    assert list(frames) == ["a", "b"] and done == [429]
    frames, done = _guarded(body(ValueError("x")))  # a fault of ours: the API's error frames, 500
    assert list(frames) == ["a", "fault 500 internal_error internal error: ValueError"] and done == [500]
    frames, done = _guarded(body(ClientGone()))  # the client left: 499, nothing more sent
    assert list(frames) == ["a"] and done == [499]
    frames, done = _guarded(body())  # the server could not write: closed mid-stream, 499
    assert next(frames) == "a" and done == []
    frames.close()
    assert done == [499]
