"""Steps sized in time: the step-cost fit (engine/step_cost.py) and the scheduler's use of it.

The fit is checked on synthetic steps of known cost; the scheduler on a StepCost fed those same
synthetic timings, so every figure here is exact arithmetic, not a measurement."""

import pytest

from llaisys.engine import EngineConfig, Request, RequestTimes, SamplingParams, Scheduler
from llaisys.engine.step_cost import COLD_TOKENS, MIN_CHUNK, StepCost, attention_pairs

# a CPU-like step: 60 ms fixed, 2 ms a token, 20 ns an attention pair
W0, W1, W2 = 0.060, 0.002, 20e-9


def true_seconds(tokens, pairs):
    return W0 + W1 * tokens + W2 * pairs


def fed(shapes):
    """A StepCost that observed steps of (tokens, start) rows, one row each, at their true cost."""
    cost = StepCost()
    for n, start in shapes:
        p = attention_pairs(n, start)
        cost.observe(n, p, true_seconds(n, p))
    return cost


def test_attention_pairs_counts_causal_pairs():
    assert attention_pairs(1, 0) == 1
    assert attention_pairs(1, 9) == 10  # a decode token attends the 9 cached keys and itself
    assert attention_pairs(3, 2) == 3 * 2 + 1 + 2 + 3
    assert sum(attention_pairs(1, k) for k in range(100)) == attention_pairs(100, 0)


def test_fit_recovers_the_cost_of_steps_it_has_seen():
    cost = fed([(1, 100), (64, 0), (128, 64), (1, 300), (256, 192), (512, 448), (1, 900), (512, 960)])
    assert cost.fitted
    for n, start in [(300, 0), (400, 1000), (1, 2000)]:
        p = attention_pairs(n, start)
        assert cost.seconds(n, p) == pytest.approx(true_seconds(n, p), rel=1e-6)


def test_chunk_fits_the_time_left_and_shrinks_with_context():
    cost = fed([(1, 100), (64, 0), (128, 64), (1, 300), (256, 192), (512, 448), (1, 900), (1024, 960)])
    n0 = cost.chunk_tokens(0.5, 0, 4096)
    n5 = cost.chunk_tokens(0.5, 5000, 4096)
    assert 0 < n5 < n0 <= 2048
    for n, start in ((n0, 0), (n5, 5000)):
        assert cost.row_seconds(n, start) <= 0.5 < cost.row_seconds(n + 1, start)


def test_cold_and_untrusted_extrapolation_is_capped():
    assert StepCost().chunk_tokens(10.0, 0, 4096) == COLD_TOKENS
    # decode steps only: the fit sees no chunk longer than 4 tokens and plans at most 8
    cost = fed([(1, 10), (2, 20), (4, 30), (1, 40), (2, 50)])
    assert cost.chunk_tokens(10.0, 0, 4096) == max(COLD_TOKENS, 8)
    assert cost.chunk_tokens(10.0, 0, 5) == 5  # the caller's limit wins


def test_chunk_never_drops_below_the_minimum():
    cost = fed([(1, 100), (64, 0), (128, 64), (256, 192), (512, 448)])
    assert cost.chunk_tokens(-1.0, 0, 4096) == MIN_CHUNK
    assert cost.chunk_tokens(-1.0, 0, 3) == 3


def test_a_noisy_negative_term_is_dropped_not_used():
    cost = StepCost()
    for n in (1, 2, 3, 4, 5, 6):  # time falls with attention pairs: noise, not physics
        cost.observe(n, 100 - n, 0.01 * n)
    assert cost.seconds(10, 0) > 0 and cost.row_seconds(10, 0) > 0


def new_req(rid, n_prompt):
    base = 1000 * (sum(map(ord, rid)) % 50)
    return Request(rid, rid, 0, list(range(base + 1, base + n_prompt + 1)), SamplingParams(max_tokens=100),
                   seed=0, max_tokens=100, eos_token_ids=frozenset(), times=RequestTimes(0.0))


def scheduler(cost, gap_ms=500.0):
    cfg = EngineConfig(max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=8192, block_size=16,
                       num_blocks=1024, decode_gap_ms=gap_ms)
    return Scheduler(cfg, step_cost=cost)


def add(sched, req):
    sched.add_request(req)


def finish_all(sched):
    for rid in list(sched.requests):
        sched.abort(rid)


def step(sched, cost):
    """Schedule and apply one step; feed `cost` the step's true time; its (rows, seconds)."""
    out = sched.schedule()
    pairs = sum(attention_pairs(n, out.num_computed_tokens[r]) for r, n in out.num_scheduled_tokens.items())
    seconds = true_seconds(out.total_num_scheduled_tokens, pairs)
    cost.observe(out.total_num_scheduled_tokens, pairs, seconds)
    sched.update_from_output(out, {rid: [7] for rid in out.sample_req_ids})
    return dict(out.num_scheduled_tokens), seconds


def test_a_long_prompt_beside_a_stream_comes_in_steps_of_the_target_time():
    cost = StepCost()
    sched = scheduler(cost)
    add(sched, new_req("stream", 40))
    step(sched, cost)  # the stream's prompt, alone: the whole of it
    add(sched, new_req("long", 6000))
    times, rows = [], []
    while sched.requests["long"].num_computed_tokens < 6000:
        r, t = step(sched, cost)
        assert r["stream"] == 1  # every step carries the stream's next token
        rows.append(r.get("long", 0))
        times.append(t)
    assert len(rows) > 6000 // 2048 + 1  # cut finer than the token budget
    assert max(times[4:]) <= 0.5 * 1.05  # once the fit has seen a few steps, the target holds
    assert max(times) < true_seconds(2048, attention_pairs(2048, 0))  # never one budget-sized stall
    finish_all(sched)


def test_one_prompt_alone_takes_the_whole_budget():
    cost = fed([(1, 100), (64, 0), (128, 64), (256, 192), (512, 448)])
    sched = scheduler(cost)
    add(sched, new_req("long", 6000))
    assert step(sched, cost)[0] == {"long": 2048}
    finish_all(sched)


def test_a_gap_of_zero_turns_the_time_cap_off():
    cost = fed([(1, 100), (64, 0), (128, 64), (256, 192), (512, 448)])
    sched = scheduler(cost, gap_ms=0)
    add(sched, new_req("stream", 40))
    step(sched, cost)
    add(sched, new_req("long", 6000))
    assert step(sched, cost)[0] == {"stream": 1, "long": 2047}
    finish_all(sched)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "500", True])
def test_decode_gap_ms_is_checked(bad):
    with pytest.raises(ValueError, match="decode_gap_ms"):
        EngineConfig(decode_gap_ms=bad)


def test_a_due_fit_is_made_when_read_over_the_window_it_was_due_with(monkeypatch):
    """The fit is due every few observations but made when the model is read (issue 41: a
    steady decode step never reads it), over the window of the moment it was due: the weights
    are those an eager fit would have had, and observing alone never fits."""
    fits = []
    real = StepCost._fit
    monkeypatch.setattr(StepCost, "_fit", staticmethod(lambda obs: fits.append(list(obs)) or real(obs)))
    shapes = [(1, 100), (64, 0), (128, 64), (1, 300), (256, 192)]
    obs = [(n, attention_pairs(n, s), true_seconds(n, attention_pairs(n, s)) * (1 + 0.01 * i))
           for i, (n, s) in enumerate(shapes)]
    cost = StepCost()
    for o in obs:  # a fit is due at the third; the fourth and fifth come before the next is due
        cost.observe(*o)
    assert cost.fitted and fits == []
    got = cost.seconds(100, 5000)
    assert len(fits) == 1 and fits[0] == [tuple(float(v) for v in o) for o in obs[:3]]
    w = real(obs[:3])
    assert got == pytest.approx(w[0] + w[1] * 100 + w[2] * 5000, rel=1e-12)
    cost.seconds(1, 1)
    assert len(fits) == 1  # read again, nothing new due: no second fit
    for i in range(200):  # steady decoding: many due fits, none read
        cost.observe(1, 300 + i, true_seconds(1, 300 + i))
    assert len(fits) == 1
    cost.chunk_tokens(0.5, 0, 4096)
    assert len(fits) == 2 and len(fits[1]) == 64  # the window of the last due fit
