"""The bad requests of test_http_attacks.py, as pytest params (method, path, requests' keyword
arguments, the status it must get, the field the error must name or ANY): wrong types generated
for every field of every request body from the server's own schemas, and hand-written cases by
kind (ranges, huge ints, nesting, sizes, UTF-8, surrogates, content types, routes, empty bodies,
duplicate keys, nulls, semantic errors). The server they are sent to runs with the limits below."""

from __future__ import annotations

import json

import pytest

MAX_BODY = 1 << 20
CAP = 8
MAX_N = 4
KEY = "attack-key-1"
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
EMB = "/v1/embeddings"
MSG = [{"role": "user", "content": "hi"}]


def _raw(body: bytes, ctype: str = "application/json") -> dict:
    return {"data": body, "headers": {"Content-Type": ctype}}


def _js(obj) -> dict:
    return {"json": obj}


ANY = object()  # the case's param is not checked (no single field to name)


def _case(id_, method, path, kw, status, param=ANY):
    return pytest.param(method, path, kw, status, param, id=id_)


# ---- wrong types, generated for every field of every request body ----------------------------
def _wrong_type_cases() -> list:
    from llaisys.server.protocol.parse import Limits
    from llaisys.server.protocol.request_schemas import request_schemas

    samples = [("string", "x"), ("integer", 7), ("number", 1.5), ("boolean", True), ("array", [1]),
               ("object", {"a": 1})]
    bases = {"ChatCompletionRequest": (CHAT, {"messages": MSG}), "CompletionRequest": (COMP, {"prompt": "hi"}),
             "EmbeddingRequest": (EMB, {"input": "hi"}), "TokenizeRequest": ("/tokenize", {"prompt": "hi"}),
             "DetokenizeRequest": ("/detokenize", {"tokens": [1]})}
    schemas = request_schemas(Limits(max_n=MAX_N, max_tokens_cap=CAP))
    out = []
    for name, (path, base) in bases.items():
        for i, (field, sub) in enumerate(schemas[name]["properties"].items()):
            types = set()
            for s in sub.get("anyOf", [sub]):
                t = s.get("type", [])
                types |= {t} if isinstance(t, str) else set(t)
            if "number" in types:
                types.add("integer")
            wrong = [(t, v) for t, v in samples if t not in types]
            for t, v in (wrong[i % len(wrong):] + wrong[:i % len(wrong)])[:2]:
                body = dict(base, **{field: v})
                if field in ("prompt", "messages") and path == "/tokenize":  # exactly one of them
                    body = {field: v}
                out.append(_case(f"type {path} {field}={t}", "POST", path, _js(body), 400, field))
    return out


# ---- hand-written cases ---------------------------------------------------------------------
def _chat(**kw):
    return _js(dict({"messages": MSG}, **kw))


def _comp(**kw):
    return _js(dict({"prompt": "hi"}, **kw))


RANGE_CASES = [
    _case(f"range chat {k}={v!r}", "POST", CHAT, _chat(**{k: v}), 400, k) for k, v in [
        ("temperature", 1e9), ("temperature", 2.0001), ("temperature", -0.5), ("top_p", 0), ("top_p", 1.01),
        ("top_p", -1), ("top_p", 5e-324), ("min_p", -0.1), ("min_p", 1.5), ("presence_penalty", 2.5),
        ("presence_penalty", -2.5), ("frequency_penalty", 3), ("frequency_penalty", -3),
        ("repetition_penalty", 0), ("repetition_penalty", -1), ("repetition_penalty", 5e-324),
        ("repetition_penalty", 2.5), ("top_k", -2), ("n", 0), ("n", MAX_N + 1), ("max_tokens", 0),
        ("max_tokens", -1), ("max_tokens", CAP + 1), ("max_completion_tokens", 0), ("min_tokens", -1),
        ("min_tokens", CAP + 1), ("seed", -1), ("seed", 2 ** 64), ("seed", 10 ** 30), ("top_logprobs", 21),
        ("logit_bias", {"5": 101}), ("logit_bias", {"5": -100.5}), ("logit_bias", {"-1": 1}),
        ("logit_bias", {"abc": 1}), ("logit_bias", {"1.5": 1}), ("logit_bias", {"\u00b2": 1}),
        ("logit_bias", {"\u0661": 1}), ("logit_bias", {"999999999": 5}), ("logit_bias", {"1180591620717411303424": 5}),
        ("logit_bias", {str(i): 1 for i in range(301)}), ("stop_token_ids", [-1]),
        ("stop_token_ids", [1180591620717411303424]), ("stop_token_ids", [999999999]), ("stop", ""),
        ("stop", [""]), ("stop", ["x"] * 17), ("best_of", MAX_N + 1),
    ]
] + [
    _case(f"range completion {k}={v!r}", "POST", COMP, _comp(**{k: v}), 400, k) for k, v in [
        ("logprobs", -1), ("logprobs", 21), ("seed", -1), ("seed", 2 ** 64), ("temperature", 1e9),
        ("logit_bias", {"999999999": 5}), ("stop_token_ids", [1180591620717411303424]), ("max_tokens", 10 ** 30),
    ]
] + [
    _case("range embeddings dimensions=0", "POST", EMB, _js({"input": "a", "dimensions": 0}), 400, "dimensions"),
    _case("range embeddings encoding_format=hex", "POST", EMB, _js({"input": "a", "encoding_format": "hex"}), 400,
          "encoding_format"),
    _case("range embeddings id -1", "POST", EMB, _js({"input": [1, -1]}), 400, "input"),
    _case("range embeddings id 2**40", "POST", EMB, _js({"input": [[2 ** 40]]}), 400, "input"),
    _case("range embeddings id beyond vocab", "POST", EMB, _js({"input": [10 ** 7]}), 400, "input"),
    _case("range detokenize -1", "POST", "/detokenize", _js({"tokens": [1, -4]}), 400, "tokens"),
    _case("range detokenize 2**40", "POST", "/detokenize", _js({"tokens": [2 ** 40]}), 400, "tokens"),
    _case("range detokenize beyond vocab", "POST", "/detokenize", _js({"tokens": [10 ** 7]}), 400, "tokens"),
    _case("range completion prompt id beyond vocab", "POST", COMP, _js({"prompt": [1, 10 ** 7]}), 400, "prompt"),
    _case("range completion prompt id -1", "POST", COMP, _js({"prompt": [[1, -1]]}), 400, "prompt"),
    _case("range completion beyond context", "POST", COMP, _js({"prompt": [100] * 300}), 400, "prompt"),
    _case("range chat beyond context", "POST", CHAT, _js({"messages": [{"role": "user", "content": "word " * 400}]}),
          400, "messages"),
]

HUGE_CASES = [
    _case("huge int temperature", "POST", CHAT, _raw(b'{"messages": [{"role": "user", "content": "x"}], '
                                                    b'"temperature": 1' + b"0" * 400 + b"}"), 400, "temperature"),
    _case("huge int 5000 digits", "POST", CHAT, _raw(b'{"messages": [], "seed": 1' + b"0" * 5000 + b"}"), 400),
    _case("huge float 1e400", "POST", CHAT, _raw(b'{"messages": [{"role": "user", "content": "x"}], '
                                                b'"top_p": 1e400}'), 400, "top_p"),
    _case("huge negative float", "POST", CHAT, _raw(b'{"messages": [{"role": "user", "content": "x"}], '
                                                   b'"presence_penalty": -1e400}'), 400, "presence_penalty"),
    _case("huge int max_tokens", "POST", COMP, _raw(b'{"prompt": "x", "max_tokens": 99999999999999999999999}'), 400,
          "max_tokens"),
    _case("huge int n", "POST", COMP, _raw(b'{"prompt": "x", "n": 18446744073709551617}'), 400, "n"),
    _case("huge int top_k", "POST", COMP, _raw(b'{"prompt": "x", "top_k": 18446744073709551617}'), 400, "top_k"),
    _case("huge int prompt id", "POST", COMP, _raw(b'{"prompt": [18446744073709551617]}'), 400, "prompt"),
    _case("huge int tokens", "POST", "/detokenize", _raw(b'{"tokens": [1180591620717411303424]}'), 400, "tokens"),
] + [
    _case(f"constant {c} {k}", "POST", CHAT, _raw(b'{"messages": [{"role": "user", "content": "x"}], "' + k.encode()
                                                  + b'": ' + c.encode() + b"}"), 400)
    for c in ("NaN", "Infinity", "-Infinity") for k in ("temperature", "top_p", "unknown_field")
]


def _nest(depth: int, open_: bytes = b"[", close: bytes = b"]", inner: bytes = b"1") -> bytes:
    return open_ * depth + inner + close * depth


NEST_CASES = [
    _case(f"nesting {where} {d}", "POST", CHAT, _raw(b'{"messages": [{"role": "user", "content": "x"}], "' +
                                                     where.encode() + b'": ' + _nest(d) + b"}"), 400)
    for where in ("extra", "stop") for d in (40, 1000, 20000)
] + [
    _case("nesting objects 5000", "POST", CHAT, _raw(b'{"messages": ' + _nest(5000, b'{"a": ', b"}") + b"}"), 400),
    _case("nesting messages content", "POST", CHAT, _raw(b'{"messages": [{"role": "user", "content": ' +
                                                         _nest(200) + b"}]}"), 400, "messages"),
    _case("nesting prompt", "POST", COMP, _raw(b'{"prompt": ' + _nest(100) + b"}"), 400),
    _case("nesting input", "POST", EMB, _raw(b'{"input": ' + _nest(100) + b"}"), 400),
    _case("nesting logit_bias", "POST", CHAT, _raw(b'{"messages": [{"role": "user", "content": "x"}], '
                                                   b'"logit_bias": {"5": ' + _nest(50) + b"}}"), 400),
]

SIZE_CASES = [
    _case("body over the limit", "POST", CHAT, _raw(b'{"messages": "' + b"x" * (MAX_BODY + 10) + b'"}'), 413),
    _case("body over the limit, text/plain", "POST", CHAT, _raw(b"x" * (MAX_BODY * 2), "text/plain"), 413),
    _case("body over the limit on tokenize", "POST", "/tokenize", _raw(b'{"prompt": "' + b"a" * MAX_BODY + b'"}'),
          413),
    _case("body over the limit on a GET", "GET", "/v1/models", _raw(b"x" * (MAX_BODY + 1)), 413),
    _case("body over the limit chunked", "POST", CHAT, {"data": iter([b"{" + b" " * (MAX_BODY // 2)] * 3),
                                                         "headers": {"Content-Type": "application/json"}}, 413),
    _case("too many messages", "POST", CHAT, _js({"messages": [{"role": "user", "content": ""}] * 4097}), 400,
          "messages"),
    _case("too many prompts", "POST", COMP, _js({"prompt": ["a"] * 65}), 400, "prompt"),
    _case("too many inputs", "POST", EMB, _js({"input": ["a"] * 257}), 400, "input"),
    _case("too many stop strings", "POST", COMP, _comp(stop=["s"] * 17), 400, "stop"),
    _case("too many stop ids", "POST", COMP, _comp(stop_token_ids=[1] * 257), 400, "stop_token_ids"),
    _case("too many content parts", "POST", CHAT, _js({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}] * 1025}]}), 400, "messages"),
    _case("user too long", "POST", CHAT, _chat(user="u" * 257), 400, "user"),
    _case("model name too long", "POST", CHAT, _chat(model="m" * 257), 400, "model"),
    _case("session id too long", "POST", CHAT, _chat(session_id="s" * 129), 400, "session_id"),
]

UTF8_CASES = [
    _case(f"bad utf-8 {name}", "POST", path, _raw(body), 400) for name, path, body in [
        ("0xff in content", CHAT, b'{"messages": [{"role": "user", "content": "a\xffb"}]}'),
        ("overlong slash", COMP, b'{"prompt": "\xc0\xaf"}'),
        ("encoded surrogate", COMP, b'{"prompt": "\xed\xa0\x80"}'),
        ("truncated sequence", "/tokenize", b'{"prompt": "\xe2\x82"}'),
        ("latin-1 body", EMB, '{"input": "caf\u00e9"}'.encode("latin-1")),
        ("utf-16 body", COMP, '{"prompt": "x"}'.encode("utf-16")),
        ("utf-8 bom", COMP, b'\xef\xbb\xbf{"prompt": "x"}'),
        ("0xff in a key", CHAT, b'{"messages": [{"role": "user", "content": "a"}], "\xff": 1}'),
        ("code point beyond U+10FFFF", COMP, b'{"prompt": "\xf4\x90\x80\x80"}'),
    ]
]

_S = "a\ud800b"  # a lone surrogate (JSON carries it as \ud800)
SURROGATE_CASES = [
    _case(f"surrogate {name}", "POST", path, _js(body), 400, param) for name, path, body, param in [
        ("chat content", CHAT, {"messages": [{"role": "user", "content": _S}]}, "messages"),
        ("chat content part", CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": _S}]}]},
         "messages"),
        ("chat name", CHAT, {"messages": [{"role": "user", "content": "x", "name": _S}]}, "messages"),
        ("chat role", CHAT, {"messages": [{"role": "user\udc00", "content": "x"}]}, "messages"),
        ("chat low surrogate", CHAT, {"messages": [{"role": "user", "content": "\udfff"}]}, "messages"),
        ("chat reversed pair", CHAT, {"messages": [{"role": "user", "content": "\udc00\ud800"}]}, "messages"),
        ("chat stop", CHAT, {"messages": MSG, "stop": _S}, "stop"),
        ("chat stop list", CHAT, {"messages": MSG, "stop": ["ok", _S]}, "stop"),
        ("chat user", CHAT, {"messages": MSG, "user": _S}, "user"),
        ("chat model", CHAT, {"messages": MSG, "model": _S}, "model"),
        ("chat session_id", CHAT, {"messages": MSG, "session_id": _S}, "session_id"),
        ("chat logit_bias key", CHAT, {"messages": MSG, "logit_bias": {_S: 1}}, "logit_bias"),
        ("chat unknown field value", CHAT, {"messages": MSG, "extra": _S}, "extra"),
        ("completion prompt", COMP, {"prompt": _S}, "prompt"),
        ("completion prompt list", COMP, {"prompt": ["ok", _S]}, "prompt"),
        ("completion user", COMP, {"prompt": "x", "user": _S}, "user"),
        ("embeddings input", EMB, {"input": _S}, "input"),
        ("embeddings input list", EMB, {"input": ["ok", _S]}, "input"),
        ("embeddings user", EMB, {"input": "x", "user": _S}, "user"),
        ("tokenize prompt", "/tokenize", {"prompt": _S}, "prompt"),
        ("tokenize messages", "/tokenize", {"messages": [{"role": "user", "content": _S}]}, "messages"),
        ("cancel user", "/v1/requests/chatcmpl-x/cancel", {"user": _S}, "user"),
    ]
] + [
    _case("surrogate in a field name", "POST", CHAT, _js({"messages": MSG, _S: 1}), 400, None),
]

_JSON_ROUTES = (CHAT, COMP, EMB, "/tokenize", "/detokenize")
_VALID = {CHAT: {"messages": MSG, "max_tokens": 1}, COMP: {"prompt": "hi", "max_tokens": 1}, EMB: {"input": "hi"},
          "/tokenize": {"prompt": "hi"}, "/detokenize": {"tokens": [1]}}
CTYPE_CASES = [
    _case(f"content-type {ctype or 'none'} {path}", "POST", path, {
        "data": json.dumps(_VALID[path]).encode(), "headers": {"Content-Type": ctype} if ctype else {}}, 415, None)
    for path in _JSON_ROUTES for ctype in ("text/plain", "application/x-www-form-urlencoded", None)
] + [
    _case(f"content-type {ctype}", "POST", CHAT, {"data": json.dumps(_VALID[CHAT]).encode(),
                                                   "headers": {"Content-Type": ctype}}, 415, None)
    for ctype in ("multipart/form-data; boundary=x", "application/json; charset=latin-1", "application/jsonx",
                  "text/json", "application/json-patch+json", "application/xml", "image/png")
] + [
    _case("content-type text/plain cancel body", "POST", "/v1/requests/x/cancel",
          {"data": b'{"user": "u"}', "headers": {"Content-Type": "text/plain"}}, 415, None),
]

ROUTE_CASES = [
    _case(f"route {m} {p}", m, p, {}, status, None) for m, p, status in [
        ("GET", CHAT, 405), ("PUT", COMP, 405), ("DELETE", "/v1/models", 405), ("PATCH", "/tokenize", 405),
        ("POST", "/health", 405), ("POST", "/openapi.json", 405), ("PUT", "/v1/sessions/abc", 405),
        ("GET", "/v1/requests/x/cancel", 405), ("POST", "/v1/unknown", 404), ("GET", "/v1/chat", 404),
        ("GET", "/v1/completions/extra", 404), ("GET", "/v1/sessions/", 404), ("GET", "/%2e%2e/%2e%2e/etc/passwd", 404),
        ("GET", "/v1/" + "a" * 4000, 404), ("POST", "/v1/requests//cancel", 404), ("GET", "/v1/sessions/nobody", 404),
        ("DELETE", "/v1/sessions/nobody", 404), ("POST", "/v1/requests/chatcmpl-unknown/cancel", 404),
        ("GET", "/v2/models", 404), ("GET", "/metrics/x", 404),
    ]
]

EMPTY_CASES = [
    _case(f"empty {path} {body!r}", "POST", path, _raw(body), 400, None)
    for path in (CHAT, COMP, "/tokenize") for body in (b"", b"   ", b"\n\t", b"null", b"[]", b'""', b"0", b"true")
] + [
    _case("empty object chat", "POST", CHAT, _raw(b"{}"), 400, "messages"),
    _case("empty object completions", "POST", COMP, _raw(b"{}"), 400, "prompt"),
    _case("empty object embeddings", "POST", EMB, _raw(b"{}"), 400, "input"),
    _case("empty object detokenize", "POST", "/detokenize", _raw(b"{}"), 400, "tokens"),
    _case("empty object tokenize", "POST", "/tokenize", _raw(b"{}"), 400, "prompt"),
    _case("two objects", "POST", COMP, _raw(b'{"prompt": "a"} {"prompt": "b"}'), 400, None),
    _case("trailing garbage", "POST", COMP, _raw(b'{"prompt": "a"}x'), 400, None),
    _case("single quotes", "POST", COMP, _raw(b"{'prompt': 'a'}"), 400, None),
    _case("trailing comma", "POST", COMP, _raw(b'{"prompt": "a",}'), 400, None),
    _case("comment", "POST", COMP, _raw(b'{"prompt": "a" /* x */}'), 400, None),
    _case("nul byte", "POST", COMP, _raw(b'{"prompt": "a"}\x00'), 400, None),
    _case("unescaped control char", "POST", COMP, _raw(b'{"prompt": "a\x01b"}'), 400, None),
]

DUP_CASES = [
    _case(f"duplicate key {name}", "POST", path, _raw(body), 400, None) for name, path, body in [
        ("messages", CHAT, b'{"messages": [{"role": "user", "content": "a"}], "messages": "x"}'),
        ("temperature", CHAT, b'{"messages": [{"role": "user", "content": "a"}], "temperature": 0, "temperature": 9}'),
        ("in a message", CHAT, b'{"messages": [{"role": "user", "role": "system", "content": "a"}]}'),
        ("prompt", COMP, b'{"prompt": "a", "prompt": "b"}'),
        ("logit_bias key", COMP, b'{"prompt": "a", "logit_bias": {"5": 1, "5": 2}}'),
        ("input", EMB, b'{"input": "a", "input": "b"}'),
        ("tokens", "/detokenize", b'{"tokens": [1], "tokens": [2]}'),
    ]
]

NULL_CASES = [
    _case(f"null {name}", "POST", path, _js(body), 400, param) for name, path, body, param in [
        ("messages", CHAT, {"messages": None}, "messages"),
        ("message", CHAT, {"messages": [None]}, "messages"),
        ("role", CHAT, {"messages": [{"role": None, "content": "x"}]}, "messages"),
        ("content", CHAT, {"messages": [{"role": "user", "content": None}]}, "messages"),
        ("content part", CHAT, {"messages": [{"role": "user", "content": [None]}]}, "messages"),
        ("part text", CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]}, "messages"),
        ("stop item", CHAT, {"messages": MSG, "stop": [None]}, "stop"),
        ("stop id", CHAT, {"messages": MSG, "stop_token_ids": [None]}, "stop_token_ids"),
        ("logit_bias value", CHAT, {"messages": MSG, "logit_bias": {"5": None}}, "logit_bias"),
        ("prompt", COMP, {"prompt": None}, "prompt"),
        ("prompt item", COMP, {"prompt": [None]}, "prompt"),
        ("prompt id", COMP, {"prompt": [[1, None]]}, "prompt"),
        ("input", EMB, {"input": None}, "input"),
        ("input item", EMB, {"input": ["a", None]}, "input"),
        ("tokens", "/detokenize", {"tokens": None}, "tokens"),
        ("token", "/detokenize", {"tokens": [1, None]}, "tokens"),
        ("tokenize both null", "/tokenize", {"prompt": None, "messages": None}, "prompt"),
    ]
]

SEMANTIC_CASES = [
    _case(f"refused {name}", "POST", path, _js(body), status, param) for name, path, body, status, param in [
        ("role wizard", CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
        ("image part", CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
         400, "messages"),
        ("tool_calls on a user turn", CHAT, {"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, 400,
         "messages"),
        ("messages empty", CHAT, {"messages": []}, 400, "messages"),
        ("messages object", CHAT, {"messages": {"role": "user", "content": "x"}}, 400, "messages"),
        ("tools", CHAT, {"messages": MSG, "tools": [{"type": "function"}]}, 400, "tools"),
        ("chat_template", CHAT, {"messages": MSG, "chat_template": "{{ 'a' * 10**10 }}"}, 400, "chat_template"),
        ("response_format xml", CHAT, {"messages": MSG, "response_format": {"type": "xml"}}, 400,
         "response_format"),
        ("tool_choice naming no tool", CHAT, {"messages": MSG, "tools": [{"type": "function", "function": {
            "name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}, 400, "tool_choice"),
        ("best_of != n", CHAT, {"messages": MSG, "best_of": 2}, 400, "best_of"),
        ("top_logprobs without logprobs", CHAT, {"messages": MSG, "top_logprobs": 2}, 400, "top_logprobs"),
        ("stream_options without stream", CHAT, {"messages": MSG, "stream_options": {"include_usage": True}}, 400,
         "stream_options"),
        ("session_id control chars", CHAT, {"messages": MSG, "session_id": "a\nb"}, 400, "session_id"),
        ("unknown model", CHAT, {"messages": MSG, "model": "gpt-9"}, 404, "model"),
        ("min_tokens > max_tokens", CHAT, {"messages": MSG, "max_tokens": 2, "min_tokens": 5}, 400, "min_tokens"),
        ("suffix with token ids", COMP, {"prompt": [1, 2], "suffix": "y"}, 400, "suffix"),
        ("infill typed text past the context", "/infill", {"prompt": "word " * 5000, "n_predict": 1}, 400, "prompt"),
        ("native completion past the context", "/completion", {"prompt": "word " * 5000}, 400, "prompt"),
        ("native completion of no prompt", "/completion", {"prompt": []}, 400, "prompt"),
        ("native completion ids mixed with text", "/completion", {"prompt": [1, "a"]}, 400, "prompt"),
        ("echo with logprobs", COMP, {"prompt": "x", "echo": True, "logprobs": 1}, 400, "echo"),
        ("prompt ids mixed with strings", COMP, {"prompt": [1, "a"]}, 400, "prompt"),
        ("prompt empty string", COMP, {"prompt": ""}, 400, "prompt"),
        ("prompt empty list", COMP, {"prompt": []}, 400, "prompt"),
        ("prompt empty id list", COMP, {"prompt": [[1], []]}, 400, "prompt"),
        ("prompt bools", COMP, {"prompt": [True, False]}, 400, "prompt"),
        ("input empty string", EMB, {"input": [""]}, 400, "input"),
        ("input empty", EMB, {"input": []}, 400, "input"),
        ("dimensions other", EMB, {"input": "x", "dimensions": 3}, 400, "dimensions"),
        ("tokenize both", "/tokenize", {"prompt": "a", "messages": MSG}, 400, "prompt"),
        ("tokenize template", "/tokenize", {"messages": MSG, "chat_template": "x"}, 400, "chat_template"),
        ("cancel user int", "/v1/requests/x/cancel", {"user": 5}, 400, "user"),
        ("cancel body list", "/v1/requests/x/cancel", [1], 400, None),
    ]
]


BAD_REQUESTS = (_wrong_type_cases() + RANGE_CASES + HUGE_CASES + NEST_CASES + SIZE_CASES + UTF8_CASES + SURROGATE_CASES
                + CTYPE_CASES + ROUTE_CASES + EMPTY_CASES + DUP_CASES + NULL_CASES + SEMANTIC_CASES)
