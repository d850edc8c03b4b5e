"""Parameter combinations and logits shared by the sampler tests that compare two samplers
(CPU llaisysSample against llaisysSampleDevice on the CPU or the GPU)."""

from __future__ import annotations

import numpy as np

from llaisys.models.qwen2 import RowSampling

# (name, RowSampling fields): every step of the order alone and combined
PARAMS = [
    ("greedy", dict()),
    ("greedy_logprobs", dict(n_logprobs=5)),
    ("temperature", dict(temperature=1.0)),
    ("hot", dict(temperature=2.5)),
    ("cold", dict(temperature=0.2)),
    ("top_k_1", dict(temperature=1.0, top_k=1)),
    ("top_k_5", dict(temperature=1.0, top_k=5)),
    ("top_k_40", dict(temperature=0.8, top_k=40)),
    ("top_p_0.5", dict(temperature=1.0, top_p=0.5)),
    ("top_p_0.9", dict(temperature=1.3, top_p=0.9)),
    ("top_p_0.999", dict(temperature=2.0, top_p=0.999)),
    ("min_p", dict(temperature=1.0, min_p=0.1)),
    ("k_p_min", dict(temperature=0.9, top_k=20, top_p=0.8, min_p=0.05, n_logprobs=3)),
    ("p_min", dict(temperature=1.5, top_p=0.95, min_p=0.02)),
    ("penalties", dict(temperature=1.0, repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.3,
                       prompt_tokens=[1, 2, 3, 3, 7], output_tokens=[3, 9, 9, 9, 11])),
    ("penalties_greedy", dict(repetition_penalty=0.7, frequency_penalty=-0.5, output_tokens=[0, 0, 4, 4, 4, 8],
                              n_logprobs=4)),
    ("bias_dup", dict(temperature=0.7, top_k=10, logit_bias={5: 3.0, 6: -1.5, 0: 0.25})),
    ("everything", dict(temperature=1.1, top_k=30, top_p=0.9, min_p=0.01, repetition_penalty=1.2,
                        presence_penalty=0.1, frequency_penalty=0.2, prompt_tokens=[4, 5, 6],
                        output_tokens=[6, 6, 12], logit_bias={7: 2.0, 13: -2.0}, n_logprobs=8)),
]

# Step 0, the allowed mask: every allowed_every-th id from allowed_from (kept apart from PARAMS:
# a mask also masks NaN logits, which the NaN tests' expectations do not allow for)
MASK_PARAMS = [
    ("mask_greedy", dict(allowed_from=1, allowed_every=3, n_logprobs=3)),
    ("mask_sampled", dict(temperature=1.0, allowed_from=0, allowed_every=7)),
    ("mask_k_p", dict(temperature=1.2, top_k=8, top_p=0.9, allowed_from=2, allowed_every=2,
                      logit_bias={4: 5.0, 5: 5.0})),
    ("mask_one", dict(temperature=0.7, allowed_from=5, allowed_every=10 ** 9)),
]


def allowed_mask(vocab: int, start: int, every: int) -> np.ndarray:
    """[(vocab + 31) // 32] uint32 allowing ids start, start + every, ... below vocab."""
    bits = np.zeros((vocab + 31) // 32 * 32, np.uint8)
    bits[np.arange(start % vocab, vocab, every)] = 1
    return np.packbits(bits, bitorder="little").view(np.uint32).copy()


def rows_for(fields: dict, n: int, vocab: int, seed0: int = 0) -> list[RowSampling]:
    """n rows with these fields, different seeds and steps; token ids wrapped into the vocab."""
    f = dict(fields)
    for key in ("prompt_tokens", "output_tokens"):
        if key in f:
            f[key] = np.array(f[key], np.int64) % vocab
    if "logit_bias" in f:
        f["logit_bias"] = {k % vocab: v for k, v in f["logit_bias"].items()}
    if "allowed_from" in f:
        f["allowed_mask"] = allowed_mask(vocab, f.pop("allowed_from"), f.pop("allowed_every"))
    return [RowSampling(seed=seed0 + i * 7919, step=i % 5, **f) for i in range(n)]


def logits_for(kind: str, n: int, vocab: int, seed: int = 0) -> np.ndarray:
    """[n, vocab] f32: `normal` (distinct values), `ties` (few distinct values, many ties),
    `flat` (one value, then a single larger one per row)."""
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return (rng.standard_normal((n, vocab)) * 3).astype(np.float32)
    if kind == "ties":
        return np.round(rng.standard_normal((n, vocab)) * 2, 0).astype(np.float32)
    if kind == "flat":
        x = np.zeros((n, vocab), np.float32)
        x[np.arange(n), rng.integers(0, vocab, n)] = 1.0
        return x
    raise ValueError(kind)


def assert_same(a, b, n_logprobs: int) -> None:
    """Same tokens and top ids; logprobs within 1e-5."""
    np.testing.assert_array_equal(a.token_ids, b.token_ids)
    np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=1e-5)
    if n_logprobs:
        np.testing.assert_array_equal(a.top_ids[:, :n_logprobs], b.top_ids[:, :n_logprobs])
        np.testing.assert_allclose(a.top_logprobs[:, :n_logprobs], b.top_logprobs[:, :n_logprobs], rtol=0, atol=1e-5)
