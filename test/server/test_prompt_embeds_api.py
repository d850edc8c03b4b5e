"""`prompt_embeds` on POST /v1/completions (server/openai/completion_embeds.py): base64 of little-endian
float32 [n, hidden] rows, on a real server over the tiny random checkpoint (hidden 64, the real
Qwen2.5 tokenizer, tied embeddings).

- The embed_tokens rows of a prompt's ids give the ids' greedy tokens, alone, as an array of
  prompts, streamed, and with usage counting one prompt token a row.
- Every bad field is a 400 in OpenAI's error shape naming prompt_embeds (or the field it clashes
  with), and the server still serves afterwards with nothing held."""

import base64

import numpy as np
import pytest
from safetensors.numpy import load_file

from server_helpers import MODEL_NAME, error_of, post, stream_post, wait_idle

PROMPTS = ["def fibonacci(n):", "The capital of France is"]


@pytest.fixture(scope="module")
def srv(start_tiny_server):
    return start_tiny_server("--max-body-bytes", str(256 << 10))


@pytest.fixture(scope="module")
def table(tiny_chat_model):
    return load_file(str(tiny_chat_model / "model.safetensors"))["model.embed_tokens.weight"].astype(np.float32)


def b64(rows) -> str:
    return base64.b64encode(np.ascontiguousarray(rows, "<f4").tobytes()).decode()


def completion(srv, **body):
    return post(srv, "/v1/completions", {"model": MODEL_NAME, "temperature": 0, "max_tokens": 12,
                                         "ignore_eos": True, **body})


def ids_of(srv, text) -> list:
    r = post(srv, "/tokenize", {"model": MODEL_NAME, "prompt": text})
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def test_rows_give_the_ids_text(srv, table):
    ids = [ids_of(srv, t) for t in PROMPTS]
    want = []
    for p in ids:
        r = completion(srv, prompt=p)
        assert r.status_code == 200, r.text
        want.append(r.json()["choices"][0]["text"])
    one = completion(srv, prompt_embeds=b64(table[ids[0]]))
    assert one.status_code == 200, one.text
    assert one.json()["choices"][0]["text"] == want[0]
    assert one.json()["usage"]["prompt_tokens"] == len(ids[0])
    both = completion(srv, prompt_embeds=[b64(table[p]) for p in ids])
    assert both.status_code == 200, both.text
    assert [c["text"] for c in sorted(both.json()["choices"], key=lambda c: c["index"])] == want
    events = stream_post(srv, "/v1/completions", {"model": MODEL_NAME, "temperature": 0, "max_tokens": 12,
                                                  "ignore_eos": True, "prompt_embeds": b64(table[ids[1]])})
    text = "".join(e["choices"][0]["text"] for _, e in events if e != "[DONE]" and e["choices"])
    assert text == want[1]


@pytest.mark.parametrize("body,param,message", [
    (lambda t: {"prompt_embeds": "not base64!"}, "prompt_embeds", "not valid base64"),
    (lambda t: {"prompt_embeds": b64(t[:3, :-1])}, "prompt_embeds", r"not a whole number of float32 rows"),
    (lambda t: {"prompt_embeds": b64(np.full((2, t.shape[1]), np.nan))}, "prompt_embeds", r"\[0, 0\] is nan"),
    (lambda t: {"prompt_embeds": [b64(t[:2]), ""]}, "prompt_embeds", "must"),
    (lambda t: {"prompt_embeds": 5}, "prompt_embeds", "must be a base64 string"),
    (lambda t: {"prompt_embeds": b64(np.zeros((600, t.shape[1])))}, "prompt_embeds", r"600 rows exceed max_model_len"),
    (lambda t: {"prompt_embeds": b64(t[:2]), "prompt": "x"}, "prompt_embeds", "not both"),
    (lambda t: {"prompt_embeds": b64(t[:2]), "echo": True}, "echo", "echo and suffix need"),
    (lambda t: {"prompt_embeds": b64(t[:2]), "suffix": "y"}, "suffix", "echo and suffix need"),
    (lambda t: {}, "prompt", "'prompt' is a required field"),
])
def test_bad_prompt_embeds_are_400s(srv, table, body, param, message):
    import re

    r = completion(srv, **body(table))
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["param"].startswith(param) and re.search(message, err["message"]), err
    assert completion(srv, prompt="ok").status_code == 200
    assert not any(wait_idle(srv).values())


def test_body_limit_bounds_the_rows(srv, table):
    big = b64(np.zeros((1100, table.shape[1]), np.float32))  # 1100 * 256 bytes, base64: ~375 KB > 256 KiB
    r = completion(srv, prompt_embeds=big)
    assert r.status_code == 413, r.text
