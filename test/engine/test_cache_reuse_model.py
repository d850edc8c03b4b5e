"""Cache reuse through LLM on tiny random Qwen2 checkpoints (the real core and tokenizer files):
a prompt that drops its leading chunk takes the rest from the previous request at new
positions (cached tokens); with one layer, where K and V depend on the token and its position
only, the outputs equal a full recompute; with reuse off nothing is reused; bad options fail
before the load; no block leaks over many requests (the engine conftest checks the managers)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from llaisys.engine import LLM, SamplingParams

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def checkpoint(path, tokenizer_dir, layers: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = Qwen2Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
        hf = Qwen2ForCausalLM(cfg).eval()
        with torch.no_grad():  # sharp attention, so a wrong position shows
            for layer in hf.model.layers:
                layer.self_attn.q_proj.weight.mul_(8.0)
                layer.self_attn.k_proj.weight.mul_(8.0)
        hf.save_pretrained(path, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (Path(tokenizer_dir) / name).is_file():
            shutil.copy(Path(tokenizer_dir) / name, path / name)
    return path


@pytest.fixture(scope="module")
def one_layer(qwen05_dir, tmp_path_factory):
    return checkpoint(tmp_path_factory.mktemp("reuse1"), qwen05_dir, 1)


@pytest.fixture(scope="module")
def two_layers(qwen05_dir, tmp_path_factory):
    return checkpoint(tmp_path_factory.mktemp("reuse2"), qwen05_dir, 2)


RNG = np.random.default_rng(0)
HEAD = [int(t) for t in RNG.integers(1000, 30000, 5)]
CHUNKS = [[int(t) for t in RNG.integers(1000, 30000, 40)] for _ in range(4)]
TAIL = [int(t) for t in RNG.integers(1000, 30000, 10)]
FIRST = HEAD + CHUNKS[0] + CHUNKS[1] + CHUNKS[2] + TAIL  # 135 tokens
MOVED = HEAD + CHUNKS[1] + CHUNKS[2] + CHUNKS[3] + TAIL  # chunk 0 dropped, chunk 3 new
GREEDY = SamplingParams(max_tokens=4, temperature=0.0, logprobs=2)


def make(path, **kw):
    return LLM(str(path), kv_dtype="f32", kv_cache_memory="8MiB", max_model_len=512, threads=1, **kw)


def _no_gpu() -> bool:
    from llaisys import DeviceType, runtime

    return runtime.device_count(DeviceType.NVIDIA) == 0


# on the GPU the copy is shift_kernel.cu's copy_shift; the tolerance allows its sincosf and the
# GPU attention's summation order (an 85-token reused prefix against a 135-token prefill)
@pytest.mark.parametrize("device,atol", [("cpu", 1e-4), pytest.param(
    "nvidia", 1e-3, marks=pytest.mark.skipif(_no_gpu(), reason="no NVIDIA GPU in this build/machine"))])
def test_a_moved_ring_is_reused_and_exact_with_one_layer(one_layer, device, atol):
    with make(one_layer, cache_reuse=16, device=device) as llm:
        first = llm.generate([FIRST], GREEDY)[0]
        assert first.usage.cached_tokens == 0
        moved = llm.generate([MOVED], GREEDY)[0]
        # the header in place, chunks 1-2 moved back 40: 85 tokens; chunk 3 and the tail computed
        assert moved.usage.cached_tokens == 85
        assert llm.engine.scheduler.kv.reuse.stats.tokens == 85
    with make(one_layer, device=device) as cold:
        want = cold.generate([MOVED], GREEDY)[0]
        assert want.usage.cached_tokens == 0
    assert moved.outputs[0].token_ids == want.outputs[0].token_ids
    for got, exp in zip(moved.outputs[0].logprobs, want.outputs[0].logprobs):
        assert got.keys() == exp.keys()
        np.testing.assert_allclose([got[k] for k in exp], list(exp.values()), atol=atol)


def test_off_reuses_nothing_and_on_reuses_with_two_layers(two_layers):
    with make(two_layers) as llm:
        llm.generate([FIRST], GREEDY)
        assert llm.generate([MOVED], GREEDY)[0].usage.cached_tokens == 0
        assert llm.engine.scheduler.kv.reuse is None
    with make(two_layers, cache_reuse=16) as llm:
        llm.generate([FIRST], GREEDY)
        out = llm.generate([MOVED], GREEDY)[0]
        assert out.usage.cached_tokens == 85 and len(out.outputs[0].token_ids) == 4
        assert llm.generate([MOVED], GREEDY)[0].usage.cached_tokens == 128  # now whole prefix blocks
    with make(two_layers, cache_reuse=81) as llm:  # the moved run is 80 tokens: below N, not taken
        llm.generate([FIRST], GREEDY)
        assert llm.generate([MOVED], GREEDY)[0].usage.cached_tokens == 5  # the header, in place


def test_many_requests_leak_nothing(two_layers):
    rng = np.random.default_rng(1)
    with make(two_layers, cache_reuse=8) as llm:
        for i in range(12):
            order = rng.permutation(4)[:3]
            prompts = [HEAD + sum((CHUNKS[j] for j in order), []) + TAIL for _ in range(2)]
            prompts[1] = prompts[1][:-3] + [int(rng.integers(1000, 30000))]
            for out in llm.generate(prompts, GREEDY):
                assert len(out.outputs[0].token_ids) == 4
        kv = llm.engine.scheduler.kv
        kv.check_invariants()
        assert kv.num_used_blocks == 0 and kv.reuse.stats.tokens > 0


@pytest.mark.parametrize("kw,fragment", [
    (dict(cache_reuse=-1), ">= 0"),
    (dict(cache_reuse="16"), "integer"),
    (dict(cache_reuse=16, kv_layout="slot"), "SLOT"),
    (dict(cache_reuse=16, enable_prefix_caching=False), "prefix cache"),
    (dict(cache_reuse=16, device="tpu"), "CPU and NVIDIA"),
])
def test_bad_options_fail_before_the_load(kw, fragment, monkeypatch):
    import llaisys.engine.llm as llm_mod

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(llm_mod, "Worker", no_load)
    with pytest.raises(ValueError, match=fragment):
        LLM("unused", **kw)
