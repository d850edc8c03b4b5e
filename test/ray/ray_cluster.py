"""The Ray tests' client side (conftest.py starts the cluster): the API key and model name the
application serves, raw HTTP against it, and the wait for /health. A module of its own, so that a
test imports it by a name no other test directory uses (`from conftest import` found another
directory's conftest when several were collected)."""

import json
import time
import urllib.error
import urllib.request

API_KEY = "ray-test-key"
MODEL = "tiny"
READY_TIMEOUT_S = 300  # Ray start + two replicas loading on a busy 2-core machine


class Cluster:
    """The running application: its base URL, and helpers for raw HTTP."""

    def __init__(self, port: int):
        self.port = port
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, key: str = API_KEY, timeout: float = 30) -> tuple:
        req = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {key}"} if key else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def post(self, path: str, body: dict, key: str = API_KEY, timeout: float = 120) -> tuple:
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metrics(self) -> dict:
        """Prometheus samples: 'name{labels}' -> value."""
        status, body = self.get("/metrics")
        assert status == 200, body
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def routed(self) -> dict:
        """replica label -> requests routed to it so far."""
        prefix = 'llaisys:ray_requests_routed_total{replica="'
        return {k[len(prefix):-2]: v for k, v in self.metrics().items() if k.startswith(prefix)}


def wait_healthy(c, deadline: float) -> None:
    """Until /health answers 200: the ingress (a new one after a redeploy) has reached its replicas."""
    while True:
        try:
            status, body = c.get("/health", key=None, timeout=5)
        except OSError:
            status, body = 0, b""
        if status == 200:
            return
        assert b'"failed"' not in body, body[:2000]  # the ingress could not load: say why at once
        assert time.monotonic() < deadline, f"the Ray application did not become ready: {status} {body[:300]}"
        time.sleep(1.0)
