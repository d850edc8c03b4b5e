"""The hostile part of tools/soak.py's trace (`--hostile FRACTION`): requests an attacker or a
careless client sends, mixed at a low rate into the ordinary trace.

Each kind says what the server must answer; anything else (a 5xx above all) is an error of the
soak. The kinds are issue #39's reproducers:

- ``bomb_ref``: a response_format json_schema whose $ref chain is 1,000 deep (it killed the
  process) -> 400;
- ``bomb_lark``: a 5,000-rule Lark chain (the same, through the grammar extension) -> 400;
- ``unsat``: a $ref cycle, which no finite JSON satisfies -> 400;
- ``junk_field``: a chat whose message carries an unknown 512 KiB field (once stored whole in
  sessions) -> 200, and the RSS verdict sees any growth;
- ``long_prompt``: a prompt of ~6,000 tokens (steps are sized in time beside it) -> 200.
"""

from __future__ import annotations

import random

from benchkit.openai_http import WORDS

# kind -> weight (relative, within the hostile fraction)
HOSTILE = {"bomb_ref": 2, "bomb_lark": 2, "unsat": 2, "junk_field": 3, "long_prompt": 1}
EXPECT = {"bomb_ref": 400, "bomb_lark": 400, "unsat": 400, "junk_field": 200, "long_prompt": 200}
JUNK_BYTES = 512 * 1024
LONG_WORDS = 4500  # ~6,000 tokens of the trace's words


def _ref_chain(depth: int) -> dict:
    defs = {f"d{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(depth)}
    defs[f"d{depth}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def make_hostile(kind: str, rng: random.Random, model: str, user: str) -> tuple:
    """(path, body, expected HTTP status) of one hostile request of `kind`."""
    body = {"model": model, "user": user, "max_tokens": 4, "temperature": 0.0,
            "messages": [{"role": "user", "content": "hi"}]}
    if kind == "bomb_ref":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": _ref_chain(1000)}}
    elif kind == "bomb_lark":
        rules = ["start: r0"] + [f"r{i}: \"x\" r{i + 1}" for i in range(5000)] + ["r5000: \"y\""]
        body["response_format"] = {"type": "grammar", "syntax": "lark", "grammar": "\n".join(rules)}
    elif kind == "unsat":
        schema = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    elif kind == "junk_field":
        body["messages"][0]["junk"] = "j" * JUNK_BYTES
        body["max_tokens"] = rng.randint(1, 8)
    elif kind == "long_prompt":
        text = " ".join(rng.choice(WORDS) for _ in range(LONG_WORDS))
        body["messages"][0]["content"] = "Summarize in one line: " + text
        body["max_tokens"] = rng.randint(1, 16)
    else:
        raise ValueError(f"unknown hostile kind {kind!r}")
    return "/v1/chat/completions", body, EXPECT[kind]
