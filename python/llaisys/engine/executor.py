"""The runner seam: what the engine asks of whatever computes a step.

The engine never touches the core; its StepRunner (step_runner.py) hands a ModelRunner one
StepInput per step. The real runner (weights, KV cache, one llaisysModelStep call) lives
beside the model; tests use a fake. Multi-device execution would plug in here, behind the same method.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .step_input import StepInput, StepResult


@runtime_checkable
class ModelRunner(Protocol):
    """Computes steps. The contract:

    - ``execute`` is called once per engine step, from one thread, in step order.
    - First it forgets ``batch.free_seq_ids`` (SLOT: seq_rm(seq, 0, -1) each) and may drop
      any per-request state of ``batch.finished_req_ids``. A batch may have no tokens (only
      frees): then it returns an empty result without calling the core (which rejects empty
      batches).
    - BLOCK layout: it writes the K/V of token t at ``slot_mapping[t]`` and lets row s attend
      to the first ``context_lens[s]`` slots named by ``block_tables[s]``; blocks another row
      shares hold K/V already computed by an earlier step. SLOT layout: row s is seq
      ``seq_ids[s]``; the core finds the cells.
    - For each sample row i it samples with ``batch.sample_requests[i]``: its sampling_params
      (temperature, top_k, top_p, min_p, penalties, logprobs count), ``seed``,
      step = ``num_output_tokens``, its prompt and output ids for penalties, and
      ``logit_bias_now()`` (min_tokens is enforced through it).
    - It returns ``StepResult`` (models/step_io.py) with ``token_ids`` [n_sample], and ``logprobs`` /
      ``top_*`` when any sample request asked for logprobs.
    - Pooling rows (``batch.pooling``) sample nothing: it returns ``hidden`` [n_hidden, H],
      the final normed hidden state of each token of ``batch.hidden_rows``, from the same
      single call that samples the other rows.
    - It raises on failure. The StepRunner then finds the rows that fail (StepRunner._isolate):
      it calls ``execute`` again on sub-batches (``step_input.select_rows``) of the same
      step, marked ``batch.rewind``, finishes the failing rows with "error" and keeps the
      results of the others. A retry must therefore be idempotent: the same tokens, written
      again to the same slots (BLOCK), or to fresh cells after dropping each row's cells from
      its first position on (SLOT, ``rewind``), sampled with the same (seed, step), give the
      same result. Nothing the runner keeps may advance on a failed call.
    - An exception whose ``fatal`` attribute is true (llaisys.DeviceLostError: a sticky CUDA
      error left the device unusable) is never retried: the engine ends every request with
      "error" and closes (LLMEngine.step); the runner is not called again.
    - Optionally it has ``vocab_size``, the logits width (lm_head rows): LLMEngine checks
      every token id a request carries (prompt, logit_bias, stop_token_ids) against it at
      admission. Without it the tokenizer's vocabulary is the bound.
    """

    def execute(self, batch: StepInput) -> StepResult: ...


def empty_result() -> StepResult:
    """The result of a batch with nothing to sample."""
    return StepResult(token_ids=np.zeros(0, np.int64))
