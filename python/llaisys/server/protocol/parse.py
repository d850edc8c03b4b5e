"""Request bodies of the OpenAI routes: checked against their schema (``schema.py``, the same
definition /openapi.json publishes), then read into typed dataclasses.

The schema checks every field's type and range (a 400 naming the field); what it cannot say
is checked here: fields that depend on each other (top_logprobs needs logprobs, best_of must
equal n, stream_options needs stream), fields we refuse rather than ignore, and the model-
dependent rules (the context, the vocabulary) later in the route and in the engine's
check_request. max_tokens is resolved once the prompt's length is known (the default is "up to
the context", or the server's cap). Unknown fields are ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ...engine.sampling_params import MAX_STOP_STRINGS, SamplingParams, SamplingParamsError
from ...engine.structured_spec import StructuredOutputError
from ...engine.structured_format import response_format_spec
from .errors import bad_request, missing
from .messages import rendered_message
from ..openai.tool_calls import ToolConfig, check_tools
from .request_schemas import request_schemas
from .schema import MAX_EMBEDDING_INPUTS, MAX_PROMPTS, validate

_UNSUPPORTED = {  # field -> why it is refused
    "chat_template": "client-supplied chat templates are not accepted; the model's own template is used",
    "chat_template_kwargs": "client-supplied chat template arguments are not accepted",
    "functions": "the deprecated `functions` field is not supported; use `tools`",
    "function_call": "the deprecated `function_call` field is not supported; use `tool_choice`",
}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def get_field(body: dict, name: str, default=None):
    """body[name] of a body already validated against its schema; absent or null gives `default`."""
    v = body.get(name)
    return default if v is None else v


def check_body(schema_name: str, body: dict, limits: "Limits") -> dict:
    """`body` validated against the named request schema (400 naming the field otherwise)."""
    validate(request_schemas(limits)[schema_name], body)
    return body


@dataclass
class Limits:
    """Per-request caps (the server's command-line options); None is no cap."""

    max_n: int = 8  # most completions per prompt
    max_tokens_cap: Optional[int] = None  # most tokens one completion may ask for (and the default)
    max_stop: int = MAX_STOP_STRINGS  # most stop strings


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
    tools: Optional[ToolConfig] = None  # tools, tool_choice, parallel_tool_calls; None without tools


@dataclass
class CompletionRequest(GenerationRequest):
    prompts: list = field(default_factory=list)  # each a non-empty str or a non-empty list of token ids
    echo: bool = False  # prepend the prompt to the text
    suffix: Optional[str] = None  # text after the completion: fill-in-the-middle with each prompt the prefix
    prompt_embeds: object = None  # instead of prompts: a base64 string or a list of them (openai/completion_embeds.py)


def _refuse_unsupported(body: dict) -> None:
    for name, why in _UNSUPPORTED.items():
        if body.get(name) is not None:
            raise bad_request(why, param=name, code="unsupported_parameter")


_PASSED_ON = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
              "top_k", "seed", "min_tokens", "ignore_eos", "include_stop_str_in_output", "skip_special_tokens",
              "stop_token_ids", "logit_bias", "speculative")


def _sampling_fields(body: dict, limits: Limits) -> dict:
    """SamplingParams keyword arguments from a validated body."""
    n = get_field(body, "n", 1)
    best_of = get_field(body, "best_of")
    if best_of is not None and best_of != n:
        raise bad_request("best_of other than n is not supported", param="best_of", code="unsupported_parameter")
    kw = {"n": n}
    for name in _PASSED_ON:
        v = get_field(body, name)
        if v is not None:
            kw[name] = v
    kw.setdefault("temperature", 1.0)  # OpenAI's default (SamplingParams' own default is greedy)
    stop = get_field(body, "stop")
    if stop is not None:
        kw["stop"] = [stop] if isinstance(stop, str) else stop
    try:  # structured output: json_object / json_schema / regex / grammar, compiled (cached) here
        structured = response_format_spec(get_field(body, "response_format"))
    except StructuredOutputError as e:
        raise bad_request(str(e), param=e.param) from None
    if structured is not None:
        kw["structured"] = structured
    check_sampling(dict(kw, max_tokens=None))
    return kw


def check_sampling(kw: dict) -> SamplingParams:
    """SamplingParams(**kw), a SamplingParamsError turned into a 400 naming the field."""
    try:
        return SamplingParams(**kw)
    except SamplingParamsError as e:
        raise bad_request(str(e), param=e.param) from None


def _max_tokens(body: dict, *names: str) -> Optional[int]:
    for name in names:  # the schema bounds each by [1, the server's cap]
        v = get_field(body, name)
        if v is not None:
            return v
    return None


def _stream_fields(body: dict) -> tuple:
    stream = get_field(body, "stream", False)
    opts = get_field(body, "stream_options")
    if opts is not None and not stream:
        raise bad_request("stream_options is only allowed with stream: true", param="stream_options")
    include_usage = get_field(opts or {}, "include_usage", False)
    return stream, include_usage


def _common(body: dict, limits: Limits, logprobs: Optional[int], max_token_names: tuple) -> dict:
    _refuse_unsupported(body)
    stream, include_usage = _stream_fields(body)
    return dict(model=get_field(body, "model"), sampling=_sampling_fields(body, limits),
                max_tokens=_max_tokens(body, *max_token_names), stream=stream, include_usage=include_usage,
                user=get_field(body, "user"), logprobs=logprobs)


def _message_text(content) -> str:
    """OpenAI content parts ([{"type": "text", "text": ...}], checked by the schema) joined into one string."""
    if not isinstance(content, list):
        return content
    return "".join(part["text"] for part in content)


def parse_messages(raw, name: str = "messages") -> list:
    """Chat messages (validated by the schema) with content parts flattened to text and only
    the fields templates render (messages.py), then the tokenizer's own rules (tool_calls only
    on assistant turns, ...); 400 naming `name` otherwise."""
    from ...models.tokenizer import validate_messages

    if raw is None:
        raise missing(name)
    raw = [dict(rendered_message(m), content=_message_text(m.get("content")),  # unknown keys dropped
                **({"role": "system"} if m.get("role") == "developer" else {})) for m in raw]  # OpenAI's
    # developer role is the system prompt of its newer models; chat templates know only system
    try:
        validate_messages(raw)
    except ValueError as e:
        raise bad_request(str(e), param=name) from None
    return raw


def parse_chat(body: dict, limits: Limits) -> ChatRequest:
    check_body("ChatCompletionRequest", body, limits)
    want = get_field(body, "logprobs", False)
    top = get_field(body, "top_logprobs")
    if top is not None and not want:
        raise bad_request("top_logprobs needs logprobs: true", param="top_logprobs")
    req = ChatRequest(**_common(body, limits, (top or 0) if want else None,
                                ("max_completion_tokens", "max_tokens")))
    session = get_field(body, "session_id")
    if session is not None and not session.isprintable():
        raise bad_request("session_id must be 1 to 128 printable characters", param="session_id")
    req.session_id = session
    req.messages = parse_messages(body.get("messages"))
    req.add_generation_prompt = get_field(body, "add_generation_prompt", True)
    req.tools = check_tools(get_field(body, "tools"), get_field(body, "tool_choice"),
                            get_field(body, "parallel_tool_calls"))
    return req


def prompt_list(raw, name: str = "prompt", most: int = MAX_PROMPTS) -> list:
    """A validated `prompt` (or embeddings `input`) as a list of prompts (strings or token-id lists)."""
    if isinstance(raw, str):
        prompts = [raw]
    elif all(_is_int(t) for t in raw):
        prompts = [raw]
    elif any(_is_int(t) for t in raw):
        raise bad_request(f"{name} must be a non-empty string, an array of strings, an array of token ids or an "
                          "array of token-id arrays (not ids mixed with prompts)", param=name)
    else:
        prompts = raw
    if len(prompts) > most:
        raise bad_request(f"at most {most} prompts per request, got {len(prompts)}", param=name)
    return prompts


def parse_completion(body: dict, limits: Limits) -> CompletionRequest:
    check_body("CompletionRequest", body, limits)
    logprobs = get_field(body, "logprobs")
    req = CompletionRequest(**_common(body, limits, logprobs, ("max_tokens",)))
    raw, req.prompt_embeds = get_field(body, "prompt"), get_field(body, "prompt_embeds")
    if raw is None and req.prompt_embeds is None:
        raise missing("prompt")
    if raw is not None and req.prompt_embeds is not None:
        raise bad_request("give prompt or prompt_embeds, not both", param="prompt_embeds")
    req.prompts = [] if raw is None else prompt_list(raw)
    req.echo = get_field(body, "echo", False)
    req.suffix = get_field(body, "suffix")
    if req.prompt_embeds is not None and (req.echo or req.suffix is not None):
        raise bad_request("echo and suffix need a text or token-id prompt, not prompt_embeds",
                          param="echo" if req.echo else "suffix", code="unsupported_parameter")
    if req.echo and logprobs is not None:
        raise bad_request("echo with logprobs is not supported (prompt logprobs are not computed)", param="echo",
                          code="unsupported_parameter")
    return req


def parse_embeddings(body: dict, limits: Limits) -> list:
    """The validated embeddings body's inputs as a list (strings or token-id lists)."""
    check_body("EmbeddingRequest", body, limits)
    return prompt_list(body["input"], "input", MAX_EMBEDDING_INPUTS)


def resolve_max_tokens(requested: Optional[int], n_prompt: int, n_ctx: int, cap: Optional[int],
                       param: str = "prompt", default: Optional[int] = None) -> Optional[int]:
    """The max_tokens to run with, or a 400 when the prompt leaves no room (with both numbers).
    Unset, it is `default` (the route's, e.g. 16 on /v1/completions) within the room and the
    cap, else up to the context (or the cap)."""
    room = n_ctx - n_prompt
    if room < 1 or (requested is not None and requested > room):
        what = f"prompt ({n_prompt} tokens)" + (f" + max_tokens ({requested})" if requested is not None else "")
        raise bad_request(f"{what} exceeds the model's context of {n_ctx} tokens", param=param,
                          code="context_length_exceeded", n_prompt_tokens=n_prompt, n_ctx=n_ctx)
    if requested is not None:
        return requested
    if default is not None:
        return min(default, room, cap or default)
    return None if cap is None else min(cap, room)
