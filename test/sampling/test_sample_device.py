"""llaisysSampleDevice on the CPU (runs everywhere): the same results as llaisysSample, the
errors of a bad device, and the draw order the GPU sampler reproduces (pinned here with the
RNG recomputed in Python)."""

import numpy as np
import pytest

import llaisys
from llaisys import DeviceType, LlaisysError
from llaisys.models.qwen2 import RowSampling
from llaisys.sampler import sample, sample_on_device
from sampling_cases import MASK_PARAMS, PARAMS, assert_same, logits_for, rows_for

M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def uniform(seed: int, step: int) -> float:
    """sampling::uniform: the row's draw in [0, 1)."""
    x = splitmix64(seed ^ splitmix64(step ^ 0x5851F42D4C957F2D))
    return (x >> 11) * (1.0 / 9007199254740992.0)


@pytest.mark.parametrize("name,fields", PARAMS + MASK_PARAMS, ids=[p[0] for p in PARAMS + MASK_PARAMS])
@pytest.mark.parametrize("kind", ["normal", "ties"])
def test_cpu_device_entry_equals_llaisys_sample(name, fields, kind):
    vocab = 300
    logits = logits_for(kind, 16, vocab, seed=len(name))
    rows = rows_for(fields, 16, vocab)
    n_lp = fields.get("n_logprobs", 0)
    assert_same(sample_on_device(logits, rows, top_capacity=8), sample(logits, rows, top_capacity=8), n_lp)


def test_bad_device_is_refused():
    logits = logits_for("normal", 1, 10)
    with pytest.raises(LlaisysError):
        sample_on_device(logits, [RowSampling()], device=DeviceType.CPU, device_id=3)
    if llaisys.runtime.device_count(DeviceType.NVIDIA) == 0:
        with pytest.raises(LlaisysError):
            sample_on_device(logits, [RowSampling()], device=DeviceType.NVIDIA)


def _walk(ids: np.ndarray, weights: np.ndarray, u: float) -> int:
    """The CPU's draw: running double sum in the given order, first index where u < acc."""
    acc, last = 0.0, ids[0]
    for i, w in zip(ids, weights):
        if w <= 0:
            continue
        last = i
        acc += float(w)
        if u < acc:
            return int(i)
    return int(last)


@pytest.mark.parametrize("top_p", [1.0, 0.7])
def test_draw_walks_id_order_without_top_p_and_sorted_with_it(top_p):
    """Top-k alone walks its candidates in id order, top-p in descending logit order (ties by
    id): the order both samplers share, checked against a Python walk of the same u."""
    logits = logits_for("ties", 1, 64, seed=5)[0]
    for step in range(40):
        r = RowSampling(temperature=1.0, top_k=12, top_p=top_p, seed=99, step=step)
        kth = np.sort(logits)[::-1][11]
        cand = np.flatnonzero(logits >= kth)  # id order, ties with the 12th kept
        if top_p < 1.0:
            cand = np.array(sorted(cand, key=lambda i: (-logits[i], i)))
        mx = logits.max()
        p = np.exp((logits[cand] - mx) * np.float32(1.0)).astype(np.float32)
        if top_p < 1.0:
            total = sum(float(x) for x in p)
            mass, keep = 0.0, len(p)
            for i, x in enumerate(p):
                mass += float(x)
                if mass >= top_p * total:
                    keep = i + 1
                    break
            cand, p = cand[:keep], p[:keep]
        kept = sum(float(x) for x in p)
        want = _walk(cand, p, uniform(99, step) * kept)
        assert sample(logits[None], [r]).token_ids[0] == want, step


def test_null_arguments_and_unknown_device_type_are_invalid():
    from llaisys import Status
    from llaisys.libllaisys import LIB
    from llaisys.libllaisys.sampler import SampleOutput

    out = SampleOutput()
    assert LIB.llaisysSampleDevice(0, 0, None, 1, 10, None, None) == Status.INVALID_ARGUMENT
    assert LIB.llaisysSampleDevice(0, 0, None, 1, 10, None, out) == Status.INVALID_ARGUMENT  # logits NULL
    assert LIB.llaisysSampleDevice(7, 0, None, 0, 10, None, out) == Status.INVALID_ARGUMENT  # device type 7
    assert "device type" in LIB.llaisysGetLastError().decode()
    assert LIB.llaisysSampleDevice(0, 0, None, 0, 10, None, out) == Status.OK  # no rows: nothing to do
