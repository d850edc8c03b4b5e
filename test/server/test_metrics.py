"""ServerMetrics over a real AsyncEngine driving an LLMEngine with the fake runner
(test/engine/fake_runner.py): /metrics parses as Prometheus text, every llaisys: series is
there, and the values follow the run (tokens, finish reasons, prefix-cache hits, gauges
mid-flight and back to zero, latency histograms from the engine's own timestamps)."""

import importlib.util
import pathlib
import sys
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llaisys.engine import AsyncEngine, PoolingParams, SamplingParams
from llaisys.server.state.metrics import ServerMetrics


def _fake_runner_module():
    """test/engine/fake_runner.py (test directories are not packages)."""
    if "fake_runner" in sys.modules:
        return sys.modules["fake_runner"]
    path = pathlib.Path(__file__).resolve().parents[1] / "engine" / "fake_runner.py"
    spec = importlib.util.spec_from_file_location("fake_runner", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fake_runner"] = mod
    spec.loader.exec_module(mod)
    return mod


fr = _fake_runner_module()


class SteppedRunner(fr.FakeRunner):
    """A fake runner that computes a step only when the test allows one (or when opened)."""

    def __init__(self):
        super().__init__()
        self.allowed = threading.Semaphore(0)
        self.open = False

    def execute(self, batch):
        if not self.open:
            assert self.allowed.acquire(timeout=10), "test never allowed the step"
        return super().execute(batch)


def samples(metrics: ServerMetrics) -> dict:
    """(sample name, frozenset of labels) -> value, from the rendered text."""
    body, ctype = metrics.render()
    assert ctype.startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def value(s: dict, name: str, **labels) -> float:
    return s[name, frozenset(labels.items())]


@pytest.fixture
def engines():
    made = []

    def make(runner=None, **config):
        eng = AsyncEngine(fr.make_engine(runner, **config))
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.shutdown()


def test_series_follow_an_engine_run(engines):
    eng = engines(block_size=4)
    metrics = ServerMetrics(lambda: {"m": eng})
    s0 = samples(metrics)
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prompt_tokens_total",
                 "generation_tokens_total", "num_preemptions_total", "prefix_cache_queries_total",
                 "prefix_cache_hits_total", "engine_alive"):
        assert value(s0, "llaisys:" + name, model_name="m") == (1.0 if name == "engine_alive" else 0.0)

    prompt = list(range(1, 11))  # 10 tokens: two full blocks of 4
    finals = []
    for i, max_tokens in enumerate([5, 3, 1]):  # same prompt: the later ones hit the prefix cache
        stream = eng.add_request(f"r{i}", prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        finals.append(list(stream)[-1])
    aborted = eng.add_request("a", [9, 8, 7], SamplingParams(max_tokens=200, ignore_eos=True))
    aborted.abort()
    finals.append(list(aborted)[-1])

    itls = [[0.5, 0.25, 0.25, 1.0], [0.75, 0.125], [], []]
    for out, itl, e2e in zip(finals, itls, [2.0, 3.0, 4.0, 0.5]):
        metrics.on_request_done("m", out, 200, None, e2e, itl)
    metrics.on_request_done("m", None, 400, None, 0.01, [])
    metrics.on_request_done("no-such-model", None, 404, None, 0.01, [])
    metrics.on_request_done("m", None, 429, None, 0.01, [])

    s = samples(metrics)
    gen = sum(len(o.outputs[0].token_ids) for o in finals)
    assert [len(o.outputs[0].token_ids) for o in finals[:3]] == [5, 3, 1]
    assert value(s, "llaisys:generation_tokens_total", model_name="m") == gen
    admitted = [o for o in finals if o.metrics.first_scheduled is not None]
    assert value(s, "llaisys:prompt_tokens_total", model_name="m") == sum(len(o.prompt_token_ids) for o in admitted)
    assert [o.usage.cached_tokens for o in finals[:3]] == [0, 8, 8]
    assert value(s, "llaisys:prefix_cache_hits_total", model_name="m") == 16
    assert value(s, "llaisys:prefix_cache_queries_total", model_name="m") >= 30
    assert value(s, "llaisys:num_requests_running", model_name="m") == 0
    assert value(s, "llaisys:num_requests_waiting", model_name="m") == 0
    assert value(s, "llaisys:kv_cache_usage_perc", model_name="m") == 0

    assert value(s, "llaisys:request_success_total", model_name="m", finished_reason="length") == 3
    assert value(s, "llaisys:request_success_total", model_name="m", finished_reason="abort") == 1
    assert value(s, "llaisys:http_errors_total", model_name="m", status="400") == 1
    assert value(s, "llaisys:http_errors_total", model_name="m", status="429") == 1
    assert value(s, "llaisys:http_errors_total", model_name="unknown", status="404") == 1
    assert not any(dict(labels).get("model_name") == "no-such-model" for _, labels in s)

    # histograms: TTFT and TPOT from the engine's timestamps, e2e and ITL as reported
    with_token = [o for o in finals if o.metrics.first_token is not None]
    ttfts = [o.metrics.first_token - o.metrics.arrival for o in with_token]
    assert value(s, "llaisys:time_to_first_token_seconds_count", model_name="m") == len(ttfts) >= 3
    assert value(s, "llaisys:time_to_first_token_seconds_sum", model_name="m") == pytest.approx(sum(ttfts))
    tpots = [(o.metrics.last_token - o.metrics.first_token) / (len(o.outputs[0].token_ids) - 1)
             for o in with_token if len(o.outputs[0].token_ids) > 1]
    assert value(s, "llaisys:time_per_output_token_seconds_count", model_name="m") == len(tpots)
    assert value(s, "llaisys:time_per_output_token_seconds_sum", model_name="m") == pytest.approx(sum(tpots))
    assert value(s, "llaisys:e2e_request_latency_seconds_count", model_name="m") == 4
    assert value(s, "llaisys:e2e_request_latency_seconds_sum", model_name="m") == pytest.approx(9.5)
    assert value(s, "llaisys:inter_token_latency_seconds_count", model_name="m") == 6
    assert value(s, "llaisys:inter_token_latency_seconds_sum", model_name="m") == pytest.approx(2.875)
    assert value(s, "llaisys:e2e_request_latency_seconds_bucket", model_name="m", le="2.0") == 2  # 0.5 and 2.0
    assert value(s, "llaisys:e2e_request_latency_seconds_bucket", model_name="m", le="+Inf") == 4


def test_gauges_while_requests_are_in_flight(engines):
    runner = SteppedRunner()
    eng = engines(runner, max_num_seqs=1, block_size=4)
    metrics = ServerMetrics(lambda: {"m": eng})
    streams = [eng.add_request(f"r{i}", [1, 2, 3, 4, 5], SamplingParams(max_tokens=50, ignore_eos=True))
               for i in range(2)]
    runner.allowed.release()  # one step: r0 is admitted and prefilled, r1 waits (max_num_seqs=1)
    streams[0].get(timeout=10)
    s = samples(metrics)
    assert value(s, "llaisys:num_requests_running", model_name="m") == 1
    assert value(s, "llaisys:num_requests_waiting", model_name="m") == 1
    kv = eng.engine.scheduler.kv
    assert value(s, "llaisys:kv_cache_usage_perc", model_name="m") == pytest.approx(2 / kv.num_blocks)
    assert value(s, "llaisys:prompt_tokens_total", model_name="m") == 5
    for st in streams:
        st.abort()
    runner.open = True
    runner.allowed.release()
    for st in streams:
        assert list(st)[-1].outputs[0].finish_reason == "abort"
    s = samples(metrics)
    assert value(s, "llaisys:num_requests_running", model_name="m") == 0
    assert value(s, "llaisys:num_requests_waiting", model_name="m") == 0
    assert value(s, "llaisys:kv_cache_usage_perc", model_name="m") == 0


def test_several_models_and_a_dead_engine(engines):
    a, b = engines(), engines()
    metrics = ServerMetrics(lambda: {"a": a, "b": b})
    out = list(b.add_request("x", [1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True)))[-1]
    metrics.on_request_done("b", out, 200, 0.25, 1.0, [0.5])
    b.shutdown()
    s = samples(metrics)
    assert value(s, "llaisys:generation_tokens_total", model_name="a") == 0
    assert value(s, "llaisys:generation_tokens_total", model_name="b") == 2
    assert value(s, "llaisys:time_to_first_token_seconds_sum", model_name="b") == 0.25  # the server's figure
    assert value(s, "llaisys:engine_alive", model_name="a") == 1
    assert value(s, "llaisys:engine_alive", model_name="b") == 0
    assert ("llaisys:time_to_first_token_seconds_count", frozenset({("model_name", "a")})) not in s


def test_pooling_requests_are_counted(engines):
    """Embedding (pooling) requests show as their own finished counter and pooled tokens; the
    scheduler runs them, so they count among the prompt tokens too."""
    eng = engines(block_size=4)
    metrics = ServerMetrics(lambda: {"m": eng})
    assert value(samples(metrics), "llaisys:pooled_tokens_total", model_name="m") == 0
    outs = [list(eng.encode(f"e{i}", list(range(1, n + 1)), PoolingParams()))[-1] for i, n in enumerate([5, 9])]
    assert [o.finish_reason for o in outs] == ["stop", "stop"]
    s = samples(metrics)
    assert value(s, "llaisys:pooling_requests_finished_total", model_name="m", finished_reason="stop") == 2
    assert value(s, "llaisys:pooled_tokens_total", model_name="m") == 14
    assert value(s, "llaisys:prompt_tokens_total", model_name="m") == 14


class MeasuredRunner(fr.FakeRunner):
    """A fake runner that reports memory as the core's runner does (CoreModelRunner.memory_stats)."""

    def __init__(self):
        super().__init__()
        from llaisys.models.model import ModelStatsInfo

        self.memory = ModelStatsInfo(weight_bytes=1000, workspace_bytes=200, workspace_tokens=8, scratch_bytes=0)

    def memory_stats(self):
        return self.memory


def test_the_model_memory_gauges_follow_the_runner(engines):
    """Weights, workspace and the device's kernel scratch (cuBLAS workspaces included) show as
    gauges from the first scrape on and follow the runner's figures after a step; a runner
    without memory_stats (the plain fake) shows none."""
    from dataclasses import replace

    runner = MeasuredRunner()
    eng, plain = engines(runner), engines()
    metrics = ServerMetrics(lambda: {"m": eng, "p": plain})
    s = samples(metrics)
    assert value(s, "llaisys:model_weight_bytes", model_name="m") == 1000
    assert value(s, "llaisys:model_workspace_bytes", model_name="m") == 200
    assert value(s, "llaisys:device_scratch_bytes", model_name="m") == 0
    assert value(s, "llaisys:cuda_graphs", model_name="m") == 0
    assert value(s, "llaisys:model_padded_bytes", model_name="m") == 0
    assert ("llaisys:model_weight_bytes", frozenset({("model_name", "p")})) not in s
    runner.memory = replace(runner.memory, workspace_bytes=300, scratch_bytes=64 << 20,  # a larger step grew them
                            graphs=7, graph_capture_s=0.25, padded_bytes=5 << 20)  # and graphs were captured
    list(eng.add_request("x", [1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True)))
    s = samples(metrics)
    assert value(s, "llaisys:model_workspace_bytes", model_name="m") == 300
    assert value(s, "llaisys:device_scratch_bytes", model_name="m") == 64 << 20
    assert value(s, "llaisys:cuda_graphs", model_name="m") == 7
    assert value(s, "llaisys:cuda_graph_capture_seconds", model_name="m") == 0.25
    assert value(s, "llaisys:model_padded_bytes", model_name="m") == 5 << 20
