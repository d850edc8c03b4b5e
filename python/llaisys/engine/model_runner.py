"""CoreModelRunner: executes one StepInput with one call into the core (llaisysQwen2ModelStep)."""

from __future__ import annotations

import numpy as np

from ..kv_cache import KVCache
from ..models.qwen2 import Qwen2Model, RowSampling
from .executor import empty_result
from .request import Request
from .step_input import StepInput, StepResult


def row_sampling(req: Request) -> RowSampling:
    """The core's sampling parameters for the next draw of `req`."""
    sp = req.sampling_params
    penalties = sp.repetition_penalty != 1.0 or sp.presence_penalty != 0.0 or sp.frequency_penalty != 0.0
    return RowSampling(
        temperature=sp.temperature, top_k=max(sp.top_k, 0), top_p=sp.top_p, min_p=sp.min_p,
        repetition_penalty=sp.repetition_penalty, presence_penalty=sp.presence_penalty,
        frequency_penalty=sp.frequency_penalty, seed=req.seed, step=req.num_output_tokens,
        n_logprobs=sp.logprobs or 0,
        prompt_tokens=np.asarray(req.prompt_token_ids, np.int64) if penalties else None,
        output_tokens=np.asarray(req.output_token_ids, np.int64) if penalties else None,
        logit_bias=req.logit_bias_now() or None)


class CoreModelRunner:
    """Owns nothing but references: the Worker owns the model and the cache."""

    def __init__(self, model: Qwen2Model, cache: KVCache):
        self.model = model
        self.cache = cache

    @property
    def vocab_size(self) -> int:
        """The logits width: rows of the lm_head (config vocab_size), the bound the core checks
        every token id against. It may exceed the tokenizer's vocabulary (padding rows)."""
        return int(self.model.config.vocab_size)

    def execute(self, batch: StepInput) -> StepResult:
        if batch.kv_layout == "slot":
            for seq in batch.free_seq_ids:
                self.cache.seq_rm(int(seq))
            if batch.rewind:  # a failed attempt may have placed these rows' cells already
                starts = batch.positions[batch.query_start[:-1]]
                for seq, p0 in zip(batch.seq_ids.tolist(), starts.tolist()):
                    self.cache.seq_rm(int(seq), int(p0), -1)
        if batch.n_tokens == 0:
            return empty_result()
        rows = [row_sampling(r) for r in batch.sample_requests]
        top = max((r.n_logprobs for r in rows), default=0)
        layout = dict(slot_mapping=batch.slot_mapping, block_tables=batch.block_tables,
                      context_lens=batch.context_lens) if batch.kv_layout == "block" else dict(seq_ids=batch.seq_ids)
        wants_logprobs = any(r.sampling_params.logprobs is not None for r in batch.sample_requests)
        res = self.model.step(self.cache, token_ids=batch.token_ids, positions=batch.positions,
                              query_start=batch.query_start, sample_rows=batch.sample_rows, sampling=rows,
                              top_capacity=top, want_logprobs=wants_logprobs, **layout)
        if res is None:  # the scheduler's accounting should make this impossible
            raise RuntimeError("the KV cache ran out of cells for a step the scheduler admitted")
        return StepResult(sampled_token_ids=res.token_ids, logprobs=res.logprobs,
                          top_token_ids=res.top_ids, top_logprobs=res.top_logprobs)
