"""/v1/completions tokenizes a text prompt with the tokenizer's special tokens, as vLLM does
(its add_special_tokens defaults to true there): a model whose tokenizer adds a BOS (Llama,
Mistral) is prompted with it (the tiny model: test/tiny_checkpoint.make_bos_model)."""

from __future__ import annotations

import pytest

from server_helpers import MODEL_NAME, launch, post
from tiny_checkpoint import make_bos_model


@pytest.fixture(scope="module")
def bos_server(tmp_path_factory):
    srv = launch(make_bos_model(tmp_path_factory.mktemp("bos") / "m", bos=True), tmp_path_factory.mktemp("bos_srv"))
    yield srv
    srv.stop()


def test_a_text_prompt_gets_the_bos(bos_server):
    plain = post(bos_server, "/tokenize", {"prompt": "hello world"}).json()["tokens"]
    with_bos = post(bos_server, "/tokenize", {"prompt": "hello world", "add_special_tokens": True}).json()["tokens"]
    assert with_bos == [0] + plain
    body = {"model": MODEL_NAME, "prompt": "hello world", "max_tokens": 1, "temperature": 0}
    r = post(bos_server, "/v1/completions", body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(plain) + 1
    r = post(bos_server, "/v1/completions", dict(body, prompt=plain))  # token ids: as they are
    assert r.json()["usage"]["prompt_tokens"] == len(plain)
