"""The Flask app: shared server state, authentication, CORS, errors as JSON, request logs,
and the small routes (/health, /v1/models, /metrics, the web page)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from flask import Flask, Response, g, jsonify, request, send_from_directory
from werkzeug.exceptions import HTTPException

from .anthropic.routes import api_error as anthropic_error, bp as anthropic_bp, is_anthropic_path
from .protocol.errors import APIError, bad_request, escape_controls, unavailable
from ..models.files import unicode_problem
from .state.generation import CancelRegistry
from .state.limits import Admission, ServerLimits
from .state.metrics import ServerMetrics
from .protocol.parse import Limits
from .state.registry import Registry
from .responses.routes import bp as responses_bp
from .openai.routes import bp
from .state.sessions import SessionStore

log = logging.getLogger("llaisys.server")
access_log = logging.getLogger("llaisys.server.access")

OPEN_PATHS = ("/health", "/openapi.json")  # answered without an API key (the web page's files too)
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "request_too_large",
               415: "unsupported_media_type"}
MAX_JSON_DEPTH = 32  # deepest nesting of arrays and objects a body may have (requests need 4)


def check_json_content_type() -> None:
    """415 unless the request says Content-Type: application/json (charset, if given, UTF-8).
    A browser page may send text/plain without a CORS preflight; JSON routes never accept it."""
    mime = request.mimetype
    charset = request.mimetype_params.get("charset")
    if mime != "application/json" or (charset is not None and charset.lower().replace("_", "-") not in
                                      ("utf-8", "utf8")):
        got = request.headers.get("Content-Type") or "none"
        raise APIError(415, f"Content-Type must be application/json (UTF-8), got {escape_controls(got)[:100]}",
                       code="unsupported_media_type")


def _no_duplicates(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {escape_controls(k)[:100]!r}")
            seen.add(k)
    return obj


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _check_tree(body: dict) -> None:
    """Depth and Unicode of a parsed body, without recursion: a 400 naming the top-level field
    that holds a lone surrogate (in a value or a key)."""
    stack = [(v, 1, k) for k, v in body.items()]
    for k in body:
        why = unicode_problem(k)
        if why is not None:
            raise bad_request(f"a field name {why}", code="invalid_value")
    while stack:
        v, depth, top = stack.pop()
        if isinstance(v, str):
            why = unicode_problem(v)
            if why is not None:
                raise bad_request(f"'{escape_controls(top)}' {why}", param=top, code="invalid_value")
        elif isinstance(v, (list, dict)):
            if depth >= MAX_JSON_DEPTH:
                raise bad_request(f"'{escape_controls(top)}' is nested more than {MAX_JSON_DEPTH} levels deep",
                                  param=top, code="invalid_json")
            if isinstance(v, dict):
                for k, x in v.items():
                    why = unicode_problem(k)
                    if why is not None:
                        raise bad_request(f"a key inside '{escape_controls(top)}' {why}", param=top,
                                          code="invalid_value")
                    stack.append((x, depth + 1, top))
            else:
                stack.extend((x, depth + 1, top) for x in v)


def parse_json_body(data: bytes) -> dict:
    """One JSON object from `data` (strict UTF-8, no NaN/Infinity, no duplicate keys, bounded
    depth, valid Unicode); 400 invalid_json otherwise."""
    if not data.strip():
        raise bad_request("the request body must be a JSON object", code="invalid_json")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad_request(f"the request body is not valid UTF-8 (byte {e.start})", code="invalid_json") from None
    try:
        body = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise bad_request(f"the request body is nested too deeply (at most {MAX_JSON_DEPTH} levels)",
                          code="invalid_json") from None
    except ValueError as e:
        raise bad_request(f"the request body is not valid JSON: {escape_controls(str(e))[:200]}",
                          code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {type(body).__name__}",
                          code="invalid_json")
    _check_tree(body)
    return body


def web_dir() -> Optional[Path]:
    """The web page's folder: the installed package's llaisys/web, else the repository's web/."""
    here = Path(__file__).resolve().parent
    for d in (here.parent / "web", here.parents[2] / "web"):
        if (d / "index.html").is_file():
            return d
    return None


@dataclass
class ServerState:
    """Everything the routes share (app.extensions["llaisys"])."""

    registry: Registry
    limits: ServerLimits = field(default_factory=ServerLimits)
    request_limits: Limits = field(default_factory=Limits)
    api_keys: tuple = ()  # accepted keys; empty: no authentication
    cors_origins: tuple = ()  # allowed origins ("*" for any); empty: no CORS headers
    sessions: SessionStore = field(default_factory=SessionStore)
    cancels: CancelRegistry = field(default_factory=CancelRegistry)
    draining: bool = False  # shutting down: /health and new requests answer 503
    reasoning_parser: str = "auto"  # --reasoning-parser: auto | deepseek_r1 | qwen3 | none

    def __post_init__(self):
        self.admission = Admission(self.limits)
        self.metrics = ServerMetrics(self.registry.engines)
        self.metrics.track_admission(self.admission)

    def check_key(self) -> str:
        """An id of the caller's API key ("" without keys); 401 for a missing or wrong key."""
        if not self.api_keys:
            return ""
        auth = request.headers.get("Authorization", "")
        given = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("X-Api-Key", "")
        given_b = given.encode("utf-8")
        ok = False
        for key in self.api_keys:  # every key is compared, so timing does not tell which matched
            ok |= hmac.compare_digest(given_b, key.encode("utf-8"))
        if not given or not ok:
            raise APIError(401, "a valid API key is required (Authorization: Bearer <key> or X-Api-Key)",
                           code="invalid_api_key")
        return hashlib.sha256(given_b).hexdigest()[:12]

    def identity(self, user: Optional[str]) -> str:
        """Who the caller is, for per-user limits, sessions and cancels: the API key and/or `user`."""
        key = g.get("key_id", "")
        parts = ([f"key:{key}"] if key else []) + ([f"user:{user}"] if user else [])
        return "/".join(parts) or "anonymous"

    def tenant(self, user: Optional[str]) -> str:
        """Whose quota of sessions and stored responses the caller uses: its API key, else
        `user`, else its address (`user` is a claim without keys: state/sessions.py's global caps
        still evict from whoever holds the most)."""
        key = g.get("key_id", "")
        return f"key:{key}" if key else (f"user:{user}" if user else f"addr:{request.remote_addr}")

    def read_json(self) -> dict:
        """The request body as a JSON object: 415 unless it is sent as application/json (UTF-8),
        400 for anything that is not one plain JSON object of valid Unicode text (bad UTF-8,
        NaN/Infinity, duplicate keys, nesting deeper than MAX_JSON_DEPTH, lone surrogates),
        413 past the size limit."""
        if "json_body" in g:
            return g.json_body
        check_json_content_type()
        data = request.get_data(cache=True)
        if request.content_length is None and len(data) >= self.limits.max_body_bytes:
            # a chunked body is cut at the limit by werkzeug rather than refused: refuse it here
            raise APIError(413, f"request body exceeds the limit of {self.limits.max_body_bytes} bytes",
                           code="request_too_large")
        g.json_body = parse_json_body(data)
        return g.json_body

    def log_request(self, f: dict) -> None:
        """One line per request; every client-controlled value has its control characters escaped."""
        def ms(x):
            return "-" if x is None else f"{x * 1000:.0f}"

        fields = [("id", f.get("id")), ("method", f.get("method")), ("path", f.get("path")), ("user", f.get("user")),
                  ("model", f.get("model")), ("status", f.get("status")), ("prompt_tokens", f.get("prompt_tokens")),
                  ("cached_tokens", f.get("cached_tokens")), ("completion_tokens", f.get("completion_tokens")),
                  ("ttft_ms", ms(f.get("ttft"))), ("duration_ms", ms(time.monotonic() - f["t0"])),
                  ("finish", f.get("finish"))]
        access_log.info("request " + " ".join(f"{k}={escape_controls(str(v)) if v is not None else '-'}"
                                              for k, v in fields))


def _error_response(err: APIError) -> Response:
    resp = Response(err.json_bytes(), status=err.status, mimetype="application/json")
    for k, v in err.headers.items():
        resp.headers[k] = v
    return resp


def create_app(st: ServerState) -> Flask:
    app = Flask("llaisys.server", static_folder=None)
    app.extensions["llaisys"] = st
    app.config["MAX_CONTENT_LENGTH"] = st.limits.max_body_bytes
    app.json.ensure_ascii = False
    app.json.sort_keys = False
    app.register_blueprint(bp)
    app.register_blueprint(responses_bp)
    app.register_blueprint(anthropic_bp)
    _add_hooks(app, st)
    _add_routes(app, st)
    return app


def _add_hooks(app: Flask, st: ServerState) -> None:
    @app.before_request
    def _before():
        g.log_fields = {"t0": time.monotonic(), "method": request.method, "path": request.path}
        if request.method == "OPTIONS" and st.cors_origins:
            return Response(status=204)  # CORS preflight: headers added below
        if request.path in OPEN_PATHS or request.endpoint in ("web_index", "web_file") or request.endpoint is None:
            return None
        g.key_id = st.check_key()
        if st.draining:
            raise unavailable("the server is shutting down", code="shutting_down")
        if request.content_length is not None and request.content_length > st.limits.max_body_bytes:
            raise APIError(413, f"request body of {request.content_length} bytes exceeds the limit of "
                                f"{st.limits.max_body_bytes}", code="request_too_large")
        return None

    @app.after_request
    def _after(resp: Response):
        origin = request.headers.get("Origin")
        if st.cors_origins and origin and ("*" in st.cors_origins or origin in st.cors_origins):
            resp.headers["Access-Control-Allow-Origin"] = "*" if "*" in st.cors_origins else origin
            resp.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta"
            resp.headers["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS"
            resp.headers["Access-Control-Max-Age"] = "600"
            if "*" not in st.cors_origins:
                resp.headers.add("Vary", "Origin")
        f = g.get("log_fields")
        if f is not None and not f.get("reported") and not f.get("deferred"):
            f["status"] = resp.status_code
            st.log_request(f)
        return resp

    @app.errorhandler(APIError)
    def _api_error(err: APIError):
        f = g.get("log_fields")
        if f is not None and not f.get("reported") and err.status != 499:
            st.metrics.on_request_done(f.get("model"), None, err.status, None, time.monotonic() - f["t0"], [])
        return _error_response(err)

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException):
        msg = {404: f"no route {request.path}", 405: f"{request.method} is not allowed on {request.path}"}.get(
            e.code, e.description)
        err = APIError(e.code or 500, msg, code=_HTTP_CODES.get(e.code, "http_error"))
        resp = anthropic_error(err) if is_anthropic_path(request.path) else _api_error(err)
        if e.code == 405 and getattr(e, "valid_methods", None):
            resp.headers["Allow"] = ", ".join(e.valid_methods)
        return resp

    @app.errorhandler(Exception)
    def _internal(e: Exception):
        log.exception("internal error on %s %s", request.method, escape_controls(request.path))
        return _api_error(APIError(500, f"internal error: {type(e).__name__}", code="internal_error"))


def _add_routes(app: Flask, st: ServerState) -> None:
    @app.get("/health")
    def health():
        why = "shutting_down" if st.draining else st.registry.health()
        if why is None:
            return jsonify({"status": "ok", "models": list(st.registry.models)})
        code = why if why in ("loading", "shutting_down", "failed", "stopped") else "engine_dead"
        msg = {"loading": "the model is loading", "shutting_down": "the server is shutting down",
               "failed": f"loading failed: {st.registry.error}"}.get(why, why)
        return _error_response(APIError(503, msg, code=code, headers={"Retry-After": "5"} if why == "loading"
                                        else None, state=why))

    @app.get("/openapi.json")
    def openapi():
        from .. import __version__
        from .protocol.openapi import build_openapi

        return jsonify(build_openapi(st.request_limits, has_keys=bool(st.api_keys), has_web=web_dir() is not None,
                                     version=__version__))

    def model_card(m) -> dict:
        return {"id": m.name, "object": "model", "created": m.created, "owned_by": "llaisys",
                "root": m.spec.source, "max_model_len": m.max_model_len}

    @app.get("/v1/models")
    def models():
        return jsonify({"object": "list", "data": [model_card(m) for m in st.registry.models.values()]})

    @app.get("/v1/models/<path:model_id>")
    def model(model_id: str):
        m = st.registry.models.get(model_id)
        if m is None:  # OpenAI's answer for an unknown id
            raise APIError(404, f"The model '{escape_controls(model_id)[:256]}' does not exist",
                           param="model", code="model_not_found", type="invalid_request_error")
        return jsonify(model_card(m))

    @app.get("/metrics")
    def metrics():
        body, ctype = st.metrics.render()
        return Response(body, content_type=ctype)

    root = web_dir()
    if root is None:
        return

    @app.get("/")
    def web_index():
        return send_from_directory(root, "index.html", max_age=0)

    def web_file(rest=None):
        return send_from_directory(root, request.path.lstrip("/"), max_age=0)

    # the page's other files, one rule per top-level entry (not a catch-all, so that unknown
    # API paths still answer JSON 404 and known ones 405)
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            app.add_url_rule(f"/{entry.name}/<path:rest>", endpoint="web_file", view_func=web_file, methods=["GET"])
        else:
            app.add_url_rule(f"/{entry.name}", endpoint="web_file", view_func=web_file, methods=["GET"])
