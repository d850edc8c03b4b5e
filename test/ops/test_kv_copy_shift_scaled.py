"""A BLOCK cache's copy_shift (cache reuse) re-rotates keys with the model's own (scaled) RoPE
table, as SLOT seq_add does (test_kv_shift_scaled.py): in a one-layer model a token's K/V depend
only on the token and its position, so tokens prefilled at 0.. in one sequence and copied with
delta into another, after a prefix of delta tokens, must continue exactly as the same tokens
prefilled after that prefix. A copy with delta 0 (keys left at their old positions) must not."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from llaisys.models.model import Model

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from transformers import LlamaConfig, LlamaForCausalLM

ROPE = {
    "default": {"rope_type": "default", "rope_theta": 1000000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128},
    "llama3": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
}
P = [5, 17, 300, 41, 9, 250, 77, 3, 120, 64, 11]  # the moved tokens
Q = [int(t) for t in np.random.default_rng(1).integers(1, 384, 37)]  # the prefix before them (delta = 37)
BS = 16


@pytest.fixture(scope="module", params=list(ROPE))
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tiny_llama1_{request.param}")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = LlamaConfig(vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          rms_norm_eps=1e-6, rope_parameters=dict(ROPE[request.param]), tie_word_embeddings=False)
        hf = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():  # sharp attention, so positions (and a wrong rotation) matter
            hf.model.layers[0].self_attn.q_proj.weight.mul_(8.0)
            hf.model.layers[0].self_attn.k_proj.weight.mul_(8.0)
        hf.save_pretrained(path, safe_serialization=True)
    with Model.from_path(path) as m:
        yield m


def run(m, cache, toks, start, table):
    """Compute toks at positions start.. of the sequence whose blocks are `table`; last logits."""
    pos = np.arange(start, start + len(toks))
    slots = np.asarray(table)[pos // BS] * BS + pos % BS
    res = m.step(cache, token_ids=toks, positions=pos, query_start=[0, len(toks)], sample_rows=[len(toks) - 1],
                 slot_mapping=slots, block_tables=[table], context_lens=[start + len(toks)], want_logits=True)
    return res.logits[0]


def continued(m, kv_dtype, delta_applied):
    """P prefilled at 0.. (blocks [7]), Q at 0.. (blocks [0..3]), P's K/V copied after Q with
    `delta_applied` rotation, then one token: its logits."""
    seq = [0, 1, 2, 3]
    with m.create_kv_cache("block", n_slots=8 * BS, block_size=BS, dtype=kv_dtype) as cache:
        run(m, cache, P, 0, [7])
        run(m, cache, Q, 0, seq)
        dst = np.arange(len(Q), len(Q) + len(P))
        cache.copy_shift(7 * BS + np.arange(len(P)), np.asarray(seq)[dst // BS] * BS + dst % BS,
                         np.full(len(P), delta_applied))
        return run(m, cache, [42], len(Q) + len(P), seq)


@pytest.mark.parametrize("kv_dtype", ["f32", "bf16"])
def test_copied_tokens_continue_as_if_prefilled_there(model, kv_dtype):
    got = continued(model, kv_dtype, len(Q))
    with model.create_kv_cache("block", n_slots=8 * BS, block_size=BS, dtype=kv_dtype) as direct:
        run(model, direct, Q + P, 0, [0, 1, 2, 3])
        expected = run(model, direct, [42], len(Q) + len(P), [0, 1, 2, 3])
    tol = 2e-4 if kv_dtype == "f32" else 2e-2  # two rotations instead of one: the kv dtype's rounding
    np.testing.assert_allclose(got, expected, atol=tol * np.abs(expected).max())
    unrotated = continued(model, kv_dtype, 0)
    assert np.abs(unrotated - expected).max() > 3 * tol * np.abs(expected).max()
