"""The sampler's NaN rule (include/llaisys/sampler.h, "NaN"), on the CPU and, where a GPU is
present, on NVIDIA: after bias and penalties, a row with a NaN returns its first NaN index
whatever the temperature, with NaN logprobs, and its top-N ids put the NaNs first. Rows
without a NaN sampled in the same call must come out bit for bit as they do alone.
"""

from __future__ import annotations

import numpy as np
import pytest

import llaisys
from llaisys import DeviceType
from llaisys.models.qwen2 import RowSampling
from llaisys.sampler import sample, sample_on_device

from sampling_cases import PARAMS, logits_for, rows_for

NV = DeviceType.NVIDIA
NAN, INF = np.float32("nan"), np.float32("inf")

DEVICES = [
    pytest.param(DeviceType.CPU, id="cpu"),
    pytest.param(NV, id="nvidia", marks=[pytest.mark.nvidia, pytest.mark.skipif(
        llaisys.runtime.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine")]),
]


def run(device, logits, rows, top_capacity=8):
    if device == DeviceType.CPU:
        return sample(logits, rows, top_capacity)
    return sample_on_device(logits, rows, top_capacity, device=device)


def nan_logits(vocab: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """Rows with NaNs in various places (with +inf and -inf beside them) and each first NaN."""
    rng = np.random.default_rng(seed)
    rows, first = [], []
    for places in ([0], [vocab - 1], [17, 3, vocab // 2], [vocab // 3], list(range(vocab))):
        r = (rng.standard_normal(vocab) * 3).astype(np.float32)
        r[(min(places) + 1) % vocab] = INF  # +inf never beats a NaN
        r[(max(places) + 2) % vocab] = -INF
        r[places] = NAN
        rows.append(r)
        first.append(min(places))
    return np.stack(rows), first


def interleave(normal: np.ndarray, nan: np.ndarray):
    """normal and NaN rows alternated in one batch, and where each landed."""
    n = len(normal) + len(nan)
    normal_at = list(range(0, 2 * len(normal), 2))[: len(normal)]
    nan_at = [i for i in range(n) if i not in normal_at]
    out = np.empty((n, normal.shape[1]), np.float32)
    out[normal_at], out[nan_at] = normal, nan
    return out, normal_at, nan_at


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab", [64, 5000])
@pytest.mark.parametrize("name,fields", PARAMS, ids=[p[0] for p in PARAMS])
def test_nan_rows_take_the_first_nan_and_leave_the_others_alone(device, vocab, name, fields):
    normal = logits_for("normal", 5, vocab, seed=1)
    nan, first = nan_logits(vocab, seed=2)
    batch, normal_at, nan_at = interleave(normal, nan)
    rows = rows_for(fields, len(batch), vocab, seed0=3)
    got = run(device, batch, rows)
    alone = run(device, normal, [rows[i] for i in normal_at])
    # the rows without NaN: bit for bit what they give alone
    np.testing.assert_array_equal(got.token_ids[normal_at], alone.token_ids)
    np.testing.assert_array_equal(got.logprobs[normal_at].view(np.uint32), alone.logprobs.view(np.uint32))
    n_top = fields.get("n_logprobs", 0)
    np.testing.assert_array_equal(got.top_ids[normal_at, :n_top], alone.top_ids[:, :n_top])
    np.testing.assert_array_equal(got.top_logprobs[normal_at, :n_top].view(np.uint32),
                                  alone.top_logprobs[:, :n_top].view(np.uint32))
    # the NaN rows: the first NaN (bias and penalties are finite: they keep a NaN a NaN)
    assert got.token_ids[nan_at].tolist() == first
    assert np.isnan(got.logprobs[nan_at]).all()
    assert np.isnan(got.top_logprobs[nan_at, :n_top]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_nan_row_ignores_the_seed(device, temperature):
    logits = np.zeros((16, 50), np.float32)
    logits[:, 31] = NAN
    logits[:, 7] = 5.0
    rows = [RowSampling(temperature=temperature, seed=s, step=s, top_p=0.9 if s % 2 else 1.0) for s in range(16)]
    assert run(device, logits, rows).token_ids.tolist() == [31] * 16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_penalties_that_make_a_nan_follow_the_rule(device, temperature):
    """+inf minus an infinite frequency penalty (a finite parameter times a count) is NaN: the
    rule applies to the processed row, and the row's logprobs are NaN though the raw row has
    none."""
    logits = np.repeat((np.random.default_rng(4).standard_normal((1, 40)) * 2).astype(np.float32), 2, axis=0)
    logits[:, 9] = INF
    logits[:, 3] = 50.0
    pen = RowSampling(temperature=temperature, frequency_penalty=3e38, output_tokens=np.array([9, 9], np.int64),
                      n_logprobs=3, seed=5)
    plain = RowSampling(n_logprobs=3)  # greedy: the +inf
    got = run(device, logits, [pen, plain])
    assert got.token_ids.tolist() == [9, 9]  # NaN after the penalty; +inf without it
    assert np.isnan(got.logprobs[0]) and np.isnan(got.top_logprobs[0, :3]).all()
    third = int(np.argsort(-logits[0], kind="stable")[2])
    assert got.top_ids[0, :3].tolist() == got.top_ids[1, :3].tolist() == [9, 3, third]  # raw order


@pytest.mark.parametrize("device", DEVICES)
def test_top_logprobs_put_nans_first_by_id(device):
    logits = np.arange(30, dtype=np.float32).reshape(1, 30) * 0.5
    logits[0, 25] = NAN
    logits[0, 4] = NAN
    logits[0, 10] = INF
    got = run(device, logits, [RowSampling(n_logprobs=6)])
    assert got.token_ids.tolist() == [4]
    assert got.top_ids[0, :6].tolist() == [4, 25, 10, 29, 28, 27]
    assert np.isnan(got.top_logprobs[0, :6]).all() and np.isnan(got.logprobs[0])


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_special_rows(device):
    """Greedy on rows without NaN: +inf ties and all -inf go to the first index."""
    logits = np.zeros((3, 20), np.float32)
    logits[0, [6, 2]] = INF
    logits[1] = -INF
    logits[2] = -1.0
    logits[2, 13] = 0.0
    assert run(device, logits, [RowSampling()] * 3).token_ids.tolist() == [2, 0, 13]


def test_nan_bias_is_refused():
    """A NaN can only come from the logits (or inf - inf): a bias must be finite."""
    with pytest.raises(ValueError, match="bias_values"):
        sample(np.zeros((1, 10), np.float32), [RowSampling(logit_bias={3: float("nan")})])


@pytest.mark.parametrize("device", DEVICES)
def test_rows_without_a_softmax_return_their_argmax(device):
    """A sampled row whose largest value is +inf, or which is -inf everywhere, has no softmax
    (inf - inf): it returns its argmax (the first +inf; index 0), like a NaN row, beside normal
    rows that come out as they do alone."""
    vocab = 300
    rng = np.random.default_rng(7)
    normal = (rng.standard_normal((2, vocab)) * 2).astype(np.float32)
    pos_inf = (rng.standard_normal(vocab)).astype(np.float32)
    pos_inf[[41, 250]] = INF
    neg_inf = np.full(vocab, -INF, np.float32)
    logits = np.stack([normal[0], pos_inf, neg_inf, normal[1]])
    hot = RowSampling(temperature=1.0, top_k=50, top_p=0.9, seed=3)
    got = run(device, logits, [hot] * 4)
    assert got.token_ids.tolist()[1:3] == [41, 0]
    alone = run(device, normal, [hot] * 2)
    assert [got.token_ids[0], got.token_ids[3]] == alone.token_ids.tolist()
