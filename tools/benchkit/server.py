"""A real `llaisys serve` for a tool or a test: started on a free loopback port with this
interpreter and environment, waited for until /health answers 200, stopped with SIGTERM; and
the gauges of its /metrics. Needs `requests` (requirements-test.txt)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from benchkit.net import free_port

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "qwen05"  # the served name the tests and tools use
LOAD_TIMEOUT_S = 300


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log_path: Path
    saw_loading: bool = False  # /health answered 503 "loading" before the model was ready
    args: tuple = field(default_factory=tuple)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def launch(model_dir, tmp_dir: Path, *args: str) -> Server:
    """Start a server and wait until /health answers 200."""
    port = free_port()
    env = dict(os.environ)  # the installed package, or PYTHONPATH/LLAISYS_LIBRARY as the test run has them
    if os.environ.get("LLAISYS_TEST_SERVER_PYTHONPATH"):  # serve other code than the tests import (e.g. an
        env["PYTHONPATH"] = os.environ["LLAISYS_TEST_SERVER_PYTHONPATH"]  # older commit, to see a test fail there)
    log_path = tmp_dir / f"server-{port}.log"
    cmd = [sys.executable, "-m", "llaisys.cli", "serve", f"{model_dir}={MODEL_NAME}", "--port", str(port),
           "--kv-cache-memory", "128MiB", *args]
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    srv = Server(proc, port, log_path, args=args)
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{srv.log()}")
        try:
            r = requests.get(srv.url + "/health", timeout=5)
        except (requests.ConnectionError, requests.Timeout):  # not up yet, or too busy to answer in time
            time.sleep(0.05)
            continue
        if r.status_code == 200:
            return srv
        if r.status_code == 503 and r.json()["error"]["code"] == "loading":
            srv.saw_loading = True
        time.sleep(0.1)
    srv.stop()
    raise RuntimeError(f"server not ready within {LOAD_TIMEOUT_S} s:\n{srv.log()}")


GAUGES = re.compile(r'^llaisys:(num_requests_running|num_requests_waiting|kv_cache_usage_perc)\{[^}]*\} (\S+)$',
                    re.MULTILINE)


def metrics_of(srv, headers=None) -> dict:
    """{'num_requests_running', 'num_requests_waiting', 'kv_cache_usage_perc'} summed over models; srv is
    anything with a .url (a Server, or a SimpleNamespace(url=...) for a server this process did not start)."""
    r = requests.get(srv.url + "/metrics", headers=headers, timeout=30)
    r.raise_for_status()
    out = {"num_requests_running": 0.0, "num_requests_waiting": 0.0, "kv_cache_usage_perc": 0.0}
    for name, value in GAUGES.findall(r.text):
        out[name] += float(value)
    return out


def sse_events(resp: requests.Response) -> list:
    """[(arrival time, parsed JSON or "[DONE]")] of an SSE response, read as the bytes arrive."""
    events = []
    buf = b""
    for piece in resp.iter_content(chunk_size=None):
        now = time.monotonic()
        buf += piece
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            for line in block.split(b"\n"):
                if line.startswith(b"data: "):
                    payload = line[6:].decode("utf-8")
                    events.append((now, payload if payload == "[DONE]" else json.loads(payload)))
    assert buf.strip() == b"", f"trailing bytes after the last event: {buf!r}"
    return events
