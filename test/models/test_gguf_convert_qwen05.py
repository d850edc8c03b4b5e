"""The converter on the real Qwen2.5-Coder-0.5B-Instruct GGUF, against transformers' own GGUF loading."""

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from llaisys.models.loader import load_model
from llaisys.models.safetensors_io import read_safetensors
from llaisys.models.tokenizer import Tokenizer

pytestmark = pytest.mark.slow

SAMPLES = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "你好，世界！今天天气很好。我们来写一个快速排序算法。",
    "Emoji: 😀🚀🇨🇳 👨‍👩‍👧‍👦 ❤️ 🤖🤖🤖",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "    leading spaces and\ttabs\t\tand   runs     of   spaces   ",
    "\n\n\nnewlines\r\nwindows\rmac\n \n\n  \n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|fim_prefix|>code<|fim_suffix|><|fim_middle|><tool_call>{\"a\": 1}</tool_call>",
    "numbers 1234567890 3.14159 1e-10 0x1F 1,000,000",
    "Ünïcödé façade naïve café Ελληνικά русский العربية हिन्दी 日本語 한국어",
    "'s 't 're 've 'm 'll 'd I'M YOU'LL don't",
    "",
    " ",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot\n#include <stdio.h>\n",
    "a\u200bb zero-width, non\u00a0breaking, ‘quotes’ “double” — dash…",
]


@pytest.fixture(scope="module")
def reference_state(qwen05_gguf):
    model = AutoModelForCausalLM.from_pretrained(qwen05_gguf.parent, gguf_file=qwen05_gguf.name,
                                                 dtype=torch.float32)
    return {k: v.detach() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def reference_tokenizer(qwen05_gguf):
    return AutoTokenizer.from_pretrained(qwen05_gguf.parent, gguf_file=qwen05_gguf.name)


def test_every_weight_equals_transformers_bf16_cast(qwen05_dir, reference_state):
    ours = read_safetensors(qwen05_dir / "model.safetensors").tensors
    assert set(ours) == set(reference_state) and len(ours) == 291
    mismatched = [name for name, t in ours.items()
                  if t.dtype != "bf16" or not np.array_equal(
                      t.data, reference_state[name].to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))]
    assert mismatched == []


def test_config_matches_models_doc(qwen05_dir):
    cfg = json.loads((qwen05_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]) == (24, 896, 4864)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]) == (14, 2, 151936)
    assert cfg["tie_word_embeddings"] is False and cfg["rope_theta"] == 1e6
    assert cfg["bos_token_id"] == 151643 and cfg["eos_token_id"] == 151645
    m = load_model(qwen05_dir)
    assert m.dtype == "bf16" and m.tensors["lm_head.weight"].shape == (151936, 896)


def test_token_ids_equal_transformers_gguf_tokenizer(qwen05_dir, reference_tokenizer):
    ours = Tokenizer.from_dir(qwen05_dir)
    for text in SAMPLES + ["\n".join(SAMPLES)]:
        ids = ours.encode(text)
        assert ids == reference_tokenizer.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == text


def test_tokenizer_json_loads_in_transformers(qwen05_dir):
    ref = AutoTokenizer.from_pretrained(qwen05_dir)
    ours = Tokenizer.from_dir(qwen05_dir)
    for text in SAMPLES + ["e\u0301 decomposed vs é composed"]:
        assert ours.encode(text) == ref.encode(text, add_special_tokens=False), text
    # NFC like Qwen2's own tokenizer.json: a decomposed accent encodes as the composed one
    assert ours.encode("cafe\u0301") == ours.encode("café")


def test_special_tokens(qwen05_dir):
    s = Tokenizer.from_dir(qwen05_dir).special
    assert (s.bos_token_id, s.eos_token_id, s.pad_token_id) == (151643, 151645, 151643)
    assert (s.im_start_id, s.im_end_id) == (151644, 151645)
    assert s.stop_token_ids == (151645, 151643)
