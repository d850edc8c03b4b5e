"""Multi-model routing and engine death, in-process (Flask's test client over the real app):
two served names of the real 0.5B model, each with its own engine; the `model` field picks the
engine; once one engine's loop has stopped, /health and that model answer 503 while the
other model keeps serving."""

import json

import pytest

from llaisys.server import ServerState, create_app
from llaisys.server.state.registry import ModelSpec, Registry

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def app_state(qwen05_dir):
    reg = Registry([ModelSpec(str(qwen05_dir), "first"), ModelSpec(str(qwen05_dir), "second")],
                   {"kv_cache_memory": "32MiB", "max_model_len": 256, "max_num_seqs": 4})
    st = ServerState(reg)
    app = create_app(st)
    client = app.test_client()
    r = client.get("/health")
    assert r.status_code == 503 and r.get_json()["error"]["code"] == "loading"
    assert client.post("/v1/completions", json={"prompt": "x"}).get_json()["error"]["code"] == "loading"
    reg.load()
    yield st, client
    reg.shutdown()


def _prompt_tokens(st, name):
    return st.registry.models[name].engine.snapshot().prompt_tokens_total


def test_the_model_field_routes_to_that_engine(app_state):
    st, client = app_state
    assert client.get("/health").status_code == 200
    assert [m["id"] for m in client.get("/v1/models").get_json()["data"]] == ["first", "second"]
    before = {n: _prompt_tokens(st, n) for n in ("first", "second")}
    r = client.post("/v1/completions", json={"model": "second", "prompt": "def f(x):", "max_tokens": 3,
                                             "temperature": 0})
    assert r.status_code == 200 and r.get_json()["model"] == "second"
    assert _prompt_tokens(st, "second") > before["second"] and _prompt_tokens(st, "first") == before["first"]
    r = client.post("/v1/completions", json={"prompt": "def f(x):", "max_tokens": 3, "temperature": 0})
    assert r.get_json()["model"] == "first"  # no model: the first one
    assert _prompt_tokens(st, "first") > before["first"]
    body = client.post("/v1/completions", json={"model": "first", "prompt": "def f(x):", "max_tokens": 3,
                                                "temperature": 0, "stream": True}).get_data().decode()
    chunks = [json.loads(line[6:]) for line in body.split("\n") if line.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == r.get_json()["choices"][0]["text"]
    assert all(c["model"] == "first" for c in chunks)


def test_a_dead_engine_is_a_503_for_its_model_only(app_state):
    st, client = app_state
    st.registry.models["second"].engine.shutdown()  # the loop ends: the model can no longer serve
    h = client.get("/health")
    assert h.status_code == 503 and h.get_json()["error"]["code"] == "engine_dead"
    r = client.post("/v1/chat/completions", json={"model": "second", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503 and r.get_json()["error"]["code"] == "engine_dead"
    r = client.post("/v1/completions", json={"model": "first", "prompt": "x = ", "max_tokens": 2})
    assert r.status_code == 200
