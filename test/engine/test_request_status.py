"""The request lifecycle: legal transitions pass, every other edge raises."""

import itertools

import pytest

from llaisys.engine import InvalidTransitionError, Request, RequestStatus, RequestTimes, SamplingParams
from llaisys.engine.request import MIN_TOKENS_BIAS, TRANSITIONS

S = RequestStatus
LEGAL = {
    (S.WAITING, S.RUNNING), (S.RUNNING, S.PREEMPTED), (S.PREEMPTED, S.RUNNING),
    (S.RUNNING, S.FINISHED_STOPPED), (S.RUNNING, S.FINISHED_LENGTH),
} | {(a, b) for a in (S.WAITING, S.RUNNING, S.PREEMPTED) for b in (S.FINISHED_ABORTED, S.FINISHED_ERROR)}


def make(sp=None):
    return Request("r", "r", 0, [1, 2, 3], sp or SamplingParams(), seed=0, max_tokens=8,
                   eos_token_ids=frozenset({9}), times=RequestTimes(0.0))


def test_transition_table_is_exactly_the_lifecycle():
    assert {(a, b) for a, bs in TRANSITIONS.items() for b in bs} == LEGAL


@pytest.mark.parametrize("a,b", list(itertools.product(S, S)))
def test_each_edge(a, b):
    req = make()
    req.status = a
    if (a, b) in LEGAL:
        req.set_status(b)
        assert req.status == b
    else:
        with pytest.raises(InvalidTransitionError, match=f"{a.name} -> {b.name}"):
            req.set_status(b)


def test_finish_reasons_and_tokens():
    assert [s.finish_reason for s in S] == [None, None, None, "stop", "length", "abort", "error"]
    req = make(SamplingParams(logprobs=2))
    req.append_output_token(5, {5: -0.1})
    assert req.all_token_ids == [1, 2, 3, 5] and req.num_tokens == 4 and req.logprobs == [{5: -0.1}]


def test_min_tokens_bias_bans_eos_and_stop_ids_until_reached():
    req = make(SamplingParams(min_tokens=2, stop_token_ids=[7], logit_bias={3: 1.0}))
    assert req.logit_bias_now() == {3: 1.0, 7: MIN_TOKENS_BIAS, 9: MIN_TOKENS_BIAS}
    req.append_output_token(1)
    req.append_output_token(1)
    assert req.logit_bias_now() == {3: 1.0}
    assert make(SamplingParams(min_tokens=1, ignore_eos=True)).logit_bias_now() == {}
