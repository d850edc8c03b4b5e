"""Response and stream-chunk bodies in OpenAI's shapes, and the two logprobs formats.

Chat logprobs: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}``.
Completion logprobs (legacy): ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``.
Token text comes from the byte-level BPE vocabulary, so ``bytes`` are the token's exact
UTF-8 bytes even when it holds only part of a character.
"""

from __future__ import annotations

import functools
from typing import Optional

from ...engine.outputs import Usage


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> dict:
    """GPT-2 byte-level BPE: the printable character standing for each byte -> the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class TokenText:
    """Token id -> (text, UTF-8 bytes) for one tokenizer, cached."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._cache: dict = {}

    def __call__(self, token_id: int) -> tuple:
        hit = self._cache.get(token_id)
        if hit is None:
            piece = self.tokenizer.id_to_token(token_id)
            table = _byte_decoder()
            if piece is not None and all(c in table for c in piece):
                raw = bytes(table[c] for c in piece)
            else:  # an added token stored as plain text (or an id with no vocabulary entry)
                raw = self.tokenizer.decode([token_id]).encode("utf-8")
            hit = (raw.decode("utf-8", errors="replace"), list(raw))
            if len(self._cache) < 200_000:
                self._cache[token_id] = hit
        return hit


def _ranked(entry: dict, k: int) -> list:
    """The k most likely (id, logprob) of one token's logprob dict."""
    return sorted(entry.items(), key=lambda kv: -kv[1])[:k]


def chat_logprobs(token_ids: list, entries: list, top_n: int, text_of: TokenText) -> dict:
    """OpenAI chat logprobs for the given output tokens (entries: {id: logprob} per token)."""
    content = []
    for tid, entry in zip(token_ids, entries):
        text, raw = text_of(tid)
        top = []
        for oid, lp in _ranked(entry, top_n):
            otext, oraw = text_of(oid)
            top.append({"token": otext, "logprob": lp, "bytes": oraw})
        content.append({"token": text, "logprob": entry.get(tid, float("-inf")), "bytes": raw, "top_logprobs": top})
    return {"content": content, "refusal": None}


def completion_logprobs(token_ids: list, entries: list, top_n: int, text_of: TokenText, offset: int) -> dict:
    """Legacy completion logprobs; text offsets count from `offset` characters."""
    tokens, lps, tops, offsets = [], [], [], []
    for tid, entry in zip(token_ids, entries):
        text, _ = text_of(tid)
        tokens.append(text)
        lps.append(entry.get(tid, float("-inf")))
        tops.append({text_of(oid)[0]: lp for oid, lp in _ranked(entry, top_n)} if top_n else None)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def usage_body(usage: Usage) -> dict:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens, "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}}


def sum_usage(usages: list) -> Usage:
    return Usage(sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages),
                 sum(u.cached_tokens for u in usages))


def envelope(kind: str, rid: str, created: int, model: str, choices: list, usage: Optional[Usage] = None,
             chunk: bool = False, include_usage: bool = False) -> dict:
    """The outer object of a response (`kind` "chat" or "text") or of one stream chunk."""
    obj = {"chat": "chat.completion", "text": "text_completion"}[kind]
    if chunk and kind == "chat":
        obj = "chat.completion.chunk"
    body = {"id": rid, "object": obj, "created": created, "model": model, "system_fingerprint": None,
            "choices": choices}
    if usage is not None:
        body["usage"] = usage_body(usage)
    elif not chunk or include_usage:
        body["usage"] = None
    return body
