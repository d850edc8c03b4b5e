"""`llaisys serve --prompt-cache-dir`: after SIGINT and a restart on the same directory, the same
prompt comes back from disk (usage.prompt_tokens_details.cached_tokens) with the same greedy
answer, and /metrics counts the disk hits. Both servers run --batch-invariant: from the cache
only the prompt's last rows are computed, and where a format of the file has a finite crossover
the whole prompt's prefill would take the float path, those few rows the int8 one."""

from __future__ import annotations

import re
import signal

import pytest
import requests

from server_helpers import MODEL_NAME, launch, post

pytestmark = pytest.mark.slow

PROMPT = "# utilities\n" + "\n".join(f"def add_{i}(x):\n    return x + {i}\n" for i in range(30)) + "\ndef add_30(x):"
BODY = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 12, "temperature": 0}


def disk_counter(srv, name: str) -> float:
    text = requests.get(srv.url + "/metrics", timeout=30).text
    m = re.search(rf'^llaisys:prompt_cache_disk_{name}(?:_total)?\{{model_name="{MODEL_NAME}"\}} (\S+)$', text,
                  re.MULTILINE)
    assert m, f"no llaisys:prompt_cache_disk_{name} in /metrics"
    return float(m.group(1))


def test_sigint_then_restart_serves_the_prompt_from_disk(qwen05_served, tmp_path):
    cache = tmp_path / "prompt-cache"
    args = ("--prompt-cache-dir", str(cache), "--threads", "2", "--batch-invariant")
    srv = launch(qwen05_served, tmp_path, *args)
    try:
        r = post(srv, "/v1/completions", BODY)
        assert r.status_code == 200, r.text
        first = r.json()
        assert first["usage"]["prompt_tokens"] >= 200
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert disk_counter(srv, "hits") == 0
    finally:
        srv.proc.send_signal(signal.SIGINT)
        assert srv.proc.wait(120) == 0, srv.log()[-4000:]
    assert list(cache.glob("*.kvb")), "shutdown wrote no block"

    srv = launch(qwen05_served, tmp_path, *args)
    try:
        r = post(srv, "/v1/completions", BODY)
        assert r.status_code == 200, r.text
        again = r.json()
        usage = again["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] >= 0.9 * usage["prompt_tokens"], usage
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
        assert disk_counter(srv, "hits") >= usage["prompt_tokens_details"]["cached_tokens"] // 16
        assert disk_counter(srv, "bytes_read") > 0 and disk_counter(srv, "refused") == 0
        assert disk_counter(srv, "files") >= usage["prompt_tokens_details"]["cached_tokens"] // 16
        assert disk_counter(srv, "bytes") > 0
    finally:
        srv.stop()


def test_bad_prompt_cache_options_exit_2(qwen05_dir, tmp_path):
    import subprocess
    import sys

    for extra, why in ((["--kv-layout", "slot"], "kv_layout='block'"),
                       (["--prompt-cache-max-bytes", "huge"], "prompt_cache_max_bytes")):
        p = subprocess.run([sys.executable, "-m", "llaisys.cli", "serve", str(qwen05_dir), "--port", "0",
                            "--prompt-cache-dir", str(tmp_path), *extra], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and why in p.stderr, p.stderr
