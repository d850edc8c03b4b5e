"""The real Qwen2.5-Coder-0.5B-Instruct: greedy output token-identical to transformers
(float32 reference, weights upcast) for 64 new tokens on varied chat prompts, run one at a
time and all together, on both KV layouts."""

import pytest
import torch

from llaisys import LLM, SamplingParams

pytestmark = pytest.mark.slow

CHATS = [
    [{"role": "user", "content": "Write a Python function that returns the nth Fibonacci number."}],
    [{"role": "system", "content": "You are a terse assistant. Answer in one sentence."},
     {"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "用中文解释一下什么是递归。"}],
    [{"role": "user", "content": "Fix the bug:\n```js\nfunction add(a, b) { return a - b }\n```"},
     {"role": "assistant", "content": "The function subtracts instead of adding."},
     {"role": "user", "content": "Show the corrected code and a test 🙂"}],
    [{"role": "user", "content": "List three sorting algorithms with their time complexity."}],
]
NEW_TOKENS = 64


@pytest.fixture(scope="module")
def reference(qwen05_dir):
    """transformers' greedy continuations, one prompt at a time (no padding effects)."""
    from transformers import AutoModelForCausalLM

    from llaisys.models.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(qwen05_dir)
    hf = AutoModelForCausalLM.from_pretrained(qwen05_dir, dtype=torch.float32).eval()
    refs = []
    for chat in CHATS:
        ids = tok.encode(tok.apply_chat_template(chat))
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
        refs.append(out[0, len(ids):].tolist())
    del hf
    return refs


@pytest.fixture(scope="module", params=["block", "slot"])
def llm(request, qwen05_dir):
    with LLM(qwen05_dir, kv_layout=request.param, kv_cache_memory=256 << 20) as engine:
        yield engine


GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def test_batched_greedy_equals_transformers(llm, reference):
    outs = llm.generate(CHATS, GREEDY)
    for out, ref in zip(outs, reference):
        assert out.outputs[0].token_ids == ref
        assert out.outputs[0].finish_reason == "length"


def test_one_at_a_time_equals_transformers(llm, reference):
    for chat, ref in zip(CHATS, reference):
        assert llm.generate([chat], GREEDY)[0].outputs[0].token_ids == ref
