"""A client for OpenAI-compatible servers (llaisys, vLLM, llama.cpp's server, ...) in the standard
library only: one HTTP connection a request, as concurrent users make them; server-sent events read
as they arrive, with the time of each content chunk (bench_serving.py's definitions: TTFT, ITL,
TPOT); the request words of the synthetic prompts."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import urlsplit

# Common short English words: each is one token with its leading space in most BPE vocabularies.
WORDS = ("time year people way day man thing woman life child world school state family student group "
         "country problem hand part place case week company system program question work government number "
         "night point home water room mother area money story fact month lot right study book eye job word "
         "business issue side kind head house service friend father power hour game line end member law car "
         "city community name president team minute idea kid body information back parent face others level "
         "office door health person art war history party result change morning reason research girl guy "
         "moment air teacher force education").split()


@dataclass
class RequestResult:
    ok: bool = False
    status: int = 0  # HTTP status (0: no response)
    error: str = ""
    start: float = 0.0  # perf_counter() at send
    ttft: Optional[float] = None  # s, send -> first content chunk
    e2e: float = 0.0  # s, send -> end of the response
    itl: list = field(default_factory=list)  # s, gaps between content chunks
    prompt_tokens: Optional[int] = None  # from usage
    output_tokens: int = 0  # from usage, else content chunks

    @property
    def tpot(self) -> Optional[float]:
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


class Client:
    """One HTTP connection per request (what concurrent users do), to base_url."""

    def __init__(self, base_url: str, api_key: Optional[str], timeout: float):
        u = urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"--base-url must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        if self.prefix.endswith("/v1"):
            self.prefix = self.prefix[:-3]
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout

    def connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def request_json(self, method: str, path: str, body: Optional[dict] = None) -> dict:
        """The JSON answer of one request; a RuntimeError for any status but 200."""
        conn = self.connect()
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, self.prefix + path, body=data, headers=self.headers)
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {raw[:300]!r}")
            return json.loads(raw)
        finally:
            conn.close()

    def get_json(self, path: str) -> dict:
        return self.request_json("GET", path)

    def post(self, path: str, body: dict, stream: bool) -> RequestResult:
        res = RequestResult(start=time.perf_counter())
        conn = self.connect()
        try:
            conn.request("POST", self.prefix + path, body=json.dumps(body).encode(), headers=self.headers)
            resp = conn.getresponse()
            res.status = resp.status
            if resp.status != 200:
                res.error = error_message(resp.read())
            elif stream:
                read_stream(resp, res, body.get("max_tokens"))
            else:
                read_whole(resp, res)
        except (OSError, http.client.HTTPException, ValueError) as e:
            res.error = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        res.e2e = time.perf_counter() - res.start
        res.ok = not res.error
        return res


def error_message(raw: bytes) -> str:
    try:
        err = json.loads(raw)["error"]
        return str(err.get("message", err))[:300]
    except (ValueError, KeyError, TypeError, AttributeError):
        return raw[:300].decode("utf-8", "replace")


def content(choice: dict) -> str:
    """The text of one choice of a chunk or response (completions or chat)."""
    if "text" in choice:
        return choice.get("text") or ""
    msg = choice.get("delta") or choice.get("message") or {}
    return msg.get("content") or ""


def value_error(kind: str, message: str) -> Exception:
    return ValueError(message)


def sse_events(resp, fail=value_error):
    """The JSON payloads of a server-sent-event response as they come, ending at data: [DONE].
    fail(kind, message) makes the exception raised for a payload that is not JSON (kind
    "bad_stream"), an error event ("error_event") or a stream that ends without [DONE]
    ("no_done")."""
    for raw in iter(resp.readline, b""):
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            raise fail("bad_stream", f"not JSON: {data[:200]!r}") from None
        if "error" in event:
            raise fail("error_event", f"error event: {error_message(data)}")
        yield event
    raise fail("no_done", "the stream ended without data: [DONE]")


def read_stream(resp, res: RequestResult, max_tokens: Optional[int] = None) -> None:
    """Server-sent events until [DONE]: time the content chunks, take the usage. A server that
    reports no usage (llama-cpp-python's) made exactly max_tokens tokens when it finished for
    "length"; else the content chunks are the count (a chunk may hold more than one token)."""
    last, chunks, finish = None, 0, None
    for event in sse_events(resp):
        now = time.perf_counter()
        for c in event.get("choices") or []:
            finish = c.get("finish_reason") or finish
        if any(content(c) for c in event.get("choices") or []):
            chunks += 1
            if last is None:
                res.ttft = now - res.start
            else:
                res.itl.append(now - last)
            last = now
        if event.get("usage"):
            res.prompt_tokens = event["usage"].get("prompt_tokens")
            res.output_tokens = event["usage"].get("completion_tokens") or 0
    if not res.output_tokens:
        res.output_tokens = max_tokens if finish == "length" and max_tokens else chunks


def read_whole(resp, res: RequestResult) -> None:
    body = json.loads(resp.read())
    res.ttft = time.perf_counter() - res.start  # the whole answer is the first token's arrival
    usage = body.get("usage") or {}
    res.prompt_tokens = usage.get("prompt_tokens")
    res.output_tokens = usage.get("completion_tokens") or 0
