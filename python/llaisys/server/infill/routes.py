"""POST /infill: llama-server's code infill (fill-in-the-middle) route, for editor plugins
(llama.vim, llama.vscode), and the FIM prompt of ``suffix`` on /v1/completions.

The body is llama-server's (``schema.py`` lists every field, used or ignored); the
prompt is the model's own FIM layout (``models/fim.py``), fitted to the context; the answer is
llama-server's (``run.py``). A model without FIM tokens answers 400 naming
``input_prefix`` (``suffix`` on /v1/completions).

Order as in the OpenAI routes: parse and type-check the body, pick the model (404), check it
has FIM tokens (400), take an admission slot (429), then tokenize, fit and run.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

from flask import current_app, g, request

from ...models.fim import ExtraChunk, FimPrompt, build_fim_prompt, fim_codec
from ..protocol.errors import bad_request
from ..state.generation import Generation, client_gone_check
from .run import InfillRun
from .schema import IGNORED, REFUSED, infill_request_schema
from ..protocol.parse import check_sampling, get_field
from ..protocol.schema import validate

UNLIMITED_RESERVE = 512  # tokens kept for the answer when n_predict is unlimited (at most a quarter of the context)
DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}  # llama-server's sampling defaults


@dataclass
class InfillRequest:
    """A validated /infill body."""

    model: Optional[str]  # served model name; None (or ''): the first
    prefix: str  # input_prefix
    suffix: str  # input_suffix
    typed: str  # prompt: text typed after the prefix
    extra: list  # [ExtraChunk] input_extra, oldest first
    n_predict: Optional[int]  # None: up to the context; 0: process the prompt only
    sampling: dict  # SamplingParams keyword arguments (no max_tokens, no stop ids)
    stream: bool
    n_indent: int  # <= 0: off
    t_max_predict_ms: int  # <= 0: off
    t_max_prompt_ms: int  # <= 0: off
    response_fields: Optional[list] = None  # paths to answer with; None: all
    return_tokens: bool = False
    user: Optional[str] = None
    ignored: list = field(default_factory=list)  # fields given that change nothing (logged)


def _sampling(body: dict) -> dict:
    """SamplingParams keyword arguments from llama-server's sampling fields and defaults."""
    temp = get_field(body, "temperature", DEFAULTS["temperature"])
    top_k = get_field(body, "top_k", DEFAULTS["top_k"])
    seed = get_field(body, "seed", -1)
    kw = {"n": get_field(body, "n_cmpl", 1), "temperature": max(0.0, float(temp)),
          "top_k": top_k if top_k > 0 else -1, "top_p": get_field(body, "top_p", DEFAULTS["top_p"]),
          "min_p": get_field(body, "min_p", DEFAULTS["min_p"]), "seed": None if seed == -1 else seed,
          "repetition_penalty": get_field(body, "repeat_penalty", 1.0),
          "presence_penalty": get_field(body, "presence_penalty", 0.0),
          "frequency_penalty": get_field(body, "frequency_penalty", 0.0),
          "ignore_eos": get_field(body, "ignore_eos", False)}
    stop = get_field(body, "stop", [])
    stop = [s for s in ([stop] if isinstance(stop, str) else stop) if s]
    if stop:
        kw["stop"] = stop
    check_sampling(dict(kw, max_tokens=None))
    return kw


def parse_infill(body: dict, limits) -> InfillRequest:
    validate(infill_request_schema(limits), body)
    extra = [ExtraChunk(filename=get_field(c, "filename", "tmp"), text=get_field(c, "text", ""))
             for c in get_field(body, "input_extra", [])]
    return parse_llama_body(body, prefix=get_field(body, "input_prefix", ""), suffix=get_field(body, "input_suffix", ""),
                            typed=get_field(body, "prompt", ""), extra=extra)


def parse_llama_body(body: dict, prefix: str = "", suffix: str = "", typed: str = "", extra=()) -> InfillRequest:
    """The InfillRequest of a schema-checked body of llama-server's own routes (/infill and
    /completion share every field but the prompt's); 400 for a refused field."""
    for name, why in REFUSED.items():
        if body.get(name) is not None:
            raise bad_request(why, param=name, code="unsupported_parameter")
    n_predict = get_field(body, "n_predict", get_field(body, "max_tokens", -1))
    return InfillRequest(
        model=get_field(body, "model") or None, prefix=prefix, suffix=suffix, typed=typed, extra=list(extra),
        n_predict=None if n_predict < 0 else n_predict, sampling=_sampling(body),
        stream=get_field(body, "stream", False), n_indent=get_field(body, "n_indent", 0),
        t_max_predict_ms=get_field(body, "t_max_predict_ms", -1),
        t_max_prompt_ms=get_field(body, "t_max_prompt_ms", -1),
        response_fields=get_field(body, "response_fields"), return_tokens=get_field(body, "return_tokens", False),
        user=get_field(body, "user"),
        ignored=sorted(k for k in IGNORED if body.get(k) is not None))


def require_fim(tokenizer, param: str):
    """The tokenizer's FimCodec, or a 400 naming `param` when the model has no FIM tokens."""
    codec = fim_codec(tokenizer)
    if codec is None:
        raise bad_request("this model has no fill-in-the-middle tokens (<|fim_prefix|>, <|fim_suffix|>, "
                          "<|fim_middle|>); use a code model such as Qwen2.5-Coder", param=param,
                          code="fim_unsupported")
    return codec


def fim_prompt(codec, n_ctx: int, n_predict: Optional[int], prefix: str, suffix: str, typed: str = "",
               extra: tuple = (), param: str = "input_prefix") -> FimPrompt:
    """The FIM prompt fitted into the context minus the room the answer needs: n_predict
    tokens (one for n_predict 0), or UNLIMITED_RESERVE (at most a quarter of the context) when
    unlimited, and never more than half the context. 400 naming `param` when not even the
    typed text fits."""
    reserve = max(1, n_predict) if n_predict is not None else min(UNLIMITED_RESERVE, n_ctx // 4)
    reserve = max(1, min(reserve, n_ctx // 2))
    budget = n_ctx - reserve
    try:
        return build_fim_prompt(codec, prefix, suffix, typed, extra, budget=budget)
    except ValueError as e:
        raise bad_request(f"{e} (the context is {n_ctx} tokens, {reserve} kept for the answer)",
                          param="prompt" if typed else param, code="context_length_exceeded") from None


def answer_tokens(n_prompt: int, n_ctx: int, n_predict: Optional[int], cap: Optional[int]) -> int:
    """max_tokens to run with: n_predict (1 for a prompt-only request) clamped to the room
    left in the context and to the server's cap."""
    room = max(1, n_ctx - n_prompt)
    want = room if n_predict is None else max(1, n_predict)
    return max(1, min(want, room, cap or want))


def _state():
    return current_app.extensions["llaisys"]


def infill():
    """POST /infill (openai/routes.py registers it on the OpenAI blueprint)."""
    st = _state()
    req = parse_infill(st.read_json(), st.request_limits)
    served = st.registry.get(req.model)
    codec = require_fim(served.engine.tokenizer, "input_prefix")

    def make_prompt():
        prompt = fim_prompt(codec, served.max_model_len, req.n_predict, req.prefix, req.suffix, req.typed,
                            tuple(req.extra))
        stops = [] if req.sampling.get("ignore_eos") else list(codec.tokens.stop_ids)  # ignore_eos: every end token
        return prompt, None, stops

    return run_llama(st, served, req, "infill", make_prompt)


def run_llama(st, served, req: InfillRequest, kind: str, make_prompt) -> object:
    """Admit a request of llama-server's own routes, build its prompt (``make_prompt()`` ->
    (FimPrompt, its text or None, stop token ids); a 400 it raises releases the slot), start
    it and answer as llama-server does (run.InfillRun)."""
    owner = st.identity(req.user)
    g.log_fields.update(model=served.name, user=owner)
    gone = client_gone_check(request.environ)
    deadline = g.log_fields["t0"] + st.limits.request_timeout_s
    ticket = st.admission.acquire(owner, deadline, gone)
    try:
        prompt, text, stops = make_prompt()
        max_tokens = answer_tokens(len(prompt.token_ids), served.max_model_len, req.n_predict,
                                   st.request_limits.max_tokens_cap)
        sp = check_sampling(dict(req.sampling, max_tokens=max_tokens, stop_token_ids=stops))
        gen = Generation(served.engine, f"{kind}-{uuid.uuid4().hex}", owner, deadline, gone, st.cancels)
        g.log_fields["id"] = gen.response_id
        gen.start([(prompt.token_ids, text)], [sp])
    except BaseException:
        ticket.release()
        raise
    return InfillRun(st, served, req, gen, ticket, prompt, time.monotonic()).respond()


def completion_fim_prompts(prompts: list, suffix: str, tokenizer, n_ctx: int, max_tokens: Optional[int]) -> tuple:
    """/v1/completions with `suffix`: ([(FIM prompt ids, prompt text)], FIM stop ids), each
    text prompt the prefix; 400 naming `suffix` for a model without FIM tokens or a prompt of
    token ids."""
    codec = require_fim(tokenizer, "suffix")
    out = []
    for p in prompts:
        if not isinstance(p, str):
            raise bad_request("suffix needs text prompts, not token ids", param="suffix", code="unsupported_parameter")
        out.append((fim_prompt(codec, n_ctx, max_tokens, p, suffix, param="prompt").token_ids, p))
    return out, list(codec.tokens.stop_ids)
