"""One admission pass and one request map (issue 41 item 2): AsyncEngine.add_requests checks
every request once, in the caller's thread, queues all or none, and the loop adds them without
checking again; outputs can go to one shared sink instead of a reader thread per prompt, which
is how the server's Generation reads an HTTP request's prompts."""

import queue
import threading

import pytest

from fake_runner import FakeRunner
from llaisys.engine import SamplingParams

from test_async_engine import GatedRunner, started  # noqa: F401  (started: the fixture, shared)


def drain(sink: queue.SimpleQueue, n: int, timeout: float = 10.0) -> dict:
    """index -> the outputs of that request, until n final outputs arrived."""
    got, finals = {}, 0
    while finals < n:
        index, out = sink.get(timeout=timeout)
        got.setdefault(index, []).append(out)
        finals += out.finished
    return got


def test_each_request_is_admitted_once(started, monkeypatch):
    eng = started()
    calls = []
    admit = eng.engine._admit
    monkeypatch.setattr(eng.engine, "_admit", lambda ids, sp: calls.append(1) or admit(ids, sp))
    sink = queue.SimpleQueue()
    eng.add_requests([(f"r{i}", [1, 2, i + 3], SamplingParams(max_tokens=3), None) for i in range(3)], sink=sink)
    outs = drain(sink, 3)
    assert sorted(outs) == [0, 1, 2] and all(o[-1].outputs[0].finish_reason == "length" for o in outs.values())
    assert len(calls) == 3  # the loop's add_checked checks nothing again (it was 6: check_request + add_request)


def test_one_bad_request_queues_none(started):
    eng = started(max_model_len=64)
    sink = queue.SimpleQueue()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        eng.add_requests([("a", [1, 2], None, None), ("b", [1, 10 ** 6], None, None)], sink=sink)
    with pytest.raises(ValueError, match="already in use"):  # the same id twice in one call
        eng.add_requests([("a", [1, 2], None, None), ("a", [3], None, None)], sink=sink)
    assert eng.num_unfinished == 0 and sink.empty()
    s = eng.add_request("a", [1, 2], SamplingParams(max_tokens=2))  # "a" was never taken
    assert list(s)[-1].finished


def test_a_sinked_stream_delivers_in_order_and_cannot_be_read_itself(started):
    eng = started()
    sink = queue.SimpleQueue()
    streams = eng.add_requests([("p", [5, 6, 7], SamplingParams(max_tokens=4, ignore_eos=True), "x"),
                                ("q", [8, 9], SamplingParams(max_tokens=2, ignore_eos=True), "y")], sink=sink)
    with pytest.raises(RuntimeError, match="shared sink"):
        streams[0].get(timeout=1)
    outs = drain(sink, 2)
    for index, want in ((0, 4), (1, 2)):
        deltas = [t for o in outs[index] for t in o.outputs[0].delta_token_ids]
        assert [o.finished for o in outs[index]] == [False] * (len(outs[index]) - 1) + [True]
        assert deltas == outs[index][-1].outputs[0].token_ids and len(deltas) == want
    assert outs[0][-1].request_id == "p" and outs[1][-1].request_id == "q"


def test_an_id_aliasing_a_live_sequence_fails_alone(started):
    """n = 2 runs as sequences "x#0" and "x#1": a request named "x#1" passes the map (which holds
    "x") and is refused by the engine's guard in the loop, with an error output; "x" goes on."""
    runner = GatedRunner()
    eng = started(runner)
    x = eng.add_request("x", [1, 2, 3], SamplingParams(n=2, max_tokens=3, ignore_eos=True, seed=1))
    assert runner.entered.wait(10)
    alias = eng.add_request("x#1", [4, 5], SamplingParams(max_tokens=2))
    runner.gate.set()
    bad = list(alias)[-1]
    assert bad.outputs[0].finish_reason == "error" and "already in use" in bad.error
    good = list(x)[-1]
    assert [c.finish_reason for c in good.outputs] == ["length", "length"]


def test_the_server_generation_starts_no_thread_per_prompt(started):
    from llaisys.server.state.generation import Generation

    eng = started(runner=FakeRunner())
    before = threading.active_count()
    gen = Generation(eng, "cmpl-1", "owner", deadline=float("inf"))
    gen.start([([1, 2, i + 3], None) for i in range(4)], [SamplingParams(max_tokens=2)] * 4)
    assert threading.active_count() == before
    finals = {i: out for i, out in gen.events() if out.finished}
    assert sorted(finals) == [0, 1, 2, 3] and gen.finished and gen.failure() is None
    assert [finals[i].request_id for i in range(4)] == [f"cmpl-1-{i}" for i in range(4)]
