"""The real Qwen2.5-Coder-0.5B-Instruct GGUF run directly, against its converted bf16 directory:
config, tokenizer and template equal; every tensor mapped in its stored type; the Q4_K_M recipe of
models/quantize.py reproduces the file's type choices; greedy tokens agree with bf16."""

import json

import numpy as np
import pytest

from llaisys.models.arch import hf_config_dict, read_config, weight_slots
from llaisys.models.gguf_model import load_gguf, quant_summary
from llaisys.models.quantize import plan_types
from llaisys.models.tokenizer import Tokenizer

from test_gguf_convert_qwen05 import SAMPLES

pytestmark = pytest.mark.slow

PROMPTS = ["def quicksort(arr):", "Write a haiku about the sea.", "import numpy as np\n\n# add two matrices\n",
           "The capital of France is", "for i in range(10):\n    print(", "SELECT name FROM users WHERE"]


@pytest.fixture(scope="module")
def direct(qwen05_gguf):
    return load_gguf(qwen05_gguf)


def test_config_equals_the_converted_config_json(direct, qwen05_dir):
    # parsed: a directory converted by an older llaisys spells fewer defaults (head_dim, layer_types)
    assert direct.loaded.config == read_config(qwen05_dir / "config.json")
    cfg = json.loads((qwen05_dir / "config.json").read_text())
    assert all(hf_config_dict(direct.loaded.config)[k] == v for k, v in cfg.items()), cfg


def test_tokenizer_ids_and_template_equal_the_converted_directory(direct, qwen05_dir):
    ref = Tokenizer.from_dir(qwen05_dir)
    for text in SAMPLES + ["\n".join(SAMPLES)]:
        assert direct.tokenizer.encode(text) == ref.encode(text), text
    assert direct.tokenizer.special == ref.special and direct.tokenizer.chat_template == ref.chat_template
    chat = [{"role": "user", "content": "hi"}]
    assert direct.tokenizer.apply_chat_template(chat) == ref.apply_chat_template(chat)


def test_every_tensor_is_mapped_in_its_stored_type(direct, qwen05_gguf):
    tensors = direct.loaded.tensors
    assert set(tensors) == set(weight_slots(direct.loaded.config)) and len(tensors) == 291
    counts = {tag: n for tag, (n, _) in quant_summary(direct.loaded).items()}
    assert counts == {"q5_0": 133, "q8_0": 13, "q6_k": 12, "q4_k": 12, "f32": 121}
    total = sum(b for _, b in quant_summary(direct.loaded).values())
    assert total == sum(t.n_bytes for t in direct.file.tensors)  # the bytes the file holds, none widened
    assert direct.loaded.dtype == "f32"


def test_the_q4_k_recipe_reproduces_the_files_types(direct):
    """quantize="q4_k" picks what llama.cpp's Q4_K_M picked for this file: the same type for every
    tensor but attn_v / ffn_down, where llama.cpp counted layers in the file's (name-sorted) order,
    and the same number of those with more bits."""
    t = direct.loaded.tensors
    plan = plan_types(direct.loaded.config, list(t), "q4_k")
    stored = {name: x.dtype for name, x in t.items() if x.dtype != "f32"}
    assert set(plan) == set(stored)
    varied = ("v_proj", "down_proj")
    assert {n: q for n, q in plan.items() if not any(v in n for v in varied)} == \
        {n: q for n, q in stored.items() if not any(v in n for v in varied)}
    for v in varied:
        assert sorted(q for n, q in plan.items() if v in n) == sorted(q for n, q in stored.items() if v in n)


def _greedy(model, n: int = 24):
    from llaisys.engine import LLM, SamplingParams

    with LLM(str(model), kv_cache_memory="256MiB") as llm:
        outs = llm.generate(PROMPTS, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
        return [o.outputs[0].token_ids for o in outs]


def test_greedy_tokens_agree_with_the_bf16_directory(qwen05_gguf, qwen05_dir):
    """The GGUF run as Q4_K_M against the bf16 conversion of the same values: quantized kernels
    (int8 activations) against bf16 GEMM. Agreement: tokens equal up to the first divergence, per
    prompt, over all tokens; printed for doc/benchmarks.md."""
    ours, ref = _greedy(qwen05_gguf), _greedy(qwen05_dir)
    prefix = [next((i for i, (a, b) in enumerate(zip(o, r)) if a != b), len(r)) for o, r in zip(ours, ref)]
    rate = sum(prefix) / sum(len(r) for r in ref)
    same = np.mean([a == b for o, r in zip(ours, ref) for a, b in zip(o, r)])
    print(f"\nGGUF-direct vs bf16 dir: common-prefix agreement {rate:.3f}, positionwise {same:.3f}, "
          f"first tokens {sum(o[0] == r[0] for o, r in zip(ours, ref))}/{len(ref)}")
    assert all(o[0] == r[0] for o, r in zip(ours, ref))
    assert rate >= 0.5
