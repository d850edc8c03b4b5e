"""OutputProcessor: sampled tokens -> text, stop conditions, and RequestOutputs.

Per sequence it runs the incremental detokenizer, matches stop strings across token
boundaries (the text that might still become a stop string is held back, so a stop string
never leaks), and decides when the sequence ends:

    eos (unless ignore_eos) or a stop token id  -> FINISHED_STOPPED (the token's text is left
    a stop string                               -> FINISHED_STOPPED  out unless
                                                   include_stop_str_in_output)
    a structured-output grammar complete, with  -> FINISHED_STOPPED
    nothing allowed after it but eos
    a token the grammar refuses                 -> FINISHED_ERROR (the sampler's mask prevents it)
    max_tokens (resolved within max_model_len)  -> FINISHED_LENGTH
Nothing but the length stops a sequence before it has min_tokens tokens (stop tokens count
only after min_tokens others).

A pooling request has no text: its group gets one PoolingRequestOutput when it ends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Optional

from .detokenizer import IncrementalDetokenizer, find_stop, stop_prefix_len
from .outputs import CompletionOutput, PoolingOutput, PoolingRequestOutput, RequestOutput, Usage
from .request import Request, RequestStatus
from .structured_spec import StructuredOutputError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _SeqText:
    """Text state of one sequence."""

    detok: IncrementalDetokenizer
    text: str = ""  # text so far (stop string already cut)
    sent_chars: int = 0  # chars of text already handed out
    sent_tokens: int = 0  # output ids already handed out


@dataclass(eq=False)
class _Group:
    """The n sibling sequences of one user request."""

    request_id: str  # the caller's id
    prompt: Optional[str]
    prompt_token_ids: list
    seqs: list  # [Request] by completion index


class OutputProcessor:
    def __init__(self, decode: Callable):
        self.decode = decode  # decode(ids, skip_special_tokens=bool) -> str
        self._groups: dict = {}  # external id -> _Group
        self._texts: dict = {}  # req_id -> _SeqText

    def add_group(self, request_id: str, prompt: Optional[str], seqs: list) -> None:
        self._groups[request_id] = _Group(request_id, prompt, list(seqs[0].prompt_token_ids), list(seqs))
        if seqs[0].is_pooling:
            return  # no text to follow
        for req in seqs:
            sp = req.sampling_params
            self._texts[req.request_id] = _SeqText(IncrementalDetokenizer(self.decode, req.prompt_token_ids,
                                                                          sp.skip_special_tokens))

    def has_group(self, request_id: str) -> bool:
        return request_id in self._groups

    def group(self, request_id: str) -> list:
        """The sibling sequences of a user request (empty if unknown or already reported finished)."""
        g = self._groups.get(request_id)
        return g.seqs if g else []

    # ---- per token -----------------------------------------------------------------------
    def append_token(self, req: Request, token_id: int, logprobs: Optional[dict],
                     now: float) -> Optional[RequestStatus]:
        """Append a sampled token to the sequence; the finished status it reaches, or None."""
        req.append_output_token(token_id, logprobs)
        if req.times.first_token is None:
            req.times.first_token = now
        req.times.last_token = now
        if req.structured is not None:
            try:
                req.structured.advance(token_id)
            except StructuredOutputError as e:
                req.error, req.error_param = str(e), e.param
                return RequestStatus.FINISHED_ERROR
        sp, st = req.sampling_params, self._texts[req.request_id]
        # as in vLLM: a stop token counts only after min_tokens other tokens (the sampler bans
        # it until then, see Request.logit_bias_now); stop strings once min_tokens are out
        can_stop = req.num_output_tokens >= sp.min_tokens
        is_eos = not sp.ignore_eos and token_id in req.eos_token_ids
        if req.num_output_tokens > sp.min_tokens and (is_eos or token_id in sp.stop_token_ids):
            req.stop_reason = token_id if token_id in sp.stop_token_ids else None
            if sp.include_stop_str_in_output:
                st.text += st.detok.add(token_id)
            st.text += st.detok.flush()
            return RequestStatus.FINISHED_STOPPED
        new = st.detok.add(token_id)
        st.text += new
        if new and can_stop and sp.stop:
            hit = find_stop(st.text, len(new), sp.stop)
            if hit is not None:
                start, s = hit
                st.text = st.text[:start + len(s)] if sp.include_stop_str_in_output else st.text[:start]
                # holding back stop-string prefixes guarantees nothing past the cut was sent
                assert st.sent_chars <= len(st.text), "stop string leaked"
                req.stop_reason = s
                return RequestStatus.FINISHED_STOPPED
        if req.structured is not None and can_stop and req.structured.done:
            st.text += st.detok.flush()  # the grammar is complete: only eos could follow
            return RequestStatus.FINISHED_STOPPED
        if req.num_output_tokens >= req.max_tokens:
            st.text += st.detok.flush()
            return RequestStatus.FINISHED_LENGTH
        return None

    # ---- outputs -------------------------------------------------------------------------
    def make_outputs(self, reqs: list, on_error: Optional[Callable] = None) -> list:
        """One RequestOutput per user request that any of `reqs` belongs to, in first-seen
        order. A request's last output (finished=True) drops its state.

        If making one request's output raises, that request alone ends: ``on_error(seqs,
        message)`` is called (the engine finishes the unfinished ones with "error") and its
        final output carries what had been sent so far and the error; the others go on."""
        seen = {}
        for req in reqs:
            seen.setdefault(req.external_id, None)
        outs = []
        for gid in seen:
            g = self._groups.get(gid)
            if g is None:
                continue
            try:
                out = self._pooling_output(g) if g.seqs[0].is_pooling else self._group_output(g)
                if out is not None:  # None: a pooling request still running (it reports once)
                    outs.append(out)
            except Exception as e:
                log.exception("could not make the output of request %s", gid)
                message = f"{type(e).__name__}: {e}"
                if on_error is not None:
                    on_error(g.seqs, message)
                outs.append(self._failed_output(g, message))
        return outs

    def _visible(self, req: Request, st: _SeqText) -> int:
        """Chars of st.text that may be handed out now."""
        sp = req.sampling_params
        if req.is_finished:
            if req.status != RequestStatus.FINISHED_STOPPED:
                st.text += st.detok.flush()  # abort/error/length: nothing more is coming
            return len(st.text)
        if sp.stop and not sp.include_stop_str_in_output:
            return len(st.text) - stop_prefix_len(st.text, sp.stop)
        return len(st.text)

    def _completion(self, req: Request) -> CompletionOutput:
        st = self._texts[req.request_id]
        visible = max(self._visible(req, st), st.sent_chars)
        delta_text, delta_ids = st.text[st.sent_chars:visible], req.output_token_ids[st.sent_tokens:]
        st.sent_chars, st.sent_tokens = visible, req.num_output_tokens
        return CompletionOutput(index=req.index, text=st.text[:visible], token_ids=list(req.output_token_ids),
                                delta_text=delta_text, delta_token_ids=list(delta_ids),
                                logprobs=list(req.logprobs) if req.logprobs is not None else None,
                                finish_reason=req.status.finish_reason, stop_reason=req.stop_reason)

    def _pooling_output(self, g: _Group, error: Optional[str] = None) -> Optional[PoolingRequestOutput]:
        """The final output of a finished pooling request (drops its state); None while it runs."""
        req = g.seqs[0]
        if not req.is_finished and error is None:
            return None
        del self._groups[g.request_id]
        reason = req.status.finish_reason if error is None and req.is_finished else "error"
        vec = PoolingOutput(req.embedding) if reason == "stop" and req.embedding is not None else None
        return PoolingRequestOutput(request_id=g.request_id, prompt=g.prompt, prompt_token_ids=g.prompt_token_ids,
                                    outputs=vec, finished=True, finish_reason=reason,
                                    usage=Usage(prompt_tokens=len(g.prompt_token_ids), completion_tokens=0,
                                                cached_tokens=0),
                                    metrics=replace(req.times), error=error or req.error)

    def _failed_output(self, g: _Group, error: str):
        """The final output of a group whose output could not be made: only what was already
        sent, no decoding; drops the group's state."""
        if g.seqs[0].is_pooling:
            return self._pooling_output(g, error)
        outputs = []
        for r in g.seqs:
            st = self._texts.get(r.request_id)
            sent_chars = st.sent_chars if st else 0
            text = st.text[:sent_chars] if st else ""
            ids = list(r.output_token_ids)
            reason = r.status.finish_reason if r.is_finished else "error"
            outputs.append(CompletionOutput(index=r.index, text=text, token_ids=ids, delta_text="",
                                            delta_token_ids=ids[st.sent_tokens if st else 0:],
                                            logprobs=list(r.logprobs) if r.logprobs is not None else None,
                                            finish_reason=reason, stop_reason=r.stop_reason))
        del self._groups[g.request_id]
        for r in g.seqs:
            self._texts.pop(r.request_id, None)
        lead = g.seqs[0]
        usage = Usage(prompt_tokens=len(g.prompt_token_ids), completion_tokens=sum(r.num_output_tokens for r in g.seqs),
                      cached_tokens=max(lead.num_cached_tokens, 0))
        return RequestOutput(request_id=g.request_id, prompt=g.prompt, prompt_token_ids=g.prompt_token_ids,
                             outputs=outputs, finished=True, usage=usage, metrics=replace(lead.times), error=error)

    def _group_output(self, g: _Group) -> RequestOutput:
        outputs = [self._completion(r) for r in g.seqs]
        finished = all(r.is_finished for r in g.seqs)
        lead = g.seqs[0]
        usage = Usage(prompt_tokens=len(g.prompt_token_ids),
                      completion_tokens=sum(r.num_output_tokens for r in g.seqs),
                      cached_tokens=max(lead.num_cached_tokens, 0))
        failed = next((r for r in g.seqs if r.error), None)
        if finished:
            del self._groups[g.request_id]
            for r in g.seqs:
                del self._texts[r.request_id]
        return RequestOutput(request_id=g.request_id, prompt=g.prompt, prompt_token_ids=g.prompt_token_ids,
                             outputs=outputs, finished=finished, usage=usage, metrics=replace(lead.times),
                             error=failed and failed.error, error_param=failed and failed.error_param)
