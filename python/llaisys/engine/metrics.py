"""Engine metrics: gauges, counters and latency samples (the server renders /metrics from them)."""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from .kv_cache_manager import PrefixCacheStats
from .request import Request

MAX_SAMPLES = 10000  # latency samples kept per series (the most recent)


def _samples() -> deque:
    return deque(maxlen=MAX_SAMPLES)


@dataclass
class EngineMetrics:
    # gauges, refreshed every step
    num_running: int = 0  # sequences holding KV
    num_waiting: int = 0  # sequences queued (preempted ones included)
    num_preempted_waiting: int = 0  # queued sequences that were preempted
    kv_usage: float = 0.0  # fraction of KV blocks held by sequences
    num_free_blocks: int = 0  # blocks held by no sequence (cached ones included)
    num_cached_blocks: int = 0  # blocks in the prefix cache
    # counters since start-up
    num_steps: int = 0  # steps that computed tokens
    prompt_tokens_total: int = 0  # prompt tokens of admitted sequences (counted once each)
    generation_tokens_total: int = 0  # output tokens sampled
    computed_tokens_total: int = 0  # tokens computed by steps (prefix hits excluded, recompute included)
    num_preemptions_total: int = 0  # preemptions
    finished_total: dict = field(default_factory=dict)  # finish_reason -> finished sequences (pooling included)
    pooling_finished_total: dict = field(default_factory=dict)  # finish_reason -> finished pooling requests
    pooled_tokens_total: int = 0  # prompt tokens of pooling requests that finished with a vector
    prefix_cache: PrefixCacheStats = field(default_factory=PrefixCacheStats)  # the KV manager's counters
    spec: Optional[object] = None  # spec.SpecStats: speculative decoding counters (None: not speculating)
    prompt_cache_disk: Optional[object] = None  # prompt_cache.DiskCacheStats (None: no prompt_cache_dir)
    cache_reuse: Optional[object] = None  # cache_reuse.ReuseStats (None: cache_reuse off)
    # the runner's memory (models.model.ModelStatsInfo: weight, workspace, scratch bytes), read by
    # AsyncEngine with each refresh; None: not read yet, or the runner reports none (a test's fake)
    memory: Optional[object] = None
    # latency samples in seconds, most recent MAX_SAMPLES
    ttft: deque = field(default_factory=_samples)  # arrival -> first token
    tpot: deque = field(default_factory=_samples)  # mean time per output token after the first
    e2e: deque = field(default_factory=_samples)  # arrival -> finished
    queue_time: deque = field(default_factory=_samples)  # arrival -> first scheduled

    def copy(self, samples: bool = True) -> "EngineMetrics":
        """An independent copy. The sample deques are copied at C speed, but that is still 126 us
        once they are full (4 x MAX_SAMPLES floats); ``samples=False`` leaves them empty."""
        m = copy.copy(self)
        m.finished_total = dict(self.finished_total)
        m.pooling_finished_total = dict(self.pooling_finished_total)
        m.prefix_cache = copy.copy(self.prefix_cache)
        m.spec = copy.copy(self.spec)
        m.prompt_cache_disk = copy.copy(self.prompt_cache_disk)
        m.cache_reuse = copy.copy(self.cache_reuse)
        for name in ("ttft", "tpot", "e2e", "queue_time"):
            setattr(m, name, deque(getattr(self, name) if samples else (), maxlen=MAX_SAMPLES))
        return m

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache.hit_rate

    def update(self, scheduler, out, num_sampled: int, finished: list) -> None:
        """Account one step: its scheduler output, the tokens it sampled, the sequences that finished."""
        kv = scheduler.kv
        self.num_running, self.num_waiting = len(scheduler.running), len(scheduler.waiting)
        self.num_preempted_waiting = scheduler.num_preempted_waiting
        self.kv_usage, self.num_free_blocks, self.num_cached_blocks = kv.usage, kv.num_free_blocks, kv.num_cached_blocks
        self.num_preemptions_total = scheduler.num_preemptions
        self.prefix_cache = kv.stats
        if getattr(kv, "tier", None) is not None:
            self.prompt_cache_disk = kv.tier.stats
        if getattr(kv, "reuse", None) is not None:
            self.cache_reuse = kv.reuse.stats
        spec = getattr(scheduler, "spec_stats", None)
        if spec is not None:
            self.spec = spec
        if out is not None and out.total_num_scheduled_tokens:
            self.num_steps += 1
            self.computed_tokens_total += out.total_num_scheduled_tokens
            if out.new_req_ids:
                self.prompt_tokens_total += sum(r.num_prompt_tokens for r in out.scheduled
                                                if r.request_id in out.new_req_ids)
        self.generation_tokens_total += num_sampled
        for req in finished:
            self._on_finished(req)

    def _on_finished(self, req: Request) -> None:
        reason = req.status.finish_reason
        self.finished_total[reason] = self.finished_total.get(reason, 0) + 1
        if req.is_pooling:
            self.pooling_finished_total[reason] = self.pooling_finished_total.get(reason, 0) + 1
            if req.embedding is not None:
                self.pooled_tokens_total += req.num_prompt_tokens
        t = req.times
        if t.first_token is not None:
            self.ttft.append(t.first_token - t.arrival)
            if req.num_output_tokens > 1 and t.last_token is not None:
                self.tpot.append((t.last_token - t.first_token) / (req.num_output_tokens - 1))
        if t.first_scheduled is not None:
            self.queue_time.append(t.first_scheduled - t.arrival)
        if t.finished is not None:
            self.e2e.append(t.finished - t.arrival)
