"""Speculative sampling is distribution-exact: on two tiny real models (a target and a draft
with different random weights, vocabulary 64, lm_head scaled so the distributions are far
from uniform and far from each other), the first generated tokens of 20,000 seeded requests
with draft-model speculation (k = 2, every row speculating) follow the same law as plain
sampling: a chi-square test of homogeneity on the joint (token 1, token 2) and (token 2,
token 3) tables, p > 0.01, for plain temperature and for top-k + top-p. Also:
llaisysSampleProbs is the law llaisysSample draws from (explicit reference)."""

import types

import numpy as np
import pytest

from llaisys.engine import EngineConfig, LLMEngine, SamplingParams
from llaisys.engine.model_runner import CoreModelRunner
from llaisys.engine.spec import SpecDecoder, SpeculativeConfig
from llaisys.engine.spec.draft import DraftModelProposer
from llaisys.models.model import Model
from llaisys.models.step_io import RowSampling
from llaisys.sampler import sample
from llaisys.sampling_probs import sample_probs

VOCAB = 64
N = 20000  # the floor; resampling from p instead of max(p - q, 0) fails both cases at p ~ 1e-9 by 8,000
BLOCK = 16
SCALE = 30.0  # lm_head scale of the target: logits a few units apart


def tiny(path, seed, scale):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, torch_dtype="float32")
    m = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)  # logits spread of a few units: peaked, not one-hot
    m.save_pretrained(path, safe_serialization=True)
    return Model.from_path(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory, qwen05_dir):
    from llaisys.models.tokenizer import Tokenizer

    root = tmp_path_factory.mktemp("tiny_spec")
    # the draft: the target's weights with a flatter lm_head, so q differs from p but overlaps it
    target, draft = tiny(root / "t", 1, SCALE), tiny(root / "d", 1, SCALE * 0.5)
    yield target, draft, Tokenizer.from_dir(qwen05_dir)  # ids < 64 are printable ASCII
    target.close()
    draft.close()


def make_engine(target, draft, tok, speculative: bool):
    config = EngineConfig(max_num_seqs=256, max_num_batched_tokens=4096, max_model_len=64, block_size=BLOCK,
                          num_blocks=256 * 2, enable_prefix_caching=False, seed=0)
    cache = target.create_kv_cache("block", n_slots=config.num_kv_slots, block_size=BLOCK, dtype="f32")
    spec = proposer = None
    if speculative:
        holder = types.SimpleNamespace(model=draft, kv_dtype="f32", close=lambda: None)  # the draft's Worker part
        proposer = DraftModelProposer(holder, 256 * 2, BLOCK, num_speculative_tokens=2)
        spec = SpecDecoder(SpeculativeConfig("draft", num_speculative_tokens=2, draft_model="tiny", adaptive=False),
                           proposer, config.max_model_len)
    return LLMEngine(config, CoreModelRunner(target, cache), tok, speculative=spec), cache, proposer


def first_tokens(target, draft, tok, sp_kwargs, speculative):
    eng, cache, proposer = make_engine(target, draft, tok, speculative)
    prompt = [5, 17, 33, 9]
    out = np.zeros((N, 3), np.int64)
    for i in range(N):
        eng.add_request(str(i), prompt,  # independent seeds for the two samples
                        SamplingParams(max_tokens=4, seed=(7 << 40 if speculative else 0) + i, ignore_eos=True,
                                       **sp_kwargs))
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                out[int(o.request_id)] = o.outputs[0].token_ids[:3]
    stats = eng.spec.stats if speculative else None
    if proposer is not None:
        assert not proposer.seqs and proposer.kv.num_used_blocks == 0
        proposer.cache.close()
    cache.close()
    return out, stats


def homogeneity_p(a_pairs, b_pairs):
    """Chi-square test that two samples of pairs come from one law (cells with < 10 expected
    pooled into one)."""
    from scipy.stats import chi2_contingency

    keys_a = a_pairs[:, 0] * VOCAB + a_pairs[:, 1]
    keys_b = b_pairs[:, 0] * VOCAB + b_pairs[:, 1]
    ca = np.bincount(keys_a, minlength=VOCAB * VOCAB)
    cb = np.bincount(keys_b, minlength=VOCAB * VOCAB)
    big = (ca + cb) >= 20
    table = np.stack([np.append(ca[big], ca[~big].sum()), np.append(cb[big], cb[~big].sum())])
    table = table[:, table.sum(axis=0) > 0]
    assert table.shape[1] >= 10, "too few cells for a meaningful test"
    return chi2_contingency(table)[1]


@pytest.mark.parametrize("sp_kwargs", [dict(temperature=1.0), dict(temperature=1.5, top_k=20, top_p=0.95)],
                         ids=["temperature", "top_k_top_p"])
def test_speculative_sampling_matches_plain(models, sp_kwargs):
    target, draft, tok = models
    plain, _ = first_tokens(target, draft, tok, sp_kwargs, False)
    spec, stats = first_tokens(target, draft, tok, sp_kwargs, True)
    # the drafts disagree with the target often enough that rejection and resampling happen
    assert stats.num_draft_tokens >= N and 0.05 < stats.acceptance_rate < 0.95, stats
    assert homogeneity_p(plain[:, :2], spec[:, :2]) > 0.01
    assert homogeneity_p(plain[:, 1:3], spec[:, 1:3]) > 0.01


def reference_probs(logits, r: RowSampling):
    """Steps 1-8 of include/llaisys/sampler.h in numpy (float64 is close enough for 1e-5)."""
    w = logits.astype(np.float64).copy()
    for i, b in (r.logit_bias or {}).items():
        w[i] += b
    if r.temperature == 0:
        p = np.zeros_like(w)
        p[np.argmax(w)] = 1
        return p
    order = sorted(range(len(w)), key=lambda i: (-w[i], i))
    cand = order if not (0 < r.top_k < len(w)) else [i for i in range(len(w)) if w[i] >= w[order[r.top_k - 1]]]
    if r.top_p < 1:
        cand = sorted(cand, key=lambda i: (-w[i], i))
    e = np.exp((w[cand] - max(w[cand])) / r.temperature)
    keep = len(cand)
    if r.top_p < 1:
        keep = int(np.searchsorted(np.cumsum(e), r.top_p * e.sum() * (1 - 1e-12))) + 1
    e = e[:keep]
    e[e < r.min_p] = 0
    p = np.zeros_like(w)
    p[cand[:keep]] = e / e.sum()
    return p


@pytest.mark.parametrize("row", [
    RowSampling(temperature=0.7), RowSampling(temperature=1.3, top_k=5),
    RowSampling(temperature=1.0, top_p=0.6), RowSampling(temperature=0.9, top_k=20, top_p=0.8, min_p=0.05),
    RowSampling(temperature=1.0, logit_bias={3: 4.0, 7: -50.0}), RowSampling(temperature=0.0)])
def test_sample_probs_is_the_samplers_law(row):
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (1, 40)).astype(np.float32)  # [1, 40]
    p = sample_probs(logits, [row])[0]
    assert abs(p.sum() - 1) < 1e-5
    np.testing.assert_allclose(p, reference_probs(logits[0], row), atol=1e-5)
    # and the sampler's draws over 4000 seeds land only where p > 0, with p's frequencies
    rows = [RowSampling(**{**row.__dict__, "seed": s}) for s in range(4000)]
    ids = sample(np.repeat(logits, len(rows), axis=0), rows).token_ids
    assert set(ids.tolist()) <= set(np.flatnonzero(p).tolist())
    freq = np.bincount(ids, minlength=40) / len(rows)
    assert np.abs(freq - p).max() < 0.03
