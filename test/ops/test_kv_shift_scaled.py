"""A SLOT cache's seq_add re-rotates stored keys with the model's own (scaled) RoPE table
(KVCache::set_rope, issue 17): a sequence prefilled at positions 0.. and shifted by delta must
continue exactly as one prefilled at delta.. from the start. With the unscaled table of
rope_theta (the behaviour before set_rope) the shifted keys would be rotated by other angles."""

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
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128},
    "llama3": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
}
P = [5, 17, 300, 41, 9, 250, 77, 3, 120, 64, 11]
DELTA = 37


@pytest.fixture(scope="module", params=list(ROPE))
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tiny_llama_{request.param}")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = LlamaConfig(vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          rms_norm_eps=1e-6, rope_parameters=dict(ROPE[request.param]), tie_word_embeddings=False)
        hf = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():  # sharp attention, so positions (and a wrong rotation) matter
            for layer in hf.model.layers:
                layer.self_attn.q_proj.weight.mul_(8.0)
                layer.self_attn.k_proj.weight.mul_(8.0)
        hf.save_pretrained(path, safe_serialization=True)
    with Model.from_path(path) as m:
        yield m


def last_logits(m, cache, toks, start):
    res = m.step(cache, token_ids=toks, positions=np.arange(start, start + len(toks)), query_start=[0, len(toks)],
                 seq_ids=[0], sample_rows=[len(toks) - 1], want_logits=True)
    return res.logits[0]


@pytest.mark.parametrize("kv_dtype", ["f32", "bf16"])
def test_shifted_sequence_continues_as_if_prefilled_there(model, kv_dtype):
    with model.create_kv_cache("slot", n_slots=64, dtype=kv_dtype) as shifted, \
            model.create_kv_cache("slot", n_slots=64, dtype=kv_dtype) as direct:
        last_logits(model, shifted, P, 0)
        shifted.seq_add(0, 0, -1, DELTA)
        got = last_logits(model, shifted, [42], len(P) + DELTA)
        last_logits(model, direct, P, DELTA)
        expected = last_logits(model, direct, [42], len(P) + DELTA)
    # the same keys, rotated in two steps instead of one: equal up to the kv dtype's rounding
    tol = 2e-4 if kv_dtype == "f32" else 2e-2
    np.testing.assert_allclose(got, expected, atol=tol * np.abs(expected).max())
    # and not what an unshifted continuation gives (the test can tell a wrong rotation)
    with model.create_kv_cache("slot", n_slots=64, dtype=kv_dtype) as plain:
        last_logits(model, plain, P, 0)
        unshifted = last_logits(model, plain, [42], len(P) + DELTA)
    assert np.abs(unshifted - expected).max() > 10 * tol * np.abs(expected).max()
