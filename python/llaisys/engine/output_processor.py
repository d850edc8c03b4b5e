"""OutputProcessor: the text side of every request, after the scheduler has applied a step.

The scheduler appends sampled tokens and ends requests on token-level stops (eos, stop ids,
a complete grammar, max_tokens: Request.append_token). Here, per sequence, the new tokens
run through the incremental detokenizer and stop strings are matched across token
boundaries (the text that might still become a stop string is held back, so a stop string
never leaks). ``process`` returns the requests a stop string ends, which the engine finishes
(FINISHED_STOPPED, the string as stop_reason, the text cut before it unless
include_stop_str_in_output); a stop string counts once min_tokens tokens are out. Then
``make_outputs`` turns the changed requests into RequestOutputs (text deltas, logprobs).

A pooling request has no text: its group gets one PoolingRequestOutput when it ends.
"""

from __future__ import annotations

import logging
import copy
from dataclasses import dataclass
from typing import Callable, Optional

from .detokenizer import IncrementalDetokenizer, MemoDecode
from .outputs import CompletionOutput, PoolingOutput, PoolingRequestOutput, RequestOutput, Usage
from .request import Request, RequestStatus

log = logging.getLogger(__name__)


class StopMatcher:
    """Stop strings over a text that grows: the one matcher of the engine and the server.

    The OutputProcessor asks ``find`` for the earliest stop string that ends in a step's new
    characters (one that straddles tokens is found when its last character arrives) and
    ``held_back`` for the characters that could still begin one (never handed out before they
    are known not to). The server matches on the answer alone when the reasoning is split off
    (server/openai/chat_output.py): it ``feed``s the pieces of a stream, built on the same two."""

    def __init__(self, stops, include: bool = False):
        self.stops = [s for s in stops if s]
        self.include = include  # keep the matched stop string in the text
        self.longest = max((len(s) for s in self.stops), default=0)
        self._held = ""  # feed: text not released yet
        self.matched = False  # feed: a stop string matched (nothing more is released)
        self.matched_stop = None  # the stop string that matched (Anthropic's stop_sequence)

    def find(self, text: str, num_new_chars: int) -> Optional[tuple]:
        """The earliest stop string that ends in the last num_new_chars of text, as (start, stop);
        at one start, the first one listed."""
        lo = max(0, len(text) - num_new_chars - self.longest + 1)
        best = None
        for s in self.stops:
            i = text.find(s, lo)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        return best

    def held_back(self, text: str) -> int:
        """Length of the longest suffix of text that begins some stop string: held back from the
        user until it is known not to become a stop string."""
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:k]):
                    best = k
                    break
        return best

    def feed(self, text: str, final: bool, can_stop: bool = True) -> str:
        """The text that can be released now, of a stream fed piece by piece. can_stop False
        (min_tokens not yet out): nothing matches, what could begin a stop string is still held
        back. After a match nothing more is released."""
        if not self.stops or self.matched:
            return "" if self.matched else text
        buf = self._held + text
        hit = self.find(buf, len(buf)) if can_stop else None
        if hit is not None:
            i, s = hit
            self.matched, self.matched_stop, self._held = True, s, ""
            return buf[:i + (len(s) if self.include else 0)]
        keep = 0 if final else self.held_back(buf)
        self._held = buf[len(buf) - keep:]
        return buf[:len(buf) - keep]


@dataclass(eq=False)
class _SeqText:
    """Text state of one sequence."""

    detok: IncrementalDetokenizer
    stop: Optional[StopMatcher]  # its stop strings (None: it has none)
    text: str = ""  # text so far (stop string already cut)
    sent_chars: int = 0  # chars of text already handed out
    sent_tokens: int = 0  # output ids already handed out
    seen: int = 0  # output ids already detokenized


@dataclass(eq=False)
class _Group:
    """The n sibling sequences of one user request."""

    request_id: str  # the caller's id
    prompt: Optional[str]
    prompt_token_ids: list  # [] for a prompt given as embeddings (its ids are unknown)
    seqs: list  # [Request] by completion index
    final_only: bool = False  # only its final output is wanted (LLM.generate): no per-step outputs


_FINISHED = RequestStatus.FINISHED_STOPPED  # statuses from here on are finished (RequestStatus.is_finished)


def _running(seqs: list) -> bool:
    """Whether any of the sequences is unfinished."""
    for r in seqs:
        if r.status < _FINISHED:
            return True
    return False


class OutputProcessor:
    def __init__(self, decode: Callable, concatenates: bool = False):
        # decode(ids, skip_special_tokens=bool) -> str; one-token decodes memoised, and read
        # directly where the decoder concatenates (detokenizer.MemoDecode)
        self.decode = MemoDecode(decode, concatenates)
        self._groups: dict = {}  # external id -> _Group
        self._texts: dict = {}  # req_id -> _SeqText

    def add_group(self, request_id: str, prompt: Optional[str], seqs: list, final_only: bool = False) -> None:
        ids = [] if seqs[0].prompt_embeds is not None else list(seqs[0].prompt_token_ids)
        self._groups[request_id] = _Group(request_id, prompt, ids, list(seqs), final_only)
        if seqs[0].is_pooling:
            return  # no text to follow
        for req in seqs:
            sp = req.sampling_params
            self._texts[req.request_id] = _SeqText(IncrementalDetokenizer(self.decode, ids, sp.skip_special_tokens),
                                                   StopMatcher(sp.stop) if sp.stop else None)

    def has_group(self, request_id: str) -> bool:
        return request_id in self._groups

    def group(self, request_id: str) -> list:
        """The sibling sequences of a user request (empty if unknown or already reported finished)."""
        g = self._groups.get(request_id)
        return g.seqs if g else []

    # ---- per step -----------------------------------------------------------------------
    def process(self, reqs: list) -> list:
        """Detokenize the output tokens `reqs` got this step and match stop strings; the
        requests to finish, as (Request, RequestStatus, error or None): a stop string
        (FINISHED_STOPPED; its output is cut after the token that completed it), or the
        text could not be made (FINISHED_ERROR). A request the scheduler already finished
        (length, a grammar's end) may still end on a stop string, which then is its reason."""
        finishes = []
        texts = self._texts
        for req in reqs:
            st = texts.get(req.request_id)
            if st is None or req.pooling_params is not None:
                continue
            try:
                ids = req.output_token_ids
                if len(ids) == st.seen + 1 and req.status < _FINISHED and not req.sampling_params.stop:
                    # one new token of a running request with no stop strings (a decode step):
                    # _consume's loop with nothing to match or flush
                    st.seen += 1
                    new = st.detok.add(ids[-1])
                    if new:
                        st.text += new
                elif self._consume(req, st):
                    finishes.append((req, RequestStatus.FINISHED_STOPPED, None))
            except Exception as e:  # this request's text broke: it alone ends, with "error"
                log.exception("request %s failed after the step", req.request_id)
                finishes.append((req, RequestStatus.FINISHED_ERROR, f"{type(e).__name__}: {e}"))
        return finishes

    def _consume(self, req: Request, st: _SeqText) -> bool:
        """Run the request's unseen output tokens through its detokenizer; True if a stop
        string ended it (req.stop_reason is the string)."""
        sp, ids = req.sampling_params, req.output_token_ids
        n = len(ids)
        for i in range(st.seen, n):
            st.seen = i + 1
            # the eos / stop id that ended it, or a token the grammar refused (never shown)
            if i + 1 == n and (req.stopped_by_token or req.status == RequestStatus.FINISHED_ERROR):
                if req.stopped_by_token and sp.include_stop_str_in_output:
                    st.text += st.detok.add(ids[i])
                break
            new = st.detok.add(ids[i])
            st.text += new
            if new and sp.stop and i + 1 >= sp.min_tokens:
                hit = st.stop.find(st.text, len(new))
                if hit is not None:
                    start, s = hit
                    st.text = st.text[:start + len(s)] if sp.include_stop_str_in_output else st.text[:start]
                    # holding back stop-string prefixes guarantees nothing past the cut was sent
                    assert st.sent_chars <= len(st.text), "stop string leaked"
                    req.stop_reason, req.stopped_by_token = s, False
                    req.truncate_output(i + 1)
                    return True
        if req.status >= _FINISHED:
            st.text += st.detok.flush()  # nothing more is coming
        return False

    # ---- outputs -------------------------------------------------------------------------
    def make_outputs(self, reqs: list, on_error: Optional[Callable] = None) -> list:
        """One RequestOutput per user request that any of `reqs` belongs to, in first-seen
        order. A request's last output (finished=True) drops its state.

        If making one request's output raises, that request alone ends: ``on_error(seqs,
        message)`` is called (the engine finishes the unfinished ones with "error") and its
        final output carries what had been sent so far and the error; the others go on."""
        outs = []
        for gid in dict.fromkeys([req.external_id for req in reqs]):  # first-seen order
            g = self._groups.get(gid)
            if g is None or g.final_only and _running(g.seqs):
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
            return len(st.text) - st.stop.held_back(st.text)
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
                                    usage=Usage(prompt_tokens=g.seqs[0].num_prompt_tokens, completion_tokens=0,
                                                cached_tokens=0),
                                    metrics=copy.copy(req.times), error=error or req.error)

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
        usage = Usage(prompt_tokens=lead.num_prompt_tokens, completion_tokens=sum(r.num_output_tokens for r in g.seqs),
                      cached_tokens=max(lead.num_cached_tokens, 0))
        return RequestOutput(request_id=g.request_id, prompt=g.prompt, prompt_token_ids=g.prompt_token_ids,
                             outputs=outputs, finished=True, usage=usage, metrics=copy.copy(lead.times), error=error)

    def _group_output(self, g: _Group) -> RequestOutput:
        outputs = [self._completion(r) for r in g.seqs]
        finished = all(r.is_finished for r in g.seqs)
        lead = g.seqs[0]
        usage = Usage(prompt_tokens=g.seqs[0].num_prompt_tokens,
                      completion_tokens=sum(r.num_output_tokens for r in g.seqs),
                      cached_tokens=max(lead.num_cached_tokens, 0))
        failed = next((r for r in g.seqs if r.error), None)
        if finished:
            del self._groups[g.request_id]
            for r in g.seqs:
                del self._texts[r.request_id]
        return RequestOutput(request_id=g.request_id, prompt=g.prompt, prompt_token_ids=g.prompt_token_ids,
                             outputs=outputs, finished=finished, usage=usage, metrics=copy.copy(lead.times),
                             error=failed and failed.error, error_param=failed and failed.error_param)
