"""Incremental detokenization and stop conditions: no half characters, no leaked stop
strings, stop tokens, eos, min_tokens, max_tokens, deltas."""

import pytest

from fake_runner import EOS, FakeTokenizer, make_engine, run_all
from llaisys.engine import OutputProcessor, Request, RequestStatus, RequestTimes, SamplingParams
from llaisys.engine.detokenizer import IncrementalDetokenizer
from llaisys.engine.output_processor import StopMatcher

TOK = FakeTokenizer()
S = RequestStatus


def b(text):
    return list(text.encode())


def feed(ids, **sp):
    """Run ids through an OutputProcessor as one request; (request, [(delta_text, status)])."""
    proc = OutputProcessor(TOK.decode)
    params = SamplingParams(max_tokens=sp.pop("max_tokens", 100), **sp)
    req = Request("r", "r", 0, b("> "), params, seed=0, max_tokens=params.max_tokens,
                  eos_token_ids=frozenset({EOS}), times=RequestTimes(0.0))
    req.status = S.RUNNING
    proc.add_group("r", None, [req])
    events = []
    for t in ids:
        status = req.append_token(t, None, 1.0)  # the scheduler's token-level stops
        if status is not None:
            req.status = status
        for r, st, _ in proc.process([req]):  # the processor's stop strings
            if not r.is_finished or r.status == S.FINISHED_LENGTH:
                r.status = status = st
        (out,) = proc.make_outputs([req])
        c = out.outputs[0]
        events.append((c.delta_text, status))
        if status is not None:
            assert out.finished and c.text == "".join(d for d, _ in events)
            break
    return req, events


def text_of(events):
    return "".join(d for d, _ in events)


def test_multibyte_character_split_over_tokens_is_never_emitted_in_half():
    ids = b("a") + list("é€".encode()) + b("z")  # é = 2 bytes, € = 3 bytes
    req, events = feed(ids, max_tokens=len(ids))
    deltas = [d for d, _ in events]
    assert deltas == ["a", "", "é", "", "", "€", "z"]
    assert all("\ufffd" not in d for d in deltas)
    assert events[-1][1] == S.FINISHED_LENGTH and req.stop_reason is None


def test_detokenizer_flush_emits_a_dangling_partial_character():
    d = IncrementalDetokenizer(TOK.decode, [], True)
    assert d.add(0xE2) == "" and d.add(0x82) == ""
    assert d.flush() == "\ufffd" and d.flush() == ""


def test_length_finish_flushes_pending_bytes():
    req, events = feed(b("x") + [0xE2, 0x82], max_tokens=3)
    assert text_of(events) == "x\ufffd" and events[-1][1] == S.FINISHED_LENGTH


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_across_token_boundaries_never_leaks(include):
    ids = b("abcST") + b("OPxyz")
    req, events = feed(ids, stop=["STOP"], include_stop_str_in_output=include)
    text = text_of(events)
    assert text == ("abcSTOP" if include else "abc")
    if not include:  # no prefix of the stop string went out early
        assert "S" not in "".join(d for d, _ in events[:-1])
    assert events[-1][1] == S.FINISHED_STOPPED and req.stop_reason == "STOP"
    assert req.output_token_ids == b("abcSTOP")  # the tokens up to the stop are kept
    assert len(events) == 7


def test_stop_string_inside_one_multichar_token_cuts_the_tail():
    ids = b("ab") + [TOK.id_of("hello")]
    req, events = feed(ids, stop=["ell"])
    assert text_of(events) == "abh" and req.stop_reason == "ell"


def test_partial_stop_prefix_is_released_when_it_turns_out_not_to_match():
    req, events = feed(b("aST") + b("x") + [EOS], stop=["STOP"])
    deltas = [d for d, _ in events]
    assert deltas == ["a", "", "", "STx", ""]
    assert events[-1][1] == S.FINISHED_STOPPED and req.stop_reason is None


def test_earliest_stop_string_wins_and_helpers():
    assert StopMatcher(["CD", "BC"]).find("xxABCD", 2) == (3, "BC")
    assert StopMatcher(["zz"]).find("abc", 1) is None
    assert StopMatcher(["world", "or"]).held_back("hello wor") == 3
    assert StopMatcher(["x"]).held_back("abc") == 0


def test_eos_stops_and_is_not_in_the_text():
    req, events = feed(b("hi") + [EOS] + b("more"))
    assert text_of(events) == "hi" and events[-1][1] == S.FINISHED_STOPPED
    assert req.output_token_ids == b("hi") + [EOS] and req.stop_reason is None


def test_ignore_eos_and_min_tokens():
    req, events = feed(b("a") + [EOS] + b("b"), ignore_eos=True, max_tokens=3)
    assert events[-1][1] == S.FINISHED_LENGTH and text_of(events) == "ab"
    req, events = feed([EOS, EOS, EOS, EOS], min_tokens=2)  # eos counts after 2 other tokens
    assert len(events) == 3 and events[-1][1] == S.FINISHED_STOPPED
    req, events = feed(b("STOP") + b("x"), stop=["STOP"], min_tokens=6, max_tokens=6)
    assert events[3][1] is None  # "STOP" completes at token 4 < min_tokens: no stop


def test_stop_token_ids_report_the_id_and_respect_include():
    stop_id = ord("!")
    req, events = feed(b("ok!") + b("zz"), stop_token_ids=[stop_id])
    assert text_of(events) == "ok" and req.stop_reason == stop_id and events[-1][1] == S.FINISHED_STOPPED
    req, events = feed(b("ok!"), stop_token_ids=[stop_id], include_stop_str_in_output=True)
    assert text_of(events) == "ok!"


def test_special_tokens_skipped_or_kept():
    from fake_runner import PAD
    _, events = feed(b("a") + [PAD] + b("b"), max_tokens=3)
    assert text_of(events) == "ab"
    _, events = feed(b("a") + [PAD] + b("b"), max_tokens=3, skip_special_tokens=False)
    assert text_of(events) == "a<pad>b"


def test_engine_outputs_usage_logprobs_and_deltas():
    eng = make_engine()
    eng.add_request("q", b("prompt text"), SamplingParams(max_tokens=5, logprobs=2, ignore_eos=True),
                    prompt="prompt text")
    (out,) = run_all(eng).values()
    c = out.outputs[0]
    assert out.prompt == "prompt text" and out.prompt_token_ids == b("prompt text")
    assert out.usage.prompt_tokens == 11 and out.usage.completion_tokens == 5 and out.usage.total_tokens == 16
    assert c.finish_reason == "length" and len(c.token_ids) == 5 and c.text == TOK.decode(c.token_ids, True)
    assert len(c.logprobs) == 5 and all(len(lp) == 3 and tok in lp for lp, tok in zip(c.logprobs, c.token_ids))
    t = out.metrics
    assert t.arrival < t.first_scheduled < t.first_token <= t.last_token < t.finished


def test_the_one_stop_matcher_fed_a_stream():
    """StopMatcher.feed (the server's use when it matches on the answer alone): what could begin
    a stop string is held back, nothing else; a match ends the stream; the same tie rule as
    find (the earliest start, then the first listed)."""
    m = StopMatcher(["STOP", "xyz"])
    assert m.feed("ab S", False) == "ab " and m.feed("T", False) == ""  # "ST" may begin "STOP"
    assert m.feed("x", False) == "ST"  # "STx" begins no stop string; "x" may begin "xyz"
    assert m.feed("yz!", False) == "" and m.matched and m.matched_stop == "xyz"
    assert m.feed("more", True) == ""
    assert StopMatcher(["ab", "a"], include=True).feed("xaby", True) == "xab"  # tie at 1: "ab", listed first
    early = StopMatcher(["END"])
    assert early.feed("xEND", False, can_stop=False) == "xEND"  # before min_tokens: no match, END is whole
    assert early.feed("yEN", False) == "y" and early.feed("D", True) == "" and early.matched
    assert StopMatcher([]).feed("text", False) == "text"
