"""The OpenAI routes and their helpers: chat and text completions, embeddings, tokenize /
detokenize, cancel, sessions.

Order inside a generation route: parse and type-check the body, pick the model (404), take
an admission slot (429 at once when full, before any tokenizing), then tokenize, resolve
max_tokens and hand the request to the engine.
"""

from __future__ import annotations

import base64
import time
import uuid

import numpy as np
from flask import Blueprint, current_app, g, jsonify, request

from ...engine.async_engine import EngineDeadError
from ..protocol.errors import APIError, bad_request, not_found, unavailable
from ..state.generation import Generation, client_gone_check
from ..infill.completion import completion as native_completion
from ..infill.routes import DEFAULTS as LLAMA_SERVER_DEFAULTS, completion_fim_prompts, infill
from ..protocol.parse import (check_body, check_sampling, get_field, parse_chat, parse_completion, parse_embeddings,
                              parse_messages, resolve_max_tokens)
from .chat_output import ChatSetup
from .completion_embeds import embeds_prompts, prompt_len
from .reasoning import opened_in_prompt, resolve_parser
from .respond import Run
from .tool_calls import check_tools, template_messages, with_tool_constraint
from ..state.sessions import SessionBusy, SessionStoreFull, SessionTooLarge

bp = Blueprint("openai", __name__)
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default max_tokens on /v1/completions (chat has none)


def state():
    return current_app.extensions["llaisys"]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _start(served, owner: str) -> tuple:
    """Take an admission slot for `owner` on `served`: (ticket, deadline, client_gone)."""
    st = state()
    g.log_fields.update(model=served.name, user=owner)
    gone = client_gone_check(request.environ)
    deadline = g.log_fields["t0"] + st.limits.request_timeout_s
    return st.admission.acquire(owner, deadline, gone), deadline, gone


def _sampling(req, n_prompt: int, served, param: str, default=None, **override):
    st = state()
    max_tokens = resolve_max_tokens(req.max_tokens, n_prompt, served.max_model_len, st.request_limits.max_tokens_cap,
                                    param, default)
    return check_sampling(dict(req.sampling, max_tokens=max_tokens, logprobs=req.logprobs, **override))


def output_overrides(req, setup) -> dict:
    """SamplingParams fields a chat request runs with other than it asked: stop strings are
    matched by the server on the answer when the reasoning is split off, and `<tool_call>`
    must reach the text (Qwen2.5's tokenizer marks it special) when tool calls are parsed."""
    kw = {}
    if setup.stops:
        kw["stop"] = None
    if setup.tools is not None and setup.tools.parse and "skip_special_tokens" not in req.sampling:
        kw["skip_special_tokens"] = False
    return kw


def chat_prompt(req, served, messages: list) -> tuple:
    """(prompt text, ChatSetup) of a chat request: the messages rendered by the model's own
    template (with the request's tools unless tool_choice is none), and how its output is
    read (the served reasoning parser, whether the prompt opened <think>, tools, and the stop
    strings matched on the answer when the reasoning is split off)."""
    tok = served.engine.tokenizer
    tools = req.tools
    try:
        text = tok.apply_chat_template(template_messages(messages), add_generation_prompt=req.add_generation_prompt,
                                       tools=tools.tools if tools is not None and tools.choice != "none" else None)
    except ValueError as e:
        raise bad_request(str(e), param="messages") from None
    parser = resolve_parser(state().reasoning_parser, tok.chat_template)
    setup = ChatSetup(parser, parser is not None and opened_in_prompt(text), tools)
    if parser is not None:
        setup.stops = list(req.sampling.get("stop") or [])
        setup.include_stop = bool(req.sampling.get("include_stop_str_in_output"))
        setup.min_tokens = int(req.sampling.get("min_tokens") or 0)
    return text, setup


def _begin_session(session_id: str, owner: str, messages: list, tenant: str) -> list:
    try:
        return state().sessions.begin_turn(session_id, owner, messages, tenant)
    except KeyError:
        raise not_found(f"session {session_id!r} does not exist", code="session_not_found",
                        param="session_id") from None
    except SessionBusy as e:
        raise APIError(409, str(e), code="session_busy", param="session_id") from None
    except SessionStoreFull as e:
        raise unavailable(str(e), code="sessions_full", retry_after=1) from None
    except SessionTooLarge as e:
        raise bad_request(str(e), param="messages", code="session_too_large") from None
    except ValueError as e:
        raise bad_request(str(e), param="session_id") from None


@bp.post("/v1/chat/completions")
def chat_completions():
    st = state()
    req = parse_chat(st.read_json(), st.request_limits)
    served = st.registry.get(req.model)
    owner = st.identity(req.user)
    ticket, deadline, gone = _start(served, owner)
    session = None
    try:
        messages = req.messages
        if req.session_id is not None:
            messages = _begin_session(req.session_id, owner, messages, st.tenant(req.user))
            session = (req.session_id, owner)
        text, setup = chat_prompt(req, served, messages)
        ids = served.engine.tokenizer.encode(text)
        sp = _sampling(req, len(ids), served, "messages", **output_overrides(req, setup))
        sp = with_tool_constraint(sp, req.tools)
        gen = Generation(served.engine, new_id("chatcmpl"), owner, deadline, gone, st.cancels)
        g.log_fields["id"] = gen.response_id
        gen.start([(ids, text)], [sp])
    except BaseException:
        ticket.release()
        if session is not None:
            st.sessions.end_turn(*session, None)
        raise
    return Run(st, served, req, gen, ticket, "chat", [""], session, setup).respond()


def _completion_prompts(req, tokenizer) -> list:
    """(token ids, text) per prompt; token-id prompts keep text None."""
    out = []
    for i, p in enumerate(req.prompts):
        if isinstance(p, str):
            out.append((tokenizer.encode(p, add_special_tokens=True), p))  # a BOS where the model has one
            if not out[-1][0]:
                raise bad_request(f"prompt {i} encodes to no tokens", param="prompt", code="empty_prompt")
        else:
            out.append((list(p), None))
    return out


@bp.post("/v1/completions")
def completions():
    st = state()
    req = parse_completion(st.read_json(), st.request_limits)
    served = st.registry.get(req.model)
    owner = st.identity(req.user)
    ticket, deadline, gone = _start(served, owner)
    try:
        tok = served.engine.tokenizer
        fim = {}
        if req.prompt_embeds is not None:
            prompts = embeds_prompts(req.prompt_embeds, getattr(served.engine, "hidden_size", None),
                                     served.max_model_len)
        elif req.suffix is None:
            prompts = _completion_prompts(req, tok)
        else:  # fill-in-the-middle: each prompt the prefix, in the model's FIM layout, ending at its FIM stops
            prompts, stops = completion_fim_prompts(req.prompts, req.suffix, tok, served.max_model_len,
                                                    req.max_tokens or COMPLETIONS_DEFAULT_MAX_TOKENS)
            if not req.sampling.get("ignore_eos"):
                fim["stop_token_ids"] = list(dict.fromkeys(list(req.sampling.get("stop_token_ids") or []) + stops))
        params = [_sampling(req, prompt_len(ids), served, "prompt", COMPLETIONS_DEFAULT_MAX_TOKENS, **fim)
                  for ids, _ in prompts]
        echo = [""] * len(prompts)
        if req.echo:
            try:
                echo = [text if text is not None else tok.decode(ids) for ids, text in prompts]
            except ValueError as e:
                raise bad_request(str(e), param="prompt") from None
        gen = Generation(served.engine, new_id("cmpl"), owner, deadline, gone, st.cancels)
        g.log_fields["id"] = gen.response_id
        gen.start(prompts, params)
    except BaseException:
        ticket.release()
        raise
    return Run(st, served, req, gen, ticket, "text", echo).respond()


bp.add_url_rule("/infill", "infill", infill, methods=["POST"])  # llama-server's code infill (infill/routes.py)
bp.add_url_rule("/completion", "completion", native_completion, methods=["POST"])  # llama-server's (infill/completion.py)


def _embedding_inputs(raw: list, tokenizer) -> list:
    """Token ids per input (strings encoded); 400 for an empty one or an id outside the vocabulary."""
    ids = [tokenizer.encode(x) if isinstance(x, str) else list(x) for x in raw]
    vocab = tokenizer.vocab_size
    for i, x in enumerate(ids):
        if not x:
            raise bad_request(f"input {i} is empty", param="input", code="empty_prompt")
        bad = [t for t in x if not 0 <= t < vocab]
        if bad:
            raise bad_request(f"input {i}: token id {bad[0]} is outside the vocabulary [0, {vocab})", param="input")
    return ids


@bp.post("/v1/embeddings")
def embeddings():
    from .embeddings import EmbeddingError, embed

    st = state()
    body = st.read_json()
    raw = parse_embeddings(body, st.request_limits)
    served = st.registry.get(get_field(body, "model"))
    fmt = get_field(body, "encoding_format", "float")
    owner = st.identity(get_field(body, "user"))
    ticket, deadline, gone = _start(served, owner)
    with ticket:
        inputs = _embedding_inputs(raw, served.engine.tokenizer)
        n_ctx = served.max_model_len
        for ids in inputs:
            if len(ids) > n_ctx:
                raise bad_request(f"input ({len(ids)} tokens) exceeds the model's context of {n_ctx} tokens",
                                  param="input", code="context_length_exceeded", n_prompt_tokens=len(ids), n_ctx=n_ctx)
        dims = get_field(body, "dimensions")
        try:
            vectors = embed(served.engine, inputs, timeout=max(0.1, deadline - time.monotonic()), client_gone=gone,
                            request_id=new_id("embd"))
        except TimeoutError:
            raise APIError(504, "embedding ran past the server's request timeout", code="request_timeout") from None
        except EngineDeadError as e:
            raise unavailable(str(e), code="engine_unavailable") from None
        except ValueError as e:
            raise bad_request(str(e), param="input") from None
        except EmbeddingError as e:
            raise APIError(500, str(e), code="engine_error") from None
        if dims is not None and dims != len(vectors[0]):
            raise bad_request(f"dimensions must be the model's hidden size ({len(vectors[0])})", param="dimensions",
                              code="unsupported_parameter")
    data = []
    for i, v in enumerate(vectors):
        v = np.asarray(v, dtype="<f4")
        emb = base64.b64encode(v.tobytes()).decode("ascii") if fmt == "base64" else v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    n = sum(len(x) for x in inputs)
    g.log_fields.update(prompt_tokens=n, completion_tokens=0)
    return jsonify({"object": "list", "data": data, "model": served.name,
                    "usage": {"prompt_tokens": n, "total_tokens": n}})


@bp.post("/tokenize")
def tokenize():
    st = state()
    body = st.read_json()
    prompt, messages = body.get("prompt"), body.get("messages")
    if (prompt is None) == (messages is None):
        raise bad_request("give exactly one of 'prompt' and 'messages'", param="prompt")
    check_body("TokenizeRequest", body, st.request_limits)
    served = st.registry.get(get_field(body, "model"))
    tok = served.engine.tokenizer
    if prompt is not None:
        ids = tok.encode(prompt, add_special_tokens=get_field(body, "add_special_tokens", False))
    else:
        if body.get("chat_template") is not None:
            raise bad_request("client-supplied chat templates are not accepted", param="chat_template",
                              code="unsupported_parameter")
        try:
            ids = tok.apply_chat_template(parse_messages(messages),
                                          add_generation_prompt=get_field(body, "add_generation_prompt", True),
                                          tokenize=True)
        except ValueError as e:
            raise bad_request(str(e), param="messages") from None
    return jsonify({"tokens": ids, "count": len(ids), "max_model_len": served.max_model_len})


@bp.post("/detokenize")
def detokenize():
    st = state()
    body = check_body("DetokenizeRequest", st.read_json(), st.request_limits)
    served = st.registry.get(get_field(body, "model"))
    tokens = body["tokens"]
    try:
        text = served.engine.tokenizer.decode(tokens)
    except ValueError as e:
        raise bad_request(str(e), param="tokens") from None
    return jsonify({"prompt": text})


@bp.post("/apply-template")
def apply_template():
    """llama-server's POST /apply-template: the prompt a chat request with these messages and
    tools would run, rendered by the model's own template; nothing is generated."""
    st = state()
    body = check_body("ApplyTemplateRequest", st.read_json(), st.request_limits)
    served = st.registry.get(get_field(body, "model"))
    tools = check_tools(get_field(body, "tools"), None, None)
    try:
        text = served.engine.tokenizer.apply_chat_template(
            template_messages(parse_messages(body["messages"])),
            add_generation_prompt=get_field(body, "add_generation_prompt", True),
            tools=tools.tools if tools is not None else None)
    except ValueError as e:
        raise bad_request(str(e), param="messages") from None
    return jsonify({"prompt": text})


@bp.get("/props")
def props():
    """llama-server's GET /props (read only): what a client needs to know of a served model
    (?model= picks one; the first by default): its context per request, its request slots,
    the chat template and special tokens, and the sampling defaults of llama-server's own
    routes (/infill here; the OpenAI routes take OpenAI's)."""
    from ... import __version__

    served = state().registry.get(request.args.get("model"))
    tok, cfg = served.engine.tokenizer, served.engine.config
    special = tok.special_tokens_map
    return jsonify({
        "model_alias": served.name, "model_path": str(served.llm.worker.path),
        "total_slots": cfg.max_num_seqs, "chat_template": tok.chat_template or "",
        "bos_token": special.get("bos_token", ""), "eos_token": special.get("eos_token", ""),
        "modalities": {"vision": False, "audio": False}, "build_info": f"llaisys {__version__}",
        "default_generation_settings": {"n_ctx": cfg.max_model_len, "params": {
            **LLAMA_SERVER_DEFAULTS, "n_predict": -1, "seed": -1 if cfg.seed is None else cfg.seed}},
    })


@bp.post("/v1/requests/<rid>/cancel")
def cancel(rid: str):
    st = state()
    owner = st.identity(request.args.get("user") or _optional_user())
    if not st.cancels.cancel(rid, owner):
        raise not_found(f"no running request {rid!r}", code="request_not_found")
    return jsonify({"id": rid, "object": "request.cancel", "cancelled": True})


def _optional_user():
    """The `user` of an optional JSON body (cancel and session routes)."""
    if not request.content_length:
        return None
    st = state()
    return get_field(check_body("UserBody", st.read_json(), st.request_limits), "user")


@bp.get("/v1/sessions/<sid>")
def get_session(sid: str):
    st = state()
    try:
        messages = st.sessions.get(sid, st.identity(request.args.get("user")))
    except KeyError:
        raise not_found(f"session {sid!r} does not exist", code="session_not_found") from None
    return jsonify({"id": sid, "object": "session", "messages": messages})


@bp.delete("/v1/sessions/<sid>")
def delete_session(sid: str):
    st = state()
    try:
        deleted = st.sessions.delete(sid, st.identity(request.args.get("user")))
    except SessionBusy as e:
        raise APIError(409, str(e), code="session_busy") from None
    if not deleted:
        raise not_found(f"session {sid!r} does not exist", code="session_not_found")
    return jsonify({"id": sid, "object": "session.deleted", "deleted": True})
