"""Tokenizer: chat template rendering identical to transformers, and input validation."""

import json

import pytest

from llaisys.models.gguf_convert import convert_gguf
from llaisys.models.tokenizer import Tokenizer

SYSTEM = {"role": "system", "content": "You are a terse coding assistant. Answer in Python."}
CONVERSATIONS = {
    "single user turn": [{"role": "user", "content": "Write a function that reverses a string."}],
    "system + multi-turn": [
        SYSTEM,
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And in binary?\n\nShow   spaces\tand 中文 😀"},
    ],
    "multi-turn, no system": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "<|im_start|> is a special token"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "  leading and trailing whitespace  \n"},
    ],
    "tool call and result": [
        SYSTEM,
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "sunny"},
    ],
}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather <b>now</b> & more",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONVERSATIONS))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("with_tools", [False, True])
def test_chat_template_identical_to_transformers(qwen05_dir, name, add_generation_prompt, with_tools):
    ref, ours = _tokenizers(qwen05_dir)
    messages = CONVERSATIONS[name]
    tools = TOOLS if with_tools else None
    want = ref.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                   tokenize=False)
    got = ours.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt)
    assert got == want
    assert ours.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                    tokenize=True) == ref.encode(want, add_special_tokens=False)


_LOADED = {}


def _tokenizers(path):
    """(transformers tokenizer, ours) for `path`, loaded once per test session."""
    from transformers import AutoTokenizer

    if path not in _LOADED:
        _LOADED[path] = (AutoTokenizer.from_pretrained(path), Tokenizer.from_dir(path))
    return _LOADED[path]


@pytest.mark.slow
def test_default_system_prompt(qwen05_dir):
    text = _tokenizers(qwen05_dir)[1].apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                    "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def tiny_dir(tiny_gguf, tmp_path_factory):
    return convert_gguf(tiny_gguf, tmp_path_factory.mktemp("tok") / "hf")


@pytest.mark.parametrize("messages,message", [
    ("hello", "non-empty list"),
    ([], "non-empty list"),
    (["hello"], r"messages\[0\] must be a dict"),
    ([{"role": "robot", "content": "x"}], "role.*robot"),
    ([{"content": "x"}], "role"),
    ([{"role": "user", "content": 3}], r"messages\[0\]\['content'\] must be a string"),
    ([{"role": "user"}], "content"),
    ([{"role": "user", "content": "x", "tool_calls": []}], "tool_calls"),
])
def test_invalid_messages(tiny_dir, messages, message):
    with pytest.raises(ValueError, match=message):
        Tokenizer.from_dir(tiny_dir).apply_chat_template(messages)


def test_template_errors_become_value_errors(tiny_dir, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((tiny_dir / "tokenizer.json").read_bytes())
    cfg = {"chat_template": "{{ raise_exception('only user turns allowed') }}"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="only user turns allowed"):
        Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "x"}])
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content | tojson }}{% endfor %}")
    out = Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "<é>"}])
    assert out == '"<é>"'  # chat_template.jinja wins; tojson does not escape HTML or non-ASCII
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}")
    with pytest.raises(ValueError, match="syntax error"):
        Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "x"}])


def test_sandbox_blocks_attribute_escapes(tiny_dir, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((tiny_dir / "tokenizer.json").read_bytes())
    (tmp_path / "chat_template.jinja").write_text("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ValueError, match="unsafe"):
        Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "x"}])


def test_no_template(tiny_dir, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((tiny_dir / "tokenizer.json").read_bytes())
    with pytest.raises(ValueError, match="no chat template"):
        Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "x"}])


def test_encode_decode_validation(tiny_dir):
    tok = Tokenizer.from_dir(tiny_dir)
    ids = tok.encode("hello the world")
    assert tok.decode(ids) == "hello the world"
    assert tok.encode_batch(["he", "hell"]) == [tok.encode("he"), tok.encode("hell")]
    with pytest.raises(ValueError, match="string"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([1, tok.vocab_size])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([-1])
    with pytest.raises(ValueError, match="integers"):
        tok.decode(["a"])
    assert tok.decode([]) == ""


def test_missing_tokenizer_file(tmp_path):
    with pytest.raises(ValueError, match="no tokenizer.json"):
        Tokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="cannot load tokenizer"):
        Tokenizer.from_dir(tmp_path)
