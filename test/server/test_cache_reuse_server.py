"""`llaisys serve --cache-reuse N` on the tiny checkpoint: an editor's ring that moves (the oldest
chunk dropped, a new one appended) is reused, and /infill (tokens_cached, timings.cache_n) and
/v1/completions (usage.prompt_tokens_details.cached_tokens) and /metrics (llaisys:cache_reuse_*)
report the reused tokens; a bad N fails at start-up with exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from server_helpers import post

CHUNKS = [{"filename": f"pkg/mod_{k}.py",
           "text": "".join(f"def helper_{k}_{i}(value):\n    return value * {i + k} + {3 * i}\n\n" for i in range(4))}
          for k in range(4)]


def infill(srv, extra: list) -> dict:
    r = post(srv, "/infill", {"input_prefix": "import os\n\ndef main():\n", "input_suffix": "\n\nmain()\n",
                              "input_extra": extra, "prompt": "    ", "n_predict": 2, "temperature": 0,
                              "cache_prompt": True})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def reuse_server(start_tiny_server):
    return start_tiny_server("--cache-reuse", "16", "--kv-dtype", "f32", "--max-num-seqs", "2")


def test_infill_reports_a_moved_ring_as_cached(reuse_server, tiny_chat_model):
    from llaisys.models.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(tiny_chat_model)
    first = infill(reuse_server, CHUNKS[:3])
    moved = infill(reuse_server, CHUNKS[1:4])
    kept = sum(len(tok.encode(c["text"])) for c in CHUNKS[1:3])  # chunks 1 and 2, now 1 chunk earlier
    assert first["tokens_cached"] < kept
    # their texts (a token either side may tokenize otherwise inside the prompt) and file names
    assert kept - 4 <= moved["tokens_cached"] < moved["tokens_evaluated"]
    assert moved["timings"]["cache_n"] == moved["tokens_cached"]
    assert moved["timings"]["prompt_n"] == moved["tokens_evaluated"] - moved["tokens_cached"]


def test_completions_report_the_reused_tokens(reuse_server):
    rng = np.random.default_rng(0)
    head = [int(t) for t in rng.integers(1000, 30000, 5)]
    chunks = [[int(t) for t in rng.integers(1000, 30000, 40)] for _ in range(4)]
    tail = [int(t) for t in rng.integers(1000, 30000, 10)]
    body = {"max_tokens": 2, "temperature": 0}
    r = post(reuse_server, "/v1/completions", dict(body, prompt=head + chunks[0] + chunks[1] + chunks[2] + tail))
    assert r.status_code == 200, r.text
    r = post(reuse_server, "/v1/completions", dict(body, prompt=head + chunks[1] + chunks[2] + chunks[3] + tail))
    assert r.status_code == 200, r.text
    # the 5-token head in place and chunks 1-2 (80 tokens) moved back 40
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 85


def reuse_counters(srv) -> dict:
    """The llaisys:cache_reuse_*_total counters of /metrics, by series (tokens, copies, fallbacks)."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    r = requests.get(srv.url + "/metrics", timeout=30)
    assert r.status_code == 200, r.text
    return {s.name[len("llaisys:cache_reuse_"):-len("_total")]: s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples
            if s.name.startswith("llaisys:cache_reuse_") and s.name.endswith("_total")}


def test_metrics_count_the_reused_tokens(reuse_server):
    before = reuse_counters(reuse_server)
    assert set(before) == {"tokens", "copies", "fallbacks"}
    rng = np.random.default_rng(1)  # tokens no other test of the module sends
    head = [int(t) for t in rng.integers(1000, 30000, 3)]
    chunks = [[int(t) for t in rng.integers(1000, 30000, 24)] for _ in range(4)]
    body = {"max_tokens": 1, "temperature": 0}
    # 76 tokens: chunk 1 (positions 27-50) lies within the 4 full blocks a source keeps
    r = post(reuse_server, "/v1/completions", dict(body, prompt=head + chunks[0] + chunks[1] + chunks[2] + [5]))
    assert r.status_code == 200, r.text
    assert reuse_counters(reuse_server) == before  # nothing to take from
    r = post(reuse_server, "/v1/completions", dict(body, prompt=head + chunks[1] + chunks[3] + [5]))
    assert r.status_code == 200, r.text
    cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == 3 + 24  # the head in place and chunk 1 moved back 24, all by --cache-reuse
    after = reuse_counters(reuse_server)
    assert after == dict(before, tokens=before["tokens"] + cached, copies=before["copies"] + 1)


@pytest.mark.parametrize("args,fragment", [(["--cache-reuse", "-1"], ">= 0"),
                                           (["--cache-reuse", "16", "--kv-layout", "slot"], "SLOT"),
                                           (["--cache-reuse", "16", "--no-prefix-caching"], "prefix cache")])
def test_a_bad_value_fails_before_the_load(tmp_path, args, fragment):
    env = dict(os.environ, LLAISYS_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "llaisys.cli", "serve", str(tmp_path), "--port", "0", *args],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "cache_reuse" in out.stderr and fragment in out.stderr, out.stderr


def test_bench_infill_reports_the_keystrokes_whose_ring_moved(reuse_server, tmp_path):
    import json
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import bench_infill

    out = tmp_path / "infill.json"
    assert bench_infill.main(["--base-url", reuse_server.url, "--requests", "3", "--ring-tokens", "300", "--cold", "1",
                              "--n-prefix", "6", "--n-suffix", "3", "--n-predict", "1", "--ring-update-every", "1",
                              "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    keys = res["keystrokes"]
    assert [k["ring_moved"] for k in keys][:2] == [False, True]
    assert res["ttft_p50_moved_s"] > 0 and res["moved_p50_over_cold"] > 0
