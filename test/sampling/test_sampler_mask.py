"""Step 0 of the core sampler, the allowed-token mask (structured output), against torch on f32
logits: greedy is torch's argmax of the masked logits, draws never leave the mask and follow
the masked softmax, logprobs stay the unmasked model's, and bad masks are errors."""

import ctypes

import numpy as np
import pytest
import torch

from llaisys.libllaisys import LIB, LlaisysError, Status
from llaisys.libllaisys.sampler import SampleOutput
from llaisys.libllaisys.sampler import SamplingParams as CParams
from llaisys.models.qwen2 import RowSampling
from llaisys.sampler import sample, sample_on_device

VOCAB = 1000  # not a multiple of 32: the last word is partial


def mask_of(allowed, vocab=VOCAB) -> np.ndarray:
    """[(vocab + 31) // 32] uint32 with the bits of `allowed` set."""
    bits = np.zeros(((vocab + 31) // 32) * 32, np.uint8)
    bits[np.asarray(allowed, np.int64)] = 1
    return np.packbits(bits, bitorder="little").view(np.uint32).copy()


def torch_masked(logits: np.ndarray, allowed) -> torch.Tensor:
    t = torch.from_numpy(logits.copy())
    keep = torch.zeros(t.shape[-1], dtype=torch.bool)
    keep[torch.as_tensor(np.asarray(allowed, np.int64))] = True
    return t.masked_fill(~keep, float("-inf"))


@pytest.fixture
def logits():
    return (np.random.default_rng(1).standard_normal((8, VOCAB)) * 4).astype(np.float32)


def test_greedy_is_torch_argmax_of_masked_logits(logits):
    rng = np.random.default_rng(2)
    allowed = [np.sort(rng.choice(VOCAB, size=k, replace=False)) for k in (1, 3, 17, 100, 500, 999, 1000, 40)]
    rows = [RowSampling(allowed_mask=mask_of(a)) for a in allowed]
    got = sample(logits, rows).token_ids
    want = [int(torch.argmax(torch_masked(logits[i], a))) for i, a in enumerate(allowed)]
    assert got.tolist() == want


def test_mask_applies_before_bias_and_penalties(logits):
    l = logits[:1]
    allowed = [3, 10, 20]
    # a large bias on a disallowed id cannot bring it back; one on an allowed id wins
    rows = [RowSampling(allowed_mask=mask_of(allowed), logit_bias={5: 100.0, 20: 50.0},
                        repetition_penalty=1.5, output_tokens=np.array([3, 10], np.int64))]
    assert sample(l, rows).token_ids[0] == 20


def test_draws_stay_in_the_mask_and_follow_the_masked_softmax(logits):
    allowed = np.arange(0, VOCAB, 37)  # 28 ids
    n = 6000
    l = np.repeat(logits[:1], n, axis=0)
    rows = [RowSampling(temperature=1.3, seed=11, step=s, allowed_mask=mask_of(allowed)) for s in range(n)]
    ids = sample(l, rows).token_ids
    assert set(ids.tolist()) <= set(allowed.tolist())
    p = torch.softmax(torch_masked(logits[0], allowed) / 1.3, dim=-1).numpy()
    assert np.abs(np.bincount(ids, minlength=VOCAB) / n - p).max() < 0.03


@pytest.mark.parametrize("fields", [dict(temperature=1.0, top_k=5), dict(temperature=0.8, top_p=0.7),
                                    dict(temperature=1.0, min_p=0.2), dict(temperature=2.0, top_k=50, top_p=0.9)])
def test_filters_see_only_allowed_ids(logits, fields):
    allowed = np.arange(1, VOCAB, 3)
    masked = torch_masked(logits[0], allowed)
    n = 400
    rows = [RowSampling(seed=5, step=s, allowed_mask=mask_of(allowed), **fields) for s in range(n)]
    ids = set(sample(np.repeat(logits[:1], n, axis=0), rows).token_ids.tolist())
    assert ids <= set(allowed.tolist())
    if "top_k" in fields:  # top-k of the masked logits, as torch.topk picks them
        assert ids <= set(torch.topk(masked, fields["top_k"]).indices.tolist())


def test_logprobs_are_the_unmasked_models(logits):
    allowed = [7, 8, 9]
    rows = [RowSampling(temperature=1.0, seed=3, n_logprobs=4, allowed_mask=mask_of(allowed))]
    res = sample(logits[:1], rows, top_capacity=4)
    raw = torch.log_softmax(torch.from_numpy(logits[0]), dim=-1)
    tok = int(res.token_ids[0])
    assert tok in allowed
    assert res.logprobs[0] == pytest.approx(float(raw[tok]), abs=1e-5)
    top = torch.topk(raw, 4)
    assert res.top_ids[0].tolist() == top.indices.tolist()  # the model's top-N, masked ids included
    np.testing.assert_allclose(res.top_logprobs[0], top.values.numpy(), atol=1e-5)


def test_nan_and_inf_under_the_mask():
    l = np.zeros((3, VOCAB), np.float32)
    l[0, 4] = np.nan  # a disallowed NaN is masked like any other logit
    l[0, 9] = 1.0
    l[1, 4] = np.nan  # an allowed NaN wins, as the argmax rule says
    l[2, :] = -np.inf  # every allowed logit -inf: the first allowed id
    rows = [RowSampling(allowed_mask=mask_of([9, 50])), RowSampling(temperature=1.0, allowed_mask=mask_of([4, 9])),
            RowSampling(temperature=1.0, allowed_mask=mask_of([640, 999]))]
    assert sample(l, rows).token_ids.tolist() == [9, 4, 640]


def test_bits_past_vocab_are_ignored(logits):
    m = mask_of([12])
    m[-1] |= np.uint32(0xFFFFFFFF) << np.uint32(VOCAB % 32)  # ids 1000..1023 do not exist
    assert sample(logits[:1], [RowSampling(temperature=1.0, seed=1, allowed_mask=m)]).token_ids[0] == 12


def test_masked_and_free_rows_share_a_batch(logits):
    rows = [RowSampling(), RowSampling(allowed_mask=mask_of([100, 200])), RowSampling(top_k=3, temperature=1.0)]
    alone = [sample(logits[i:i + 1], [r]).token_ids[0] for i, r in enumerate(rows)]
    assert sample(logits[:3], rows).token_ids.tolist() == alone
    assert alone[0] == int(np.argmax(logits[0]))


def test_sample_device_cpu_applies_the_mask(logits):
    rows = [RowSampling(allowed_mask=mask_of([1, 2, 3]))]
    assert sample_on_device(logits[:1], rows).token_ids[0] == 1 + int(np.argmax(logits[0, 1:4]))


@pytest.mark.parametrize("mask, words, text", [
    (mask_of([]), None, "allows no token"),
    (np.zeros(40, np.uint32), None, "mask_words"),  # one word too few (1000 ids need 32 words: 31.25)
    (mask_of([5])[:-1], None, "mask_words"),
    (np.concatenate([mask_of([5]), [0]]).astype(np.uint32), None, "mask_words"),
    (None, 32, "allowed_mask is NULL"),
])
def test_bad_masks_are_invalid_argument(logits, mask, words, text):
    if words is None:
        mask = np.asarray(mask, np.uint32)
        if text == "allows no token":
            mask[-1] = np.uint32(0xFF000000)  # only ids past the vocabulary: still no token
        with pytest.raises(LlaisysError) as e:
            sample(logits[:1], [RowSampling(allowed_mask=mask)])
        assert e.value.status == Status.INVALID_ARGUMENT and text in str(e.value)
        return
    p = LIB.llaisysSamplingDefaultParams()
    p.mask_words = words  # a count without a mask
    ids = np.zeros(1, np.int64)
    out = SampleOutput()
    out.token_ids = ids.ctypes.data
    row = np.ascontiguousarray(logits[:1])
    st = LIB.llaisysSample(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, VOCAB, ctypes.byref(p),
                           ctypes.byref(out))
    assert st == Status.INVALID_ARGUMENT and text in LIB.llaisysGetLastError().decode()


def test_default_params_have_no_mask():
    p = LIB.llaisysSamplingDefaultParams()
    assert not p.allowed_mask and p.mask_words == 0
    assert ctypes.sizeof(CParams) == ctypes.sizeof(p)
