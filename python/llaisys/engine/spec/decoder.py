"""SpecDecoder: picks which rows speculate and how far (adaptive k, the off-switch), asks the
proposer for drafts, and keeps the acceptance statistics.

Each step, before scheduling, every running request in the decode state (all known tokens but
the last are in the KV) that may speculate gets a draft budget k_r from the cost model
(cost.py): the j-th draft token of row r is expected to add alpha_r^j tokens (alpha_r: the
row's recent per-token acceptance, an exponential average), and costs b seconds of target step
(plus, with a draft model, db a row and round, and da per round however few rows draft: a
depth of K drafts costs K da). Draft tokens are granted in decreasing order of expected gain
while gain / cost beats the step's tokens per second without them, for each depth, and the
best depth kept; when none pays (a large batch whose step time grows with its tokens, a draft
round too dear for the rows that would share it), nobody speculates that step: the
off-switch. A row that did not speculate drifts back towards the prior, so it is tried again;
the prior is the proposer's recent acceptance over all rows (a guess until it has verified), so
on text where prompt lookup rarely matches a new or resting row is not assumed to do better.

The cost model decides only on what it has timed. Until the target's step time is known at two
step sizes (and, with a draft model, the draft's time per token), steps alternate between no
drafts and one probing row: a few steps, at start-up and again whenever the window of timed
steps has come to hold a single size. After PROBE_EVERY steps switched off, one row probes
(re-measuring its acceptance and the step's slope). A draft model must first compute a row's
unseen tokens (a new prompt): a row is granted drafts only when the saving expected over its
remaining output (at most REMAINING_CAP tokens) beats that one-time cost; a probe, only when
even the best case would.
"""

from __future__ import annotations

import heapq
import logging
import time
from dataclasses import dataclass

import numpy as np

from ...sampling_probs import sample_probs
from ..model_runner import row_sampling
from .config import SpeculativeConfig
from .cost import LinearCost
from .verify import verify_row

log = logging.getLogger(__name__)

EMA = 0.7  # weight of the past in a row's acceptance average
PRIOR_WEIGHT = 2.0  # pseudo-tokens of the prior
OVERALL_EMA = 0.95  # weight of the past in the proposer's acceptance over all rows (per verification)
ALPHA_MAX = 0.98  # the expected-gain formula needs alpha < 1
DRIFT = 0.05  # how far a row's average moves back to the prior per step it does not speculate
PROBE_EVERY = 16  # after this many steps switched off, one row speculates anyway (k <= 2) to re-measure
REMAINING_CAP = 256  # output tokens a request is assumed to have left at most (amortizing a draft catch-up)


@dataclass
class SpecRequestState:
    """A request's recent acceptance (per-token, exponentially averaged)."""

    accepted: float  # weighted accepted draft tokens
    judged: float  # weighted accepted + rejected draft tokens (tokens never judged are not counted)

    @property
    def alpha(self) -> float:
        return min(self.accepted / self.judged, ALPHA_MAX) if self.judged > 0 else 0.0


@dataclass
class SpecStats:
    """Speculative-decoding counters since start-up."""

    num_spec_steps: int = 0  # steps in which at least one row verified drafts
    num_off_steps: int = 0  # steps with rows able to speculate where the cost model granted none
    num_drafts: int = 0  # row verifications (a row verifying k >= 1 drafts in a step)
    num_draft_tokens: int = 0  # draft tokens verified
    num_accepted_tokens: int = 0  # draft tokens kept
    draft_seconds: float = 0.0  # time spent proposing

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per verification: 1 + accepted drafts per verification."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0


class SpecDecoder:
    def __init__(self, config: SpeculativeConfig, proposer, max_model_len: int):
        self.config = config
        self.proposer = proposer  # proposer.Proposer
        self.draft_cost = getattr(proposer, "cost", None)  # cost.DraftCost of a draft model; None: free
        self.max_model_len = max_model_len
        # the acceptance assumed for a new row, and the one rows drift back to: the proposer's own
        # recent acceptance over every row (starting from a guess per method)
        guess = 0.6 if config.method == "draft" else 0.5
        self._overall = SpecRequestState(guess * PRIOR_WEIGHT, PRIOR_WEIGHT)
        self.step_cost = LinearCost()  # the target's step time by tokens
        self.stats = SpecStats()
        self._off_streak = 0  # consecutive steps the cost model switched off
        self._explore_probe = False  # while unmeasured: whether this step probes (else no drafts)

    # ---- eligibility ---------------------------------------------------------------------
    def max_draft(self, req) -> int:
        """The most drafts the request may verify now (0: it does not speculate)."""
        sp = req.sampling_params
        if req.is_pooling or getattr(sp, "speculative", None) is False or _constrained(req):
            return 0
        if getattr(req, "prompt_embeds", None) is not None:  # proposers need the prompt's ids
            return 0
        if req.num_computed_tokens != req.num_tokens - 1:  # not decoding (prefill left, or resumed)
            return 0
        room = min(req.max_tokens - req.num_output_tokens - 1, self.max_model_len - req.num_tokens)
        return max(0, min(self.config.num_speculative_tokens, room))

    # ---- before the schedule -------------------------------------------------------------
    def prepare(self, running: list) -> None:
        """Set ``spec_token_ids`` / ``spec_probs`` of the running requests for this step."""
        for req in running:
            req.spec_token_ids, req.spec_probs = [], None
        cands = [(r, m) for r in running for m in (self.max_draft(r),) if m > 0]
        if not cands:
            return
        if not self.config.adaptive:
            ks = [m for _, m in cands]
        elif not self._measured():  # explore: alternate a step without drafts and a probing row
            self._explore_probe = not self._explore_probe
            ks = (self._probe(cands, self.config.num_speculative_tokens, len(running)) if self._explore_probe
                  else [0] * len(cands))
        else:
            ks = self._grant(cands, len(running))
            self._off_streak = 0 if any(ks) else self._off_streak + 1
            if self._off_streak >= PROBE_EVERY:  # the model only learns step sizes it sees: probe
                self._off_streak = 0
                ks = self._probe(cands, 2, len(running))
        chosen = [(r, k) for (r, _), k in zip(cands, ks) if k > 0]
        if log.isEnabledFor(logging.DEBUG):
            log.debug("spec step: rows=%d measured=%s step=%s draft=%s prior=%.3f granted=%s", len(running),
                      self._measured(), self.step_cost.coefficients(),
                      None if self.draft_cost is None else self.draft_cost.coefficients(), self.prior,
                      [k for k in ks if k])
        for (r, _), k in zip(cands, ks):
            st = self._state(r)
            if k == 0:  # not tried this step: drift back to the prior
                st.accepted += DRIFT * (self.prior * st.judged - st.accepted)
        if not chosen:
            self.stats.num_off_steps += 1
            return
        t0 = time.perf_counter()
        drafts = self.proposer.propose([r for r, _ in chosen], [k for _, k in chosen])
        self.stats.draft_seconds += time.perf_counter() - t0
        for (r, k), d in zip(chosen, drafts):
            r.spec_token_ids = list(d.token_ids[:k])
            r.spec_probs = None if d.probs is None else d.probs[:len(r.spec_token_ids)]

    @property
    def prior(self) -> float:
        """The acceptance a row is assumed to have before its own: the proposer's recent
        per-token acceptance over all rows (OVERALL_EMA per verification)."""
        return self._overall.alpha

    def _state(self, req) -> SpecRequestState:
        if req.spec_state is None:
            req.spec_state = SpecRequestState(self.prior * PRIOR_WEIGHT, PRIOR_WEIGHT)
        return req.spec_state

    def _measured(self) -> bool:
        return self.step_cost.measured and (self.draft_cost is None or self.draft_cost.measured)

    def _catchup(self, req) -> int:
        """Tokens the proposer must compute before the row's first draft (0 for the n-gram)."""
        f = getattr(self.proposer, "catchup_tokens", None)
        return 0 if f is None else f(req)

    def _probe(self, cands: list, k: int, n_rows: int) -> list:
        """One row speculates (at most k drafts): the one with the highest acceptance among
        those worth probing. A row the proposer must first catch up on (a new prompt in the draft
        model), once catch-ups have been timed, qualifies only if even the best case (its
        acceptance, the target's per-token cost taken as 0 while unmeasured) repays the catch-up
        over its remaining output. None if no row qualifies."""
        cost = self.draft_cost
        step = self.step_cost.time_at(n_rows)
        b = self.step_cost.coefficients()[1] if self.step_cost.measured else 0.0
        ok = []
        for i, (r, m) in enumerate(cands):
            if cost is None or cost.catchup_seconds(self._catchup(r)) <= 0:
                ok.append(i)
            elif step is not None and self._pays_catchup((r, m), self._state(r).alpha, b + cost.round_seconds(1),
                                                         step / n_rows):
                ok.append(i)
        ks = [0] * len(cands)
        if ok:
            i = max(ok, key=lambda i: self._state(cands[i][0]).alpha)
            ks[i] = min(cands[i][1], k)
        return ks

    def _grant(self, cands: list, n_rows: int) -> list:
        """Draft tokens per candidate row from the cost model (module docstring). A draft model's
        round costs a fixed da (its weight stream) plus db a row: drafting to depth K costs K da
        whoever drafts, then b + db a draft token. Each depth K is filled greedily and the best
        step rate kept (none: no drafts)."""
        a, b = self.step_cost.coefficients()
        da, db = self.draft_cost.coefficients() if self.draft_cost is not None else (0.0, 0.0)
        tokens, seconds = float(n_rows), a + b * n_rows
        alphas = [self._state(r).alpha for r, _ in cands]
        solo = b + da + db  # a draft token of a row drafting alone
        rows = [i for i, al in enumerate(alphas)
                if al > 0 and self._pays_catchup(cands[i], al, solo, seconds / tokens)]
        best, best_rate = [0] * len(cands), tokens / seconds
        deepest = max((cands[i][1] for i in rows), default=0)
        for depth in range(1 if da > 0 else deepest, deepest + 1):  # no fixed cost: the deepest holds the rest
            ks, t, s = self._fill(rows, cands, alphas, depth, b + db, tokens, seconds + depth * da)
            if any(ks) and t / s > best_rate:
                best, best_rate = ks, t / s
        return best

    @staticmethod
    def _fill(rows: list, cands: list, alphas: list, depth: int, per_token: float, tokens: float,
              seconds: float) -> tuple:
        """Greedy grant of at most `depth` drafts a row from a step of `tokens` in `seconds`:
        the j-th draft of row i adds alpha_i^j expected tokens for per_token seconds, granted in
        decreasing order of gain while it raises the step's tokens per second. (ks, tokens,
        seconds)."""
        heap = [(-alphas[i], i, 1) for i in rows]
        heapq.heapify(heap)
        ks = [0] * len(cands)
        while heap:
            g, i, j = heapq.heappop(heap)
            gain = -g
            if per_token > 0 and gain / per_token <= tokens / seconds:
                break
            ks[i] = j
            tokens += gain
            seconds += per_token
            if j < min(cands[i][1], depth):
                heapq.heappush(heap, (-(gain * alphas[i]), i, j + 1))
        return ks, tokens, seconds

    def _pays_catchup(self, cand: tuple, alpha: float, per_token: float, seconds_per_token: float) -> bool:
        """Whether the row's expected saving over its remaining output beats the proposer's
        one-time catch-up on it: speculating alone with j drafts, a step emits 1 + g tokens
        (g = alpha + ... + alpha^j), saving g * seconds_per_token - j * per_token seconds."""
        req, m = cand
        cost = self.draft_cost
        once = 0.0 if cost is None else cost.catchup_seconds(self._catchup(req))
        if once <= 0:
            return True
        remaining = min(req.max_tokens - req.num_output_tokens, REMAINING_CAP)
        best, g = 0.0, 0.0
        for j in range(1, m + 1):
            g += alpha ** j
            best = max(best, (g * seconds_per_token - j * per_token) * remaining / (1 + g))
        return best > once

    # ---- after the step ------------------------------------------------------------------
    def observe_step(self, n_tokens: int, n_rows: int, seconds: float) -> None:
        """Time of a step of n_tokens over n_rows; kept when it is decode-shaped (every row at
        most 1 + k tokens)."""
        if n_tokens <= n_rows * (1 + self.config.num_speculative_tokens):
            self.step_cost.observe(n_tokens, seconds)

    def on_verified(self, req, num_drafts: int, num_emitted: int) -> None:
        """Account one row's verification: num_drafts proposed, num_emitted tokens appended
        (accepted + 1, or fewer when a stop cut the row)."""
        accepted = max(0, min(num_drafts, num_emitted - 1))
        st = self._state(req)
        rejected = 1 if accepted < num_drafts else 0
        st.accepted = EMA * st.accepted + accepted
        st.judged = EMA * st.judged + accepted + rejected
        o = self._overall
        o.accepted = OVERALL_EMA * o.accepted + accepted
        o.judged = OVERALL_EMA * o.judged + accepted + rejected
        s = self.stats
        s.num_drafts += 1
        s.num_draft_tokens += num_drafts
        s.num_accepted_tokens += accepted

    def verifier(self, batch, result):
        """The per-row verify of unpack_result for one step's result: the target's processed
        distributions p of every sampled-draft row are computed here in one llaisysSampleProbs
        call; verify(req, target_ids [k + 1], logits) then gives the row's emitted tokens."""
        p_of = {}
        if batch.want_logits and result.logits is not None:
            rows, where = [], []
            offsets = batch.offsets
            for i, req in enumerate(batch.sample_requests):
                o = offsets[i]
                if req.spec_probs is not None and req.request_id in batch.spec and o < len(req.spec_token_ids):
                    rows.append(row_sampling(req, o, req.spec_token_ids))
                    where.append(i)
            if rows:
                p_all = sample_probs(result.logits[where], rows)  # [n_rows, vocab]
                for j, i in enumerate(where):
                    p_of.setdefault(batch.sample_requests[i].request_id, []).append(p_all[j])

        def verify(req, target_ids, logits) -> list:
            drafts, q = req.spec_token_ids, req.spec_probs
            p = p_of.get(req.request_id)
            return verify_row(drafts, q, target_ids, None if p is None else np.stack(p), req.seed,
                              req.num_output_tokens)

        return verify

    def account(self, out, sampled: dict) -> None:
        """Statistics and acceptance averages of the rows this step verified."""
        by_id = {r.request_id: r for r in out.scheduled}
        any_row = False
        for rid, drafts in out.spec_token_ids.items():
            tokens = sampled.get(rid)
            if tokens:
                self.on_verified(by_id[rid], len(drafts), len(tokens))
                any_row = True
        self.stats.num_spec_steps += any_row

    def drop(self, request_id: str) -> None:
        self.proposer.drop(request_id)

    def close(self) -> None:
        self.proposer.close()


def _constrained(req) -> bool:
    """Whether a structured-output constraint steers the request (such rows do not speculate:
    the drafts would need the constraint's state at every position)."""
    sp = req.sampling_params
    return getattr(sp, "structured", None) is not None or getattr(req, "structured", None) is not None
