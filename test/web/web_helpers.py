"""Helpers for the browser tests: finding chromium, pages, a static server for web/, the
real llaisys server in a subprocess, and screenshots. Fixtures are in conftest.py."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from benchkit.net import free_port

REPO = Path(__file__).resolve().parents[2]
WEB_DIR = REPO / "web"
DOC_IMG = REPO / "doc" / "img"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SERVER_START_S = 600  # loading the model on a busy 2-core machine can take minutes
SMALL_SERVER = ("--kv-cache-memory", "128MiB", "--max-model-len", "1024")  # the tests' chats are short


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str):
    if _in_ci():
        pytest.fail(f"{reason} (CI is set, so the browser tests must run)")
    pytest.skip(reason)


def chromium_path() -> str:
    """Path of the chromium binary: $LLAISYS_CHROMIUM, else `chromium` on PATH."""
    path = os.environ.get("LLAISYS_CHROMIUM") or shutil.which("chromium")
    if not path:
        unavailable("chromium is not installed (apt-get install -y chromium)")
    return path


class PageErrors(list):
    """Uncaught JavaScript exceptions raised in a test's pages."""


def make_pages(browser, page_errors, contexts):

    def make(viewport=DESKTOP):
        # bypass_csp: tests evaluate scripts; it also takes away the page's CSP safety net,
        # so the injection tests check the renderer alone.
        ctx = browser.new_context(viewport=viewport, bypass_csp=True)
        ctx.grant_permissions(["clipboard-read", "clipboard-write"])
        contexts.append(ctx)
        page = ctx.new_page()
        page.on("pageerror", lambda e: page_errors.append(f"pageerror: {e}"))
        page.set_default_timeout(30_000)
        return page

    return make


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class StaticServer:
    """web/ over HTTP on a free loopback port (module scripts need http, not file://)."""

    def __init__(self):
        handler = functools.partial(_QuietHandler, directory=str(WEB_DIR))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.httpd.server_close()


class LiveServer:
    """`python -m llaisys.cli serve MODEL` in a subprocess; its log goes to `log_path`.

    Ready when /health answers 200 (the model is loaded), or with `loaded=False` as soon as
    the page itself is served (the model may still be loading)."""

    def __init__(self, model_dir: str, log_path: Path, extra_args=(), loaded=True):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log_path = log_path
        env = dict(os.environ)  # PYTHONPATH and LLAISYS_LIBRARY pass through
        cmd = [sys.executable, "-m", "llaisys.cli", "serve", str(model_dir),
               "--host", "127.0.0.1", "--port", str(self.port), *extra_args]
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready("health" if loaded else "")

    def _wait_ready(self, path):
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"server not ready after {SERVER_START_S} s:\n{self.log_tail()}")

    def log_tail(self, n=4000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def running_requests(self) -> float:
        """llaisys:num_requests_running summed over models, from GET /metrics."""
        with urllib.request.urlopen(self.url + "metrics", timeout=10) as r:
            text = r.read().decode()
        values = re.findall(r"^llaisys:num_requests_running(?:\{[^}]*\})?\s+(\S+)", text, re.M)
        assert values, f"no llaisys:num_requests_running in /metrics:\n{text[:2000]}"
        return sum(float(v) for v in values)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def vendor_files(kind: str) -> list[str]:
    """The vendored files index.html loads, in its order: kind "script" or "style"."""
    html = (WEB_DIR / "index.html").read_text()
    if kind == "script":
        return re.findall(r'<script src="(vendor/[^"]+)"', html)
    return re.findall(r'<link rel="stylesheet" href="(vendor/[^"]+)" media="not all', html)  # the light theme


def load_renderer(page, base_url: str):
    """`page` as a blank page of `base_url`'s origin holding what the chat page loads for its
    answers (stylesheets, the vendored libraries) and web/render.js as window.__render: the
    renderer alone, without the app's own requests."""
    page.goto(base_url + "render.js")
    page.evaluate("document.open(); document.write('<!doctype html><head></head><body></body>'); document.close()")
    for href in (*vendor_files("style"), "style.css"):
        page.add_style_tag(url=base_url + href)
    for src in vendor_files("script"):
        page.add_script_tag(url=base_url + src)
    page.evaluate("async () => { window.__render = await import('./render.js'); }")
    return page


def artifacts_dir() -> Path:
    d = Path(os.environ.get("LLAISYS_ARTIFACTS_DIR", REPO / "artifacts" / "web"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def screenshot(page, name: str) -> Path:
    """Saves a PNG of `page` as `name`.png in the artifacts dir (and doc/img/ on request)."""
    path = artifacts_dir() / f"{name}.png"
    page.screenshot(path=str(path))
    if os.environ.get("LLAISYS_DOC_SCREENSHOTS") == "1":
        DOC_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOC_IMG / f"{name}.png")
    return path
