"""The core's sampler: each step of the documented order, checked statistically where random."""

import numpy as np
import pytest

import llaisys
from llaisys.models.qwen2 import RowSampling
from llaisys.sampler import sample

VOCAB = 50


@pytest.fixture
def logits():
    return np.random.default_rng(0).standard_normal((1, VOCAB)).astype(np.float32) * 3


def draws(logits, n=400, **kw):
    rows = [RowSampling(seed=7, step=s, **kw) for s in range(n)]
    return sample(np.repeat(logits, n, axis=0), rows).token_ids


def probs(l, t=1.0):
    e = np.exp((l - l.max()) / t)
    return e / e.sum()


def test_greedy_is_first_argmax(logits):
    l = logits.copy()
    l[0, 10] = l[0, 20] = l.max() + 1
    assert sample(l, [RowSampling()]).token_ids[0] == 10


def test_temperature_near_zero_equals_greedy(logits):
    assert set(draws(logits, temperature=1e-4)) == {int(np.argmax(logits))}


def test_fixed_seed_repeats_and_seeds_differ(logits):
    a = draws(logits, temperature=1.0)
    assert np.array_equal(a, draws(logits, temperature=1.0))
    rows = [RowSampling(temperature=1.0, seed=8, step=s) for s in range(400)]
    assert not np.array_equal(a, sample(np.repeat(logits, 400, axis=0), rows).token_ids)


def test_draws_follow_the_distribution(logits):
    n = 4000
    got = np.bincount(draws(logits, n=n, temperature=1.0), minlength=VOCAB) / n
    p = probs(logits[0])
    assert np.abs(got - p).max() < 0.03


def test_top_k_never_leaves_the_top_k(logits):
    top = set(np.argsort(-logits[0])[:5])
    assert set(draws(logits, temperature=2.0, top_k=5)) <= top


def test_top_p_keeps_the_smallest_prefix(logits):
    p = probs(logits[0])
    order = np.argsort(-p)
    keep = order[: int(np.searchsorted(np.cumsum(p[order]), 0.6) + 1)]
    got = set(draws(logits, temperature=1.0, top_p=0.6))
    assert got <= set(keep) and len(got) > 1


def test_min_p_drops_unlikely_tokens(logits):
    p = probs(logits[0])
    allowed = set(np.flatnonzero(p >= 0.2 * p.max()))
    assert set(draws(logits, temperature=1.0, min_p=0.2)) <= allowed


def test_penalties_and_bias_change_greedy_choice():
    l = np.array([[5.0, 4.0, 1.0, -1.0]], np.float32)
    assert sample(l, [RowSampling(logit_bias={2: 10.0})]).token_ids[0] == 2
    # repetition penalty divides positive logits of seen tokens: 5/2 < 4
    assert sample(l, [RowSampling(repetition_penalty=2.0, prompt_tokens=np.array([0]))]).token_ids[0] == 1
    # frequency penalty scales with the count in the output
    r = RowSampling(frequency_penalty=0.6, output_tokens=np.array([0, 0]))
    assert sample(l, [r]).token_ids[0] == 1
    assert sample(l, [RowSampling(presence_penalty=0.5, output_tokens=np.array([0, 0]))]).token_ids[0] == 0


def test_logprobs_are_of_the_raw_distribution(logits):
    res = sample(logits, [RowSampling(temperature=0.0, n_logprobs=5)], top_capacity=5)
    lp = logits[0] - np.log(np.exp(logits[0] - logits.max()).sum()) - logits.max()
    order = np.argsort(-logits[0])[:5]
    np.testing.assert_array_equal(res.top_ids[0], order)
    np.testing.assert_allclose(res.top_logprobs[0], lp[order], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.logprobs[0], lp[res.token_ids[0]], atol=1e-5)


def test_rows_are_independent_of_their_batch(logits):
    """A row's draw depends on (seed, step) alone, not on its neighbours."""
    other = np.random.default_rng(3).standard_normal((3, VOCAB)).astype(np.float32)
    r = RowSampling(temperature=1.0, seed=123, step=9)
    alone = sample(logits, [r]).token_ids[0]
    rows = [RowSampling(temperature=1.0, seed=s) for s in (1, 2)] + [r]
    assert sample(np.concatenate([other[:2], logits]), rows).token_ids[2] == alone


@pytest.mark.parametrize("bad", [dict(temperature=-1.0), dict(temperature=1e-40), dict(top_p=0.0), dict(top_p=1.5), dict(min_p=2.0),
                                 dict(repetition_penalty=0.0), dict(output_tokens=np.array([VOCAB])),
                                 dict(logit_bias={-1: 1.0}), dict(n_logprobs=3)])
def test_bad_parameters_raise_value_error(logits, bad):
    with pytest.raises(ValueError):
        sample(logits, [RowSampling(**bad)], top_capacity=0)
    assert llaisys.libllaisys.last_error()
