"""The GPU sampler (llaisysSampleDevice on NVIDIA) against the CPU sampler (llaisysSample) on
the same logits: the same tokens, top ids and logprobs (within 1e-5), greedy exactly.

Small vocabularies run the GPU's exact paths (running sums in the CPU's order); 5000 and
151936 (Qwen2's) run the chunked sums and the top-p threshold search, whose float sums may
differ from the CPU's in the last bits (doc/models.md, "On the GPU"): a token could then
differ only when the draw lands within ~1e-16 of a boundary, which these seeds do not.
"""

import numpy as np
import pytest

import llaisys
from llaisys import DeviceType
from llaisys.models.qwen2 import RowSampling
from llaisys.sampler import sample, sample_on_device
from sampling_cases import MASK_PARAMS, PARAMS, assert_same, logits_for, rows_for

NV = DeviceType.NVIDIA
pytestmark = [
    pytest.mark.nvidia,
    pytest.mark.skipif(llaisys.runtime.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine"),
]


def gpu(logits, rows, top_capacity=8):
    return sample_on_device(logits, rows, top_capacity=top_capacity, device=NV)


def cpu(logits, rows, top_capacity=8):
    return sample(logits, rows, top_capacity=top_capacity)


@pytest.mark.parametrize("name,fields", PARAMS + MASK_PARAMS, ids=[p[0] for p in PARAMS + MASK_PARAMS])
@pytest.mark.parametrize("kind", ["normal", "ties", "flat"])
@pytest.mark.parametrize("vocab", [50, 3000, 5000])
def test_gpu_equals_cpu(name, fields, kind, vocab):
    logits = logits_for(kind, 24, vocab, seed=vocab + len(name))
    rows = rows_for(fields, 24, vocab, seed0=vocab)
    assert_same(gpu(logits, rows), cpu(logits, rows), fields.get("n_logprobs", 0))


@pytest.mark.parametrize("name,fields", PARAMS, ids=[p[0] for p in PARAMS])
def test_gpu_equals_cpu_at_qwen2_vocab(name, fields):
    vocab = 151936
    logits = logits_for("normal", 6, vocab, seed=len(name))
    rows = rows_for(fields, 6, vocab, seed0=11)
    assert_same(gpu(logits, rows), cpu(logits, rows), fields.get("n_logprobs", 0))


@pytest.mark.parametrize("top_k", [4095, 4096, 4097, 20000])
def test_top_k_around_the_exact_limit(top_k):
    """4096 candidates are summed in the CPU's order; more use the chunked sums."""
    vocab = 30000
    logits = logits_for("normal", 8, vocab, seed=top_k)
    for top_p in (1.0, 0.9):
        rows = rows_for(dict(temperature=1.5, top_k=top_k, top_p=top_p), 8, vocab)
        assert_same(gpu(logits, rows), cpu(logits, rows), 0)


def test_mixed_rows_in_one_batch():
    """Rows with different parameters in one call: each block samples its own row."""
    vocab = 4000
    logits = logits_for("ties", len(PARAMS), vocab, seed=3)
    rows = [rows_for(f, 1, vocab, seed0=i)[0] for i, (_, f) in enumerate(PARAMS)]
    assert_same(gpu(logits, rows, 8), cpu(logits, rows, 8), 0)
    g, c = gpu(logits, rows, 8), cpu(logits, rows, 8)
    for i, (_, f) in enumerate(PARAMS):
        n = f.get("n_logprobs", 0)
        np.testing.assert_array_equal(g.top_ids[i, :n], c.top_ids[i, :n])


def test_many_rows_span_several_launches():
    """More rows than fit the scratch budget of one launch (256 MiB / (8 * vocab))."""
    vocab = 600_000
    n = 60
    logits = logits_for("normal", n, vocab, seed=1)
    rows = rows_for(dict(temperature=1.0, top_k=50, n_logprobs=2), n, vocab)
    assert_same(gpu(logits, rows, 2), cpu(logits, rows, 2), 2)


def test_top_logprobs_with_many_ties_and_large_n():
    vocab = 5000
    logits = logits_for("ties", 4, vocab, seed=9)
    rows = [RowSampling(n_logprobs=n) for n in (1, 64, 2500, 5000)]
    g, c = gpu(logits, rows, 5000), cpu(logits, rows, 5000)
    for i, r in enumerate(rows):
        np.testing.assert_array_equal(g.top_ids[i, : r.n_logprobs], c.top_ids[i, : r.n_logprobs])
        np.testing.assert_allclose(g.top_logprobs[i, : r.n_logprobs], c.top_logprobs[i, : r.n_logprobs], atol=1e-5)


def test_greedy_first_index_of_the_max_and_negative_zero():
    logits = np.full((3, 1000), -1.0, np.float32)
    logits[0, [10, 500, 999]] = 2.0
    logits[1, :] = -np.inf
    logits[2, 7] = -0.0
    logits[2, 3] = 0.0
    rows = [RowSampling(), RowSampling(), RowSampling()]
    np.testing.assert_array_equal(gpu(logits, rows).token_ids, [10, 0, 3])
    np.testing.assert_array_equal(cpu(logits, rows).token_ids, [10, 0, 3])


def test_input_logits_are_left_alone_and_cache_is_reused():
    vocab = 2000
    logits = logits_for("normal", 4, vocab)
    rows = rows_for(dict(temperature=1.0, top_p=0.9, repetition_penalty=1.5, prompt_tokens=[1, 2]), 4, vocab)
    first = gpu(logits, rows)
    before = llaisys.runtime.memory_stats(NV)
    again = gpu(logits, rows)
    after = llaisys.runtime.memory_stats(NV)
    np.testing.assert_array_equal(first.token_ids, again.token_ids)
    assert after.reserved == before.reserved  # the second call's buffers came from the cache
