"""The README's screenshot of the chat page: a complete answer from the default model.

    python tools/doc_screenshot.py [--out doc/img/desktop-answer.png] [--max-tokens 400]
        [--prompt "Write a Python function that adds two numbers."] [--threads N]

Starts `llaisys serve` as `make serve` does (the default model, this interpreter) on a free
127.0.0.1 port, opens the page in Debian's headless Chromium (/usr/bin/chromium, driven by
Playwright; no browser is downloaded) at 1280x800, sends the prompt greedily with --max-tokens
as the page's own setting, waits for the answer to end, and refuses to save a screenshot of an
answer that hit max tokens (the old screenshot showed one cut at 24 tokens). Prints the machine
(CPU model and flags) the answer ran on, for the caption in doc/web.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import host  # noqa: E402
from benchkit.net import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def _wait_health(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the server did not answer /health within {timeout_s:g} s")


def shoot(args) -> dict:
    from playwright.sync_api import sync_playwright

    port = free_port()
    log = open(Path(tempfile.mkdtemp(prefix="doc-shot-")) / "server.log", "wb")
    cmd = [sys.executable, "-m", "llaisys.cli", "serve", "--port", str(port)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_health(url, proc, 900)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            page.wait_for_function("document.getElementById('server-status').textContent.startsWith('Connected')")
            page.click("#toggle-settings")
            for sel, value in (("#set-max-tokens", args.max_tokens), ("#set-temperature", 0)):
                page.fill(sel, str(value))
                page.press(sel, "Tab")
            page.click("#close-settings")
            page.fill("#input", args.prompt)
            page.press("#input", "Enter")
            page.wait_for_selector("body[data-state=generating]", state="attached")
            page.wait_for_selector("body[data-state=idle]", state="attached", timeout=900_000)
            stats = page.inner_text("#messages .msg.assistant .msg-stats")
            if "max tokens" in stats:
                raise RuntimeError(f"the answer hit max tokens ({stats!r}): raise --max-tokens")
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"stats": stats, "machine": host.machine()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(REPO / "doc" / "img" / "desktop-answer.png"))
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--prompt", default="Write a Python function that adds two numbers.")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    res = shoot(args)
    print(f"saved {args.out}: {res['stats']}")
    print(host.describe(res["machine"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
