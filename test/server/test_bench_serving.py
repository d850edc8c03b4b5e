"""tools/bench_serving.py against a real llaisys server (the 0.5B model on a loopback port):
streaming and non-streaming, concurrency and Poisson arrivals, completions and chat, the
figures it writes, and errors counted by status. The tool itself is stdlib-only."""

import io
import json
import os
import pathlib
import subprocess
import sys

import pytest
from benchkit.openai_http import RequestResult, read_stream
from benchkit.stats import percentile

from server_helpers import MODEL_NAME

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "bench_serving.py"


def test_percentile_matches_linear_interpolation():
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(xs, 50) == 3.0
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 5.0
    assert percentile(xs, 95) == pytest.approx(4.8)
    assert percentile(list(range(101)), 99) == pytest.approx(99.0)
    assert percentile([], 50) is None


def test_tool_imports_nothing_but_the_standard_library():
    code = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('b', {str(TOOL)!r}); "
            "m = sys.modules['b'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('llaisys', 'numpy', 'requests', 'httpx')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_stream_without_usage_counts_max_tokens_only_when_cut_for_length():
    """llama-cpp-python's server streams no usage: a "length" finish means exactly max_tokens
    tokens; any other finish falls back to the content chunks."""

    def stream(finish):
        events = [{"choices": [{"text": t, "finish_reason": None}]} for t in (" a", "", " b")]
        events.append({"choices": [{"text": "", "finish_reason": finish}]})
        raw = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        res = RequestResult(start=0.0)
        read_stream(io.BytesIO(raw.encode()), res, max_tokens=5)
        return res.output_tokens

    assert stream("length") == 5
    assert stream("stop") == 2


def test_bad_arguments_are_refused():
    for argv in (["--concurrency", "0"], ["--num-requests", "1", "2"], ["--request-rate", "-1"]):
        r = subprocess.run([sys.executable, str(TOOL), *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "error" in r.stderr, argv


@pytest.fixture(scope="module")
def server(start_server):
    """Base URL of a real `llaisys serve` (conftest.py's launcher) on a free loopback port."""
    return start_server("--max-num-seqs", "4").url


def bench(tmp_path, base, *args):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(TOOL), "--base-url", base, "--output", str(out), "--warmup", "0", *args],
                       capture_output=True, text=True, timeout=600,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return r, (json.loads(out.read_text()) if out.exists() else None)


def ordered(stats):
    return stats["p50"] <= stats["p95"] <= stats["p99"]


@pytest.mark.slow
def test_streaming_at_concurrency_two(server, tmp_path):
    r, rep = bench(tmp_path, server, "--concurrency", "2", "--num-requests", "4", "--output-len", "8",
                   "--input-len", "12")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "requests ok/err" in r.stdout and "4/0" in r.stdout and "TTFT p99 ms" in r.stdout
    (lv,) = rep["levels"]
    assert (lv["concurrency"], lv["requests"], lv["completed"], lv["errors"]) == (2, 4, 4, 0)
    assert lv["output_tokens"] == 4 * 8  # ignore_eos: exactly max_tokens each, from the usage chunk
    assert lv["prompt_tokens"] >= 4 * 12
    assert lv["ttft_ms"]["n"] == 4 and lv["tpot_ms"]["n"] == 4 and 0 < lv["itl_ms"]["n"] <= 4 * 7
    assert all(ordered(lv[k]) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"))
    assert lv["ttft_ms"]["p50"] < lv["e2e_ms"]["p50"]
    assert lv["requests_per_s"] > 0 and lv["output_tokens_per_s"] > 0
    assert rep["model"] == MODEL_NAME  # picked from GET /v1/models


@pytest.mark.slow
def test_chat_without_streaming_at_a_request_rate(server, tmp_path):
    r, rep = bench(tmp_path, server, "--endpoint", "chat", "--no-stream", "--request-rate", "20",
                   "--concurrency", "2", "--num-requests", "2", "--output-len", "4", "--input-len", "6")
    assert r.returncode == 0, r.stdout + r.stderr
    (lv,) = rep["levels"]
    assert (lv["completed"], lv["errors"], lv["output_tokens"], lv["request_rate"]) == (2, 0, 8, 20.0)
    assert lv["itl_ms"]["n"] == 0 and lv["ttft_ms"]["n"] == 2


@pytest.mark.slow
def test_errors_are_counted_by_status(server, tmp_path):
    r, rep = bench(tmp_path, server, "--model", "no-such-model", "--concurrency", "2", "--num-requests", "3",
                   "--output-len", "2", "--input-len", "2")
    assert r.returncode == 1
    (lv,) = rep["levels"]
    assert (lv["completed"], lv["errors"]) == (0, 3)
    assert lv["errors_by_status"]["404"]["count"] == 3
    assert "no-such-model" in lv["errors_by_status"]["404"]["example"]
    assert "HTTP 404" in r.stderr
