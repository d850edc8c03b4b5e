"""The soak test's client side (tools/soak.py): the trace each client draws its requests from, and
the Runner that sends one request and judges how it ended (the kinds and the errors are described
in soak.py's docstring). The hostile requests are tools/soak_hostile.py's."""

from __future__ import annotations

import http.client
import json
import random
import socket
import time
from dataclasses import dataclass
from typing import Optional

from benchkit.openai_http import WORDS, Client, content, error_message, sse_events

# kind -> weight (relative); the intentional aborts are a few percent of the trace
TRACE = {
    "chat_stream": 30, "chat": 20, "completion_stream": 15, "completion": 15, "chat_n2": 4,
    "drop_stream": 7, "cancel_stream": 6, "drop_waiting": 3,
}
SYSTEM = ("You are a careful senior Python engineer. Answer briefly, with code when it helps, "
          "and never invent APIs that do not exist.")
QUESTIONS = ("Write a function that reverses a linked list.", "What does the GIL protect?",
             "Explain list comprehensions with one example.", "How do I read a CSV file with the standard library?",
             "Write a binary search in Python.", "What is the difference between a tuple and a list?",
             "Sort a dict by value.", "How do I time a function?", "Explain decorators in two sentences.",
             "Write a generator that yields Fibonacci numbers.")
CODE_PROMPTS = ("def quicksort(xs):\n", "import numpy as np\n\ndef softmax(x):\n", "class Stack:\n    def __init__(self):\n",
                "# parse a date string in ISO format\nfrom datetime import datetime\n", "def is_prime(n: int) -> bool:\n")


@dataclass
class Result:
    kind: str
    client: int
    start: float  # perf_counter() at send, relative to the trace's start
    ok: bool = False
    error_kind: str = ""  # "" when ok
    error: str = ""
    status: int = 0
    e2e: Optional[float] = None  # s, send -> end (requests run to completion only)
    ttft: Optional[float] = None  # s, send -> first content chunk (streams)
    output_tokens: int = 0
    finish_reason: Optional[str] = None
    note: str = ""  # e.g. "cancel raced the end"


class Failure(Exception):
    def __init__(self, kind: str, msg: str, status: int = 0):
        super().__init__(msg)
        self.kind, self.status = kind, status


# ---- the trace -----------------------------------------------------------------------------
def make_request(kind: str, rng: random.Random, args, user: str) -> tuple:
    """(path, body) of one request of `kind`."""
    sampled = rng.random() < 0.4
    body = {"model": args.model, "user": user, "max_tokens": rng.randint(1, args.max_tokens),
            "temperature": 0.7 if sampled else 0.0}
    if sampled:
        body["top_p"] = 0.9
        if rng.random() < 0.5:
            body["seed"] = rng.randrange(2**31)
    if kind in ("drop_stream", "cancel_stream", "drop_waiting"):
        body["max_tokens"] = args.max_tokens  # long enough to be cut short
        body["ignore_eos"] = True
    stream = kind.endswith("_stream")
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if kind == "chat_n2":
        body.update(n=2, temperature=0.8, max_tokens=rng.randint(1, max(1, args.max_tokens // 2)))
    if kind.startswith("completion") or (kind in ("drop_stream", "cancel_stream", "drop_waiting")
                                         and rng.random() < 0.5):
        if rng.random() < 0.5:
            body["prompt"] = rng.choice(CODE_PROMPTS)
        else:
            body["prompt"] = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 120)))
        if rng.random() < 0.2:
            body["stop"] = ["\n\n"]
        return "/v1/completions", body
    messages = [{"role": "system", "content": SYSTEM}] if rng.random() < 0.6 else []
    if rng.random() < 0.3:  # a second turn
        messages += [{"role": "user", "content": rng.choice(QUESTIONS)},
                     {"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))}]
    q = rng.choice(QUESTIONS)
    if rng.random() < 0.3:
        q += " Context: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 100)))
    messages.append({"role": "user", "content": q})
    body["messages"] = messages
    return "/v1/chat/completions", body


class Runner:
    def __init__(self, client: Client, args, t0: float):
        self.client, self.args, self.t0 = client, args, t0

    def run(self, kind: str, path: str, body: dict, client_id: int, rng: random.Random,
            expect: int = 200) -> Result:
        """One request; `expect` is the status it must get (a 4xx: refused in the API's error shape)."""
        res = Result(kind=kind, client=client_id, start=time.perf_counter() - self.t0)
        start = time.perf_counter()
        conn = self.client.connect()
        try:
            if kind == "drop_waiting":
                self._drop_waiting(body, rng, res)
            else:
                conn.request("POST", self.client.prefix + path, body=json.dumps(body).encode(),
                             headers=self.client.headers)
                resp = conn.getresponse()
                res.status = resp.status
                if resp.status != expect:
                    raise Failure(f"http_{resp.status}", error_message(resp.read()), resp.status)
                if expect != 200:
                    err = json.loads(resp.read())["error"]
                    if not isinstance(err.get("message"), str) or not err["message"]:
                        raise Failure("bad_error", f"a {expect} without an error message: {err!r:.200}")
                    res.note = f"refused with {expect} as expected"
                elif body.get("stream"):
                    self._stream(kind, resp, body, rng, res, start)
                else:
                    self._whole(resp, body, res, start)
            res.ok = True
        except Failure as e:
            res.error_kind, res.error = e.kind, str(e)[:300]
        except socket.timeout as e:
            res.error_kind, res.error = "client_timeout", f"{type(e).__name__}: {e}"
        except (OSError, http.client.HTTPException) as e:
            res.error_kind, res.error = "connection", f"{type(e).__name__}: {e}"
        except (ValueError, KeyError, TypeError, IndexError) as e:
            res.error_kind, res.error = "bad_response", f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        return res

    def _whole(self, resp, body: dict, res: Result, start: float) -> None:
        out = json.loads(resp.read())
        res.e2e = res.ttft = time.perf_counter() - start
        n = body.get("n", 1)
        if len(out["choices"]) != n:
            raise Failure("bad_response", f"{len(out['choices'])} choices for n={n}")
        for c in out["choices"]:
            if c.get("finish_reason") not in ("stop", "length"):
                raise Failure("bad_finish", f"finish_reason {c.get('finish_reason')!r}")
        res.finish_reason = out["choices"][0]["finish_reason"]
        res.output_tokens = out["usage"]["completion_tokens"]
        if not 0 < res.output_tokens <= n * body["max_tokens"]:
            raise Failure("bad_response", f"{res.output_tokens} completion tokens for max_tokens {body['max_tokens']}")

    def _stream(self, kind: str, resp, body: dict, rng: random.Random, res: Result, start: float) -> None:
        cut_after = rng.randint(1, 8) if kind in ("drop_stream", "cancel_stream") else None
        chunks, cancelled, rid = 0, None, None
        finish = None
        for event in sse_events(resp, Failure):  # a stream without [DONE] raises Failure("no_done")
            rid = rid or event.get("id")
            for c in event.get("choices") or []:
                if content(c):
                    chunks += 1
                    if res.ttft is None:
                        res.ttft = time.perf_counter() - start
                finish = c.get("finish_reason") or finish
            if event.get("usage"):
                res.output_tokens = event["usage"].get("completion_tokens") or 0
            if cut_after is not None and cancelled is None and chunks >= cut_after:
                if kind == "drop_stream":
                    res.note = f"dropped after {chunks} chunks"
                    return  # run() closes the connection: the server sees the client leave
                cancelled = self._cancel(rid, body["user"])
        res.finish_reason = finish
        if kind == "cancel_stream":
            if cancelled is None:
                res.note = "ended before the cut"
            elif cancelled:
                if finish != "abort":
                    raise Failure("bad_finish", f"cancelled stream ended with finish_reason {finish!r}")
                res.note = "cancelled"
            else:
                res.note = "cancel raced the end"
            return
        res.e2e = time.perf_counter() - start
        if finish not in ("stop", "length"):
            raise Failure("bad_finish", f"finish_reason {finish!r}")

    def _cancel(self, rid: Optional[str], user: str) -> bool:
        """POST the cancel route; True if it cancelled, False if the request had just finished."""
        if not rid:
            raise Failure("bad_stream", "no response id in the first event")
        conn = self.client.connect()
        try:
            conn.request("POST", f"{self.client.prefix}/v1/requests/{rid}/cancel",
                         body=json.dumps({"user": user}).encode(), headers=self.client.headers)
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status == 200 and json.loads(raw).get("cancelled") is True:
                return True
            if resp.status == 404 and b"request_not_found" in raw:
                return False
            raise Failure(f"cancel_http_{resp.status}", error_message(raw), resp.status)
        finally:
            conn.close()

    def _drop_waiting(self, body: dict, rng: random.Random, res: Result) -> None:
        """A non-streaming request whose client hangs up before the answer comes."""
        payload = json.dumps(body).encode()
        with socket.create_connection((self.client.host, self.client.port), timeout=self.args.timeout) as s:
            s.sendall(b"POST %s/v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (self.client.prefix.encode(), self.client.host.encode(),
                                                        len(payload), payload))
            time.sleep(rng.uniform(0.2, 1.5))
        res.note = "hung up while waiting"
