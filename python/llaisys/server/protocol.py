"""Request bodies of the OpenAI routes, checked field by field into typed dataclasses.

Every field is type-checked here (a wrong type is a 400 naming the field); value ranges are
SamplingParams' business, whose SamplingParamsError.param becomes the error's ``param``.
max_tokens is resolved later, once the prompt's length is known (the default is "up to the
context", or the server's cap). Unknown fields are ignored, as OpenAI-compatible servers do;
fields that would change behaviour we do not implement are refused rather than ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ..engine.sampling_params import MAX_LOGPROBS, SamplingParams, SamplingParamsError
from .errors import bad_request, missing, wrong_type

MAX_PROMPTS = 64  # most prompts in one /v1/completions request

_UNSUPPORTED = {  # field -> why it is refused
    "chat_template": "client-supplied chat templates are not accepted; the model's own template is used",
    "chat_template_kwargs": "client-supplied chat template arguments are not accepted",
    "tools": "tool calling is not supported",
    "functions": "function calling is not supported",
    "suffix": "suffix (fill-in-the-middle) is not supported",
}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def get_field(body: dict, name: str, kind: str, default=None):
    """body[name] checked against `kind` ("str", "int", "number", "bool", "list", "dict");
    absent or null gives `default`."""
    v = body.get(name)
    if v is None:
        return default
    ok = {"str": lambda x: isinstance(x, str),
          "int": _is_int,
          "number": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x),
          "bool": lambda x: isinstance(x, bool),
          "list": lambda x: isinstance(x, list),
          "dict": lambda x: isinstance(x, dict)}[kind](v)
    if not ok:
        expected = {"str": "a string", "int": "an integer", "number": "a finite number", "bool": "a boolean",
                    "list": "an array", "dict": "an object"}[kind]
        raise wrong_type(name, expected, v)
    return v


@dataclass
class Limits:
    """Per-request caps (the server's command-line options); None is no cap."""

    max_n: int = 8  # most completions per prompt
    max_tokens_cap: Optional[int] = None  # most tokens one completion may ask for (and the default)
    max_stop: int = 16  # most stop strings


@dataclass
class GenerationRequest:
    """What chat and completion requests share."""

    model: Optional[str]  # served model name; None: the first one
    sampling: dict  # SamplingParams keyword arguments (max_tokens resolved per prompt later)
    max_tokens: Optional[int]  # what the client asked for; None: up to the context (or the cap)
    stream: bool
    include_usage: bool  # stream_options.include_usage
    user: Optional[str]  # the OpenAI `user` field (part of the caller's identity)
    logprobs: Optional[int]  # top logprobs per token (0: the sampled token's only); None: off


@dataclass
class ChatRequest(GenerationRequest):
    messages: list = field(default_factory=list)  # validated chat messages, content as plain text
    session_id: Optional[str] = None  # server-side conversation to continue
    add_generation_prompt: bool = True


@dataclass
class CompletionRequest(GenerationRequest):
    prompts: list = field(default_factory=list)  # each a non-empty str or a non-empty list of token ids
    echo: bool = False  # prepend the prompt to the text


def _refuse_unsupported(body: dict) -> None:
    for name, why in _UNSUPPORTED.items():
        if body.get(name) is not None:
            raise bad_request(why, param=name, code="unsupported_parameter")
    rf = get_field(body, "response_format", "dict")
    if rf is not None and rf.get("type", "text") != "text":
        raise bad_request("only response_format {'type': 'text'} is supported", param="response_format",
                          code="unsupported_parameter")


def _sampling_fields(body: dict, limits: Limits) -> dict:
    """SamplingParams keyword arguments from the body, type-checked, caps applied."""
    n = get_field(body, "n", "int", 1)
    if n > limits.max_n:
        raise bad_request(f"n must be <= {limits.max_n} on this server, got {n}", param="n")
    best_of = get_field(body, "best_of", "int")
    if best_of is not None and best_of != n:
        raise bad_request("best_of other than n is not supported", param="best_of", code="unsupported_parameter")
    kw = {"n": n}
    for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        v = get_field(body, name, "number")
        if v is not None:
            kw[name] = v
    for name in ("top_k", "seed", "min_tokens"):
        v = get_field(body, name, "int")
        if v is not None:
            kw[name] = v
    for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
        v = get_field(body, name, "bool")
        if v is not None:
            kw[name] = v
    kw.setdefault("temperature", 1.0)  # OpenAI's default (SamplingParams' own default is greedy)
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise wrong_type("stop", "a string or an array of strings", body["stop"])
        if len(stop) > limits.max_stop:
            raise bad_request(f"stop may hold at most {limits.max_stop} strings, got {len(stop)}", param="stop")
        kw["stop"] = stop
    ids = get_field(body, "stop_token_ids", "list")
    if ids is not None:
        kw["stop_token_ids"] = ids
    bias = get_field(body, "logit_bias", "dict")
    if bias is not None:
        kw["logit_bias"] = bias
    check_sampling(dict(kw, max_tokens=None))
    return kw


def check_sampling(kw: dict) -> SamplingParams:
    """SamplingParams(**kw), a SamplingParamsError turned into a 400 naming the field."""
    try:
        return SamplingParams(**kw)
    except SamplingParamsError as e:
        raise bad_request(str(e), param=e.param) from None


def _max_tokens(body: dict, limits: Limits, *names: str) -> Optional[int]:
    for name in names:
        v = get_field(body, name, "int")
        if v is None:
            continue
        if v < 1:
            raise bad_request(f"{name} must be an integer >= 1, got {v}", param=name)
        if limits.max_tokens_cap is not None and v > limits.max_tokens_cap:
            raise bad_request(f"{name} must be <= {limits.max_tokens_cap} on this server, got {v}", param=name)
        return v
    return None


def _stream_fields(body: dict) -> tuple:
    stream = get_field(body, "stream", "bool", False)
    opts = get_field(body, "stream_options", "dict")
    if opts is not None and not stream:
        raise bad_request("stream_options is only allowed with stream: true", param="stream_options")
    include_usage = get_field(opts or {}, "include_usage", "bool", False)
    return stream, include_usage


def _common(body: dict, limits: Limits, logprobs: Optional[int], max_token_names: tuple) -> dict:
    _refuse_unsupported(body)
    stream, include_usage = _stream_fields(body)
    return dict(model=get_field(body, "model", "str"), sampling=_sampling_fields(body, limits),
                max_tokens=_max_tokens(body, limits, *max_token_names), stream=stream, include_usage=include_usage,
                user=get_field(body, "user", "str"), logprobs=logprobs)


def _message_text(i: int, content) -> str:
    """OpenAI content parts ([{"type": "text", "text": ...}]) joined into one string."""
    if not isinstance(content, list):
        return content
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise bad_request(f"messages[{i}].content[{j}] must be a {{'type': 'text', 'text': str}} part "
                              "(this server takes text only)", param="messages")
        texts.append(part["text"])
    return "".join(texts)


def parse_messages(raw, name: str = "messages") -> list:
    """Validated chat messages (content parts flattened to text); 400 naming `name` otherwise."""
    from ..models.tokenizer import validate_messages

    if raw is None:
        raise missing(name)
    if isinstance(raw, list):
        raw = [dict(m, content=_message_text(i, m.get("content"))) if isinstance(m, dict) else m
               for i, m in enumerate(raw)]
    try:
        validate_messages(raw)
    except ValueError as e:
        raise bad_request(str(e), param=name) from None
    return raw


def parse_chat(body: dict, limits: Limits) -> ChatRequest:
    want = get_field(body, "logprobs", "bool", False)
    top = get_field(body, "top_logprobs", "int")
    if top is not None and not want:
        raise bad_request("top_logprobs needs logprobs: true", param="top_logprobs")
    if top is not None and not 0 <= top <= MAX_LOGPROBS:
        raise bad_request(f"top_logprobs must be in [0, {MAX_LOGPROBS}], got {top}", param="top_logprobs")
    req = ChatRequest(**_common(body, limits, (top or 0) if want else None,
                                ("max_completion_tokens", "max_tokens")))
    session = get_field(body, "session_id", "str")
    if session is not None and not (0 < len(session) <= 128 and session.isprintable()):
        raise bad_request("session_id must be 1 to 128 printable characters", param="session_id")
    req.session_id = session
    messages = body.get("messages")
    if session is not None and messages == []:
        raise bad_request("messages must hold the new turn's messages", param="messages")
    req.messages = parse_messages(messages)
    req.add_generation_prompt = get_field(body, "add_generation_prompt", "bool", True)
    return req


def _prompt_list(raw) -> list:
    """The `prompt` field as a list of prompts (strings or token-id lists)."""
    if raw is None:
        raise missing("prompt")
    if isinstance(raw, str):
        prompts = [raw]
    elif isinstance(raw, list) and raw and all(_is_int(t) for t in raw):
        prompts = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(p, str) or (isinstance(p, list) and all(
            _is_int(t) for t in p)) for p in raw):
        prompts = raw
    else:
        raise bad_request("prompt must be a non-empty string, an array of strings, an array of token ids or an "
                          "array of token-id arrays", param="prompt")
    if len(prompts) > MAX_PROMPTS:
        raise bad_request(f"at most {MAX_PROMPTS} prompts per request, got {len(prompts)}", param="prompt")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise bad_request(f"prompt {i} is empty", param="prompt", code="empty_prompt")
    return prompts


def parse_completion(body: dict, limits: Limits) -> CompletionRequest:
    logprobs = get_field(body, "logprobs", "int")
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        raise bad_request(f"logprobs must be in [0, {MAX_LOGPROBS}], got {logprobs}", param="logprobs")
    req = CompletionRequest(**_common(body, limits, logprobs, ("max_tokens",)))
    req.prompts = _prompt_list(body.get("prompt"))
    req.echo = get_field(body, "echo", "bool", False)
    if req.echo and logprobs is not None:
        raise bad_request("echo with logprobs is not supported (prompt logprobs are not computed)", param="echo",
                          code="unsupported_parameter")
    return req


def resolve_max_tokens(requested: Optional[int], n_prompt: int, n_ctx: int, cap: Optional[int],
                       param: str = "prompt") -> Optional[int]:
    """The max_tokens to run with, or a 400 when the prompt leaves no room (with both numbers)."""
    room = n_ctx - n_prompt
    if room < 1 or (requested is not None and requested > room):
        what = f"prompt ({n_prompt} tokens)" + (f" + max_tokens ({requested})" if requested is not None else "")
        raise bad_request(f"{what} exceeds the model's context of {n_ctx} tokens", param=param,
                          code="context_length_exceeded", n_prompt_tokens=n_prompt, n_ctx=n_ctx)
    if requested is not None:
        return requested
    return None if cap is None else min(cap, room)
