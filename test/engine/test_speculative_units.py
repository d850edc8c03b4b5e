"""Speculative decoding pieces without a model: the n-gram lookup, config errors, the
acceptance rule, KV truncation, the cost model's off-switch."""

import numpy as np
import pytest

from llaisys.engine.kv_cache_manager import KVCacheManager
from llaisys.engine.spec import SpeculativeConfig, SpeculativeConfigError, parse_speculative
from llaisys.engine.spec.cost import DraftCost, LinearCost
from llaisys.engine.spec.ngram import ngram_lookup
from llaisys.engine.spec.verify import accept_greedy, accept_sampled


def test_ngram_longest_match_first_latest_occurrence():
    t = np.array([7, 1, 2, 3, 9, 1, 2, 4, 5, 8, 1, 2], np.int64)
    # the 2-gram (1, 2) occurs at 1 and 5: the latest wins, then what followed it
    assert ngram_lookup(t, 3, 4, 1) == [4, 5, 8]
    t = np.array([1, 2, 3, 0, 2, 3, 5, 6, 1, 2, 3], np.int64)
    assert ngram_lookup(t, 2, 4, 1) == [0, 2]  # (1, 2, 3) beats the more recent (2, 3)
    assert ngram_lookup(np.array([4, 5, 6]), 3, 4, 1) == []
    assert ngram_lookup(np.array([4]), 3, 4, 1) == []


@pytest.mark.parametrize("value,k,param", [
    ("draft", None, "speculative"), ("medusa", None, "speculative"), ("ngram", 0, "num_speculative_tokens"),
    ("ngram", 17, "num_speculative_tokens"), (None, 3, "num_speculative_tokens"), (42, None, "speculative")])
def test_config_errors_name_the_field(value, k, param):
    with pytest.raises(SpeculativeConfigError) as e:
        parse_speculative(value, k)
    assert e.value.param == param


def test_config_parses():
    assert parse_speculative(None) is None
    c = parse_speculative("draft:some/model", 6)
    assert (c.method, c.draft_model, c.num_speculative_tokens) == ("draft", "some/model", 6)
    assert parse_speculative("ngram").method == "ngram"
    with pytest.raises(SpeculativeConfigError):
        SpeculativeConfig(ngram_min=3, ngram_max=2)


def test_accept_greedy():
    assert accept_greedy([5, 6, 7], np.array([5, 6, 9, 1])) == [5, 6, 9]
    assert accept_greedy([5, 6], np.array([5, 6, 2])) == [5, 6, 2]
    assert accept_greedy([5], np.array([4, 2])) == [4]


def test_accept_sampled_law_one_position():
    """One draft position over many trials: the emitted token's law is p exactly."""
    p = np.array([[0.5, 0.3, 0.2, 0.0]])
    q = np.array([[0.1, 0.1, 0.2, 0.6]])
    rng = np.random.default_rng(0)
    counts = np.zeros(4)
    n = 40000
    for _ in range(n):
        d = int(rng.choice(4, p=q[0]))
        out = accept_sampled([d], q, p, bonus=99, rng=rng)
        counts[out[0]] += 1
    np.testing.assert_allclose(counts / n, p[0], atol=0.01)


class _Req:
    def __init__(self, rid):
        self.request_id, self.num_computed_tokens, self.slot_seq_id = rid, 0, None
        self.is_pooling, self.block_hashes, self.all_token_ids, self.num_tokens = False, [], [], 0


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_truncate_releases_rejected_blocks(layout):
    kv = KVCacheManager(8, 4, enable_prefix_caching=False, layout=layout)
    r = _Req("a")
    assert kv.allocate_slots(r, 14)  # 4 blocks
    kv.truncate(r, 5)  # 2 blocks hold 5 tokens
    assert len(kv.block_table("a")) == 2 and kv.num_free_blocks == 6
    if layout == "slot":
        assert kv.take_trims() == [(r.slot_seq_id, 5)]
    kv.free(r)
    kv.check_invariants()
    assert kv.num_used_blocks == 0


def test_cost_model_fit_and_off_switch():
    from llaisys.engine.spec.decoder import SpecDecoder, SpecRequestState

    c = LinearCost()
    c.observe(16, 9.0)  # the first step of a new largest size (workspace growth) is not kept
    for n in (1, 2, 4, 8, 16, 32) * 3:
        c.observe(n, 0.05 + 0.01 * n)
    c.observe(4, 5.0)  # one slow step: the median per size ignores it
    a, b = c.coefficients()
    assert abs(a - 0.05) < 1e-9 and abs(b - 0.01) < 1e-9
    noisy = LinearCost()
    noisy.observe(20, 1.0)  # not kept (a new largest size)
    for _ in range(5):
        noisy.observe(16, 0.3)
    noisy.observe(20, 0.25)
    noisy.observe(20, 0.25)  # two lucky timings of 20 tokens would make tokens free (b < 0): not enough
    assert not noisy.measured and noisy.coefficients() == (1.0, 0.02)
    noisy.observe(20, 0.35)
    assert noisy.measured  # three: the median (0.25) enters the fit, b clamped at 0

    class P:
        kind = "ngram"

    dec = SpecDecoder(SpeculativeConfig("ngram", num_speculative_tokens=4), P(), 4096)
    rows = []
    for i in range(16):
        r = _Req(str(i))
        r.spec_state = SpecRequestState(0.7, 1.0)
        rows.append((r, 4))
    dec.step_cost = c
    # a token costs 20% of the fixed step: at 16 rows no draft pays (0.7 / 0.01 < 16 / 0.21)
    assert dec._grant(rows, 16) == [0] * 16
    assert dec._grant(rows[:1], 1)[0] >= 1  # alone, drafts pay (0.7 / 0.01 > 1 / 0.06)
    dec.step_cost = LinearCost()
    for n in (1, 2, 4, 8, 16, 32) * 4:  # (the first of each new largest size is not kept)
        dec.step_cost.observe(n, 0.05 + 0.0001 * n)  # memory-bound: tokens nearly free
    assert all(k == 4 for k in dec._grant(rows, 16))
    # switched off for PROBE_EVERY steps in a row, one step speculates anyway (re-measuring)
    from llaisys.engine.spec.decoder import PROBE_EVERY

    dec.step_cost = c
    dec.proposer = types_ngram()
    running = [r for r, _ in rows]
    for r in running:
        r.num_computed_tokens, r.num_tokens, r.max_tokens, r.num_output_tokens = 9, 10, 100, 1
        r.sampling_params, r.structured, r.all_token_ids = _SP(), None, list(range(10))
    for _ in range(PROBE_EVERY):
        dec.prepare(running)
    assert dec.stats.num_off_steps == PROBE_EVERY - 1  # the last step probed


def _decoding(rows, n_tokens=10, max_tokens=100):
    """Requests in the decode state (every token but the last computed)."""
    out = []
    for i in range(rows):
        r = _Req(str(i))
        r.num_computed_tokens, r.num_tokens, r.max_tokens, r.num_output_tokens = n_tokens - 1, n_tokens, max_tokens, 1
        r.sampling_params, r.structured, r.all_token_ids, r.spec_state = _SP(), None, list(range(n_tokens)), None
        out.append(r)
    return out


class _Proposer:
    """Proposes k copies of token 7; a draft model's cost and catch-up when given one."""

    kind = "fake"

    def __init__(self, cost=None, catchup=0):
        self.calls = []
        if cost is not None:
            self.cost, self.catchup = cost, catchup
            self.catchup_tokens = lambda req: self.catchup

    def propose(self, requests, ks):
        from llaisys.engine.spec import Draft

        self.calls.append([(r.request_id, k) for r, k in zip(requests, ks)])
        return [Draft([7] * k) for k in ks]


def test_cost_model_explores_until_it_has_timed_two_step_sizes():
    """A decoder that has timed nothing does not trust its prior: steps alternate between no
    drafts and one probing row (the best, at full k), a probe first, until the target's step time is known at
    two sizes, each timed three times; only then does the cost model grant."""
    from llaisys.engine.spec.decoder import SpecDecoder

    prop = _Proposer()
    dec = SpecDecoder(SpeculativeConfig("ngram", num_speculative_tokens=4), prop, 4096)
    running = _decoding(16)
    granted = []
    for _ in range(7):
        dec.prepare(running)
        granted.append(sum(len(r.spec_token_ids) for r in running))
        dec.observe_step(16 + granted[-1], 16, 0.05 + 0.01 * (16 + granted[-1]))  # compute-bound: 10 ms a token
        assert dec.step_cost.measured == (len(granted) == 7)  # each size timed 3 times (20: the first not kept)
    assert granted == [4, 0, 4, 0, 4, 0, 4]  # a probing row at k = 4, none, ...
    assert len(prop.calls) == 4 and all(len(c) == 1 for c in prop.calls)
    for _ in range(3):  # now measured: at 16 rows a token costs more than it brings, nobody speculates
        dec.prepare(running)
        assert all(r.spec_token_ids == [] for r in running)
    assert len(prop.calls) == 4 and dec.stats.num_off_steps == 6


def test_the_prior_of_new_rows_is_the_proposers_measured_acceptance():
    """New rows, and rows resting, are assumed to accept what the proposer's drafts have been
    accepting lately over all rows, not a constant: on chat, where prompt lookup rarely
    matches, a fresh row does not start at 0.5."""
    from llaisys.engine.spec.decoder import SpecDecoder

    dec = SpecDecoder(SpeculativeConfig("ngram", num_speculative_tokens=4), _Proposer(), 4096)
    assert dec.prior == 0.5
    rows = _decoding(8)
    for _ in range(10):
        for r in rows:
            dec.on_verified(r, 4, 1)  # 4 drafts, the first rejected: 1 token judged, 0 accepted
        dec.on_verified(rows[0], 4, 2)  # the first accepted, the second rejected: 2 judged, 1 accepted
    assert 0.05 < dec.prior < 0.15  # per token: 1 accepted of 10 judged a round
    fresh = _decoding(1)[0]
    fresh.request_id = "new"
    assert abs(dec._state(fresh).alpha - dec.prior) < 1e-12


def test_draft_cost_separates_steady_rounds_from_catch_up():
    c = DraftCost(catchup_min=5)
    assert not c.measured and c.catchup_seconds(100) == 0.0 and c.coefficients() == (0.0, 0.0)
    c.observe(4, 0, 9.0)  # the first round of a new largest size (workspace growth) is not kept
    for _ in range(3):
        c.observe(4, 0, 0.16)  # steady rounds of 4 rows (one draft token each)
    assert c.measured and c.coefficients() == (0.16, 0.0)  # one size timed: all of it fixed
    assert c.catchup_seconds(100) == 0.0  # no catch-up timed yet: the first one is let through
    c.observe(4, 200, 0.16 + 200 * 0.01)  # one row's new prompt of 200 tokens: 10 ms a token beyond the rows
    assert abs(c.catchup_seconds(100) - 1.0) < 1e-9 and c.catchup_seconds(5) == 0.0
    for _ in range(3):
        c.observe(1, 0, 0.10)  # a row alone: the round's fixed cost shows
    a, b = c.coefficients()
    assert abs(a - 0.08) < 1e-9 and abs(b - 0.02) < 1e-9 and abs(c.round_seconds(16) - 0.4) < 1e-9
    first = DraftCost(catchup_min=5)
    first.observe(1, 300, 3.0)  # a catch-up before any steady round: all of its time is the catch-up's
    assert abs(first.catchup_seconds(100) - 1.0) < 1e-9 and not first.measured


def test_a_draft_rounds_fixed_cost_is_charged_once_per_depth():
    """A draft round streams the draft model's weights however few rows draft: at batch 16 one
    good row alone cannot repay it, all sixteen together can, and at batch 1 the row drafts to
    full depth."""
    from llaisys.engine.spec.decoder import SpecDecoder, SpecRequestState

    cost = DraftCost(catchup_min=5)
    for n in (1, 16) * 4:  # the first of each new largest size is not kept
        cost.observe(n, 0, 0.04 + 0.005 * n)
    assert cost.rounds.measured
    dec = SpecDecoder(SpeculativeConfig("draft", num_speculative_tokens=4, draft_model="x"), _Proposer(cost), 4096)
    for n in (1, 2, 16, 17) * 4:
        dec.step_cost.observe(n, 0.3 + 0.01 * n)  # 16 rows: 0.46 s a step, 35 tokens a second
    rows = _decoding(16)
    for r in rows:
        r.spec_state = SpecRequestState(0.0, 1.0)  # nothing accepted lately
    rows[0].spec_state = SpecRequestState(0.9, 1.0)
    cands = [(r, 4) for r in rows]
    # alone at depth 1: 0.9 tokens for 40 + 15 ms, 16 a second: below the step's 35
    assert dec._grant(cands, 16) == [0] * 16
    for r in rows:
        r.spec_state = SpecRequestState(0.9, 1.0)
    assert all(k >= 1 for k in dec._grant(cands, 16))  # sixteen rows share the round
    assert dec._grant(cands[:1], 1) == [4]  # batch 1: 4.1 tokens in 0.53 s against 1 in 0.31 s


def test_a_draft_catch_up_is_paid_only_when_the_remaining_output_repays_it():
    """A row the draft model has not seen costs its prompt's prefill in the draft first: with
    little output left the cost model does not start it, with much it does."""
    from llaisys.engine.spec.decoder import SpecDecoder, SpecRequestState

    cost = DraftCost(catchup_min=5)
    for _ in range(4):  # (the first not kept)
        cost.observe(4, 0, 0.004)  # 4 ms a round
    cost.observe(4, 1000, 0.004 + 1000 * 0.001)  # 1 ms a catch-up token: a 1000-token prompt costs 1 s
    prop = _Proposer(cost, catchup=1000)
    dec = SpecDecoder(SpeculativeConfig("draft", num_speculative_tokens=4, draft_model="x"), prop, 4096)
    for n in (1, 2, 3, 4, 5) * 4:  # the first of each new largest size is not kept
        dec.step_cost.observe(n, 0.1 + 0.002 * n)  # memory-bound target: 100 ms a step, 2 ms a token
    short, long = _decoding(1, max_tokens=4)[0], _decoding(1, max_tokens=400)[0]
    for r in (short, long):
        r.spec_state = SpecRequestState(0.8, 1.0)
    assert dec._grant([(short, 2)], 1) == [0]  # 3 tokens left save < 0.3 s: not worth 1 s
    assert dec._grant([(long, 4)], 1) == [4]  # ~170 steps left save ~ 20 s
    # a probe pays a timed catch-up only if even the best case repays it
    assert dec._probe([(short, 2), (long, 4)], 2, 2) == [0, 2]
    prop.catchup = 3  # caught up: the short one speculates too
    assert dec._grant([(short, 2)], 1) == [2]
    assert dec._probe([(short, 2), (long, 4)], 2, 2) == [2, 0]  # equal acceptance: the first


class _SP:
    speculative = None
    structured = None


def types_ngram():
    from llaisys.engine.spec import NgramProposer

    return NgramProposer(4, 1)


def test_asking_for_speculation_without_it_is_refused():
    from fake_runner import FakeRunner, FakeTokenizer

    from llaisys.engine import EngineConfig, LLMEngine, SamplingParams
    from llaisys.engine.sampling_params import SamplingParamsError

    eng = LLMEngine(EngineConfig(num_blocks=64), FakeRunner(), FakeTokenizer())
    with pytest.raises(SamplingParamsError) as e:
        eng.add_request("a", [1, 2, 3], SamplingParams(speculative=True))
    assert e.value.param == "speculative"
    eng.add_request("b", [1, 2, 3], SamplingParams(speculative=False, max_tokens=2))  # opting out is fine
    while eng.has_unfinished_requests():
        eng.step()
    with pytest.raises(SamplingParamsError):
        SamplingParams(speculative="yes")


def test_runner_that_cannot_verify_is_refused():
    from fake_runner import FakeRunner

    from llaisys.engine.spec import make_spec_decoder

    with pytest.raises(SpeculativeConfigError, match="cannot verify"):
        make_spec_decoder(SpeculativeConfig("ngram"), FakeRunner(), None, None, None)


def test_draft_with_another_vocabulary_is_refused(qwen05_dir):
    from fake_runner import FakeTokenizer

    from llaisys.engine.spec import check_same_tokenizer
    from llaisys.models.tokenizer import Tokenizer

    qwen = Tokenizer.from_dir(qwen05_dir)
    check_same_tokenizer(qwen, Tokenizer.from_dir(qwen05_dir), 151936, 151936, "same")  # accepted
    with pytest.raises(SpeculativeConfigError, match="vocabulary of 266 logits"):
        check_same_tokenizer(qwen, FakeTokenizer(), 151936, 266, "fake")
    with pytest.raises(SpeculativeConfigError, match="tokenizer has 266 tokens"):
        check_same_tokenizer(qwen, FakeTokenizer(), 151936, 151936, "fake")
