"""SchedulerOutput: what one step computes, and what the runner learns of each request.

The runner keeps each request's state between steps (input_batch.InputBatch), so the
scheduler sends each request whole only once, as vLLM v1 does ("we cache the request's data
in each worker process, so that we don't need to re-send it every scheduling step"):

- ``new_reqs``: requests the runner has never seen: their prompt ids and their block table;
- ``cached_reqs``: requests it holds, as what changed since it last saw them: the tokens
  sampled since, the block ids added (or, after a preemption, the whole new table);
- ``finished_req_ids``: requests gone since the previous step, sent once: the runner drops
  their state. A preempted request keeps its runner state (its tokens); it comes back as a
  cached request with ``resumed`` set and a fresh block table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class NewRequestData:
    """A request the runner has not seen: everything it keeps of it."""

    req_id: str
    request: object  # the Request: sampling parameters, seed, grammar, read by the sampler rows only
    token_ids: list  # [n_known] its known ids (the prompt; prompt + output if it was ever preempted)
    block_ids: list  # BLOCK: its whole block table; SLOT: []
    seq_id: Optional[int]  # SLOT: the core's seq id of its cells; BLOCK: None


@dataclass
class CachedRequestData:
    """Requests the runner already holds, as deltas, one list entry per request."""

    req_ids: list = field(default_factory=list)  # [n] ids
    resumed: list = field(default_factory=list)  # [n] bool: back from preemption (its table was freed)
    new_token_ids: list = field(default_factory=list)  # [n] [ids] appended since the runner last saw it
    num_kept_blocks: list = field(default_factory=list)  # [n] entries of the runner's table still valid
    #   (0 after a preemption; fewer than before when rejected drafts gave blocks back)
    new_block_ids: list = field(default_factory=list)  # [n] [block ids] appended after those
    seq_ids: list = field(default_factory=list)  # [n] SLOT: its seq id now (None for BLOCK)

    def add(self, req_id: str, resumed: bool, new_token_ids: list, num_kept_blocks: int, new_block_ids: list,
            seq_id: Optional[int]) -> None:
        self.req_ids.append(req_id)
        self.resumed.append(resumed)
        self.new_token_ids.append(new_token_ids)
        self.num_kept_blocks.append(num_kept_blocks)
        self.new_block_ids.append(new_block_ids)
        self.seq_ids.append(seq_id)


@dataclass
class SchedulerOutput:
    """What one step computes."""

    scheduled: list = field(default_factory=list)  # [Request] the batch's rows, in order
    num_scheduled_tokens: dict = field(default_factory=dict)  # req_id -> tokens to compute now
    num_computed_tokens: dict = field(default_factory=dict)  # req_id -> tokens already in KV (the chunk starts here)
    sample_req_ids: set = field(default_factory=set)  # req_ids whose chunk ends at their last known token: sample one
    pooling_req_ids: set = field(default_factory=set)  # pooling req_ids: every scheduled token's hidden state is wanted
    new_req_ids: list = field(default_factory=list)  # admitted for the first time this step
    resumed_req_ids: list = field(default_factory=list)  # readmitted after preemption (recompute prompt + output)
    preempted_req_ids: list = field(default_factory=list)  # preempted by this schedule(); blocks already free
    finished_req_ids: set = field(default_factory=set)  # finished/aborted since the last schedule(): drop their state
    free_seq_ids: list = field(default_factory=list)  # SLOT: seq ids freed since the last schedule(); seq_rm them first
    total_num_scheduled_tokens: int = 0  # sum of num_scheduled_tokens
    spec_token_ids: dict = field(default_factory=dict)  # req_id -> drafts verified this step (their
    #   tokens are the last len(drafts) of num_scheduled_tokens; the row samples each of them too)
    trims: list = field(default_factory=list)  # SLOT: (seq id, position) cells to drop first (rejected drafts)
    # async scheduling: rows whose first token is the one the step in flight samples (the runner
    # takes it from that step's result; scheduler.py)
    deferred_req_ids: set = field(default_factory=set)
    # the runner's deltas (module docstring)
    new_reqs: list = field(default_factory=list)  # [NewRequestData] rows the runner has not seen
    cached_reqs: CachedRequestData = field(default_factory=CachedRequestData)  # rows it holds, as deltas
