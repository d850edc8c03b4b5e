"""Text at the Python edge: invalid Unicode and absurd nesting are ValueErrors, never a TypeError
from `tokenizers` (a 500 at the server) or a RecursionError."""

import pytest

import llaisys
from llaisys.models.tokenizer import Tokenizer

SURROGATE = "a\ud800b"


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return Tokenizer.from_dir(tiny_dir)


def test_encode_refuses_a_lone_surrogate(tok):
    with pytest.raises(ValueError, match="lone surrogate"):
        tok.encode(SURROGATE)
    with pytest.raises(ValueError, match=r"texts\[1\].*lone surrogate"):
        tok.encode_batch(["ok", SURROGATE])
    with pytest.raises(ValueError, match="lone surrogate"):
        tok.token_to_id("\udfff")
    assert tok.encode("a\U0001F600b")  # a proper pair (one astral character) is fine


@pytest.mark.parametrize("messages,where", [
    ([{"role": "user", "content": SURROGATE}], r"messages\[0\]\['content'\]"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"x": SURROGATE}}}]}],
     r"messages\[0\]\['tool_calls'\]"),
    ([{"role": "user", "content": "x", "name": SURROGATE}], r"messages\[0\]\['name'\]"),
], ids=["content", "tool_call_argument", "name"])
def test_chat_template_refuses_a_lone_surrogate(tok, messages, where):
    with pytest.raises(ValueError, match=f"{where}.*lone surrogate"):
        tok.apply_chat_template(messages)


def test_chat_refuses_absurd_nesting(tok):
    deep = "x"
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested more than"):
        tok.apply_chat_template([{"role": "user", "content": "x", "extra": deep}])
    with pytest.raises(ValueError, match="nested more than"):
        tok.apply_chat_template([{"role": "user", "content": "x"}], tools=[{"deep": deep}])


def test_generate_refuses_a_lone_surrogate(tiny_dir):
    llm = llaisys.LLM(str(tiny_dir), kv_cache_memory="16MiB")
    with pytest.raises(ValueError, match="lone surrogate"):
        llm.generate(SURROGATE, llaisys.SamplingParams(max_tokens=1))
