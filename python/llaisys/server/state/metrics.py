"""Prometheus metrics for GET /metrics: ``llaisys:``-prefixed, modelled on vLLM's names.

Two sources, one registry (our own, never the process-global one, so two apps in one process
do not clash):

- engine state, read at scrape time from each model's ``AsyncEngine.snapshot()``: gauges
  (running, waiting, KV usage; the model's weight, workspace and device scratch bytes) and the engine's counters (prompt/generation tokens,
  preemptions, prefix-cache tokens queried and hit, --cache-reuse's tokens, copies and fallbacks,
  pooling requests and their tokens). Reading at scrape time means the
  numbers are the engine's own, never a second count that could drift from it.
- per-request observations the server reports through ``on_request_done`` once an HTTP
  request ends: finish reasons, TTFT / TPOT / end-to-end / inter-token latency histograms,
  and HTTP errors by status.

Every series carries ``model_name`` (the served name); a model name the server does not
serve is recorded as ``"unknown"`` so a client cannot grow the label set.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

PREFIX = "llaisys:"
UNKNOWN_MODEL = "unknown"

# bucket bounds in seconds (vLLM's, trimmed to what a CPU engine spans)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0)


# The prompt cache's disk tier (--prompt-cache-dir; engine/prompt_cache.py DiskCacheStats): field,
# c(ounter) or g(auge), help. The series is llaisys:prompt_cache_disk_<field without "disk_">.
_DISK_SERIES = (
    ("hits", "c", "KV blocks read back from the prompt cache's disk tier."),
    ("misses", "c", "Prefix lookups that went to disk and stopped at a block it lacked or could not use."),
    ("refused", "c", "Disk-tier files refused (foreign header, corrupt, truncated); each is also a miss."),
    ("bytes_read", "c", "Bytes read from the disk tier."),
    ("bytes_written", "c", "Bytes written to the disk tier."),
    ("writes_dropped", "c", "Evicted blocks not written because the write queue was full."),
    ("files", "g", "Block files in the prompt cache directory."),
    ("disk_bytes", "g", "Bytes of the block files in the prompt cache directory."),
)

# Cache reuse (--cache-reuse N; engine/cache_reuse.py ReuseStats): field, series, help.
# the model's memory gauges: (ModelStatsInfo field, series, help)
_MEMORY_SERIES = (
    ("weight_bytes", "model_weight_bytes", "Bytes of the model's weights as stored."),
    ("workspace_bytes", "model_workspace_bytes", "Bytes of the model's per-step activation workspace now reserved."),
    ("scratch_bytes", "device_scratch_bytes", "NVIDIA: bytes of the kernels' per-thread scratch and cuBLAS "
     "workspaces on the model's device, shared by the models there (0 on the CPU)."),
    ("graphs", "cuda_graphs", "NVIDIA: CUDA graphs of decode steps the model holds (LLAISYS_CUDA_GRAPHS=1)."),
    ("graph_capture_s", "cuda_graph_capture_seconds", "NVIDIA: time spent capturing those graphs since load."),
    ("padded_bytes", "model_padded_bytes", "Bytes of the padded decode steps' own workspace and index arrays "
     "(what the graphs read); 0 when no step is padded."),
)
_REUSE_SERIES = (
    ("tokens", "cache_reuse_tokens", "Prompt tokens taken by --cache-reuse from a recent request's cached blocks "
     "at a new position (copied, not computed)."),
    ("requests", "cache_reuse_copies", "Admissions whose --cache-reuse copy succeeded."),
    ("failures", "cache_reuse_fallbacks", "Admissions whose --cache-reuse copy failed (their tokens were computed)."),
)


class _EngineCollector:
    """Yields the engines' gauges and counters from a fresh snapshot at every scrape."""

    def __init__(self, engines: Callable[[], dict]):
        self._engines = engines

    def describe(self):
        return []  # unchecked collector: the series depend on the models served

    def collect(self):
        fams = {
            "running": GaugeMetricFamily(PREFIX + "num_requests_running", "Requests holding KV (running).",
                                         labels=["model_name"]),
            "waiting": GaugeMetricFamily(PREFIX + "num_requests_waiting", "Requests queued (preempted ones too).",
                                         labels=["model_name"]),
            "kv": GaugeMetricFamily(PREFIX + "kv_cache_usage_perc",
                                    "Fraction of KV blocks held by requests (1 = full).", labels=["model_name"]),
            "alive": GaugeMetricFamily(PREFIX + "engine_alive", "1 while the engine loop runs, 0 once it died.",
                                       labels=["model_name"]),
            "prompt": CounterMetricFamily(PREFIX + "prompt_tokens", "Prompt tokens of admitted requests.",
                                          labels=["model_name"]),
            "gen": CounterMetricFamily(PREFIX + "generation_tokens", "Output tokens generated.",
                                       labels=["model_name"]),
            "preempt": CounterMetricFamily(PREFIX + "num_preemptions", "Requests preempted (KV ran out).",
                                           labels=["model_name"]),
            "pq": CounterMetricFamily(PREFIX + "prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
                                      labels=["model_name"]),
            "ph": CounterMetricFamily(PREFIX + "prefix_cache_hits", "Prompt tokens served from the prefix cache.",
                                      labels=["model_name"]),
            "pool": CounterMetricFamily(PREFIX + "pooling_requests_finished",
                                        "Pooling (embedding) requests finished, by finish reason.",
                                        labels=["model_name", "finished_reason"]),
            "pooled": CounterMetricFamily(PREFIX + "pooled_tokens",
                                          "Prompt tokens of pooling requests that finished with a vector.",
                                          labels=["model_name"]),
            "sd": CounterMetricFamily(PREFIX + "spec_decode_num_draft_tokens",
                                      "Speculative draft tokens verified.", labels=["model_name"]),
            "sa": CounterMetricFamily(PREFIX + "spec_decode_num_accepted_tokens",
                                      "Speculative draft tokens accepted.", labels=["model_name"]),
            "sr": GaugeMetricFamily(PREFIX + "spec_decode_acceptance_rate",
                                    "Accepted / verified draft tokens since start-up.", labels=["model_name"]),
            "sl": GaugeMetricFamily(PREFIX + "spec_decode_mean_accepted_length",
                                    "Tokens emitted per speculative verification (1 + accepted drafts).",
                                    labels=["model_name"]),
        }
        disk = {key: (CounterMetricFamily if kind == "c" else GaugeMetricFamily)(
            PREFIX + "prompt_cache_disk_" + key.replace("disk_", ""), text, labels=["model_name"])
            for key, kind, text in _DISK_SERIES}
        fams.update({"disk_" + k: f for k, f in disk.items()})
        reuse = {key: CounterMetricFamily(PREFIX + series, text, labels=["model_name"])
                 for key, series, text in _REUSE_SERIES}
        fams.update({"reuse_" + k: f for k, f in reuse.items()})
        memory = {field: GaugeMetricFamily(PREFIX + series, text, labels=["model_name"])
                  for field, series, text in _MEMORY_SERIES}
        fams.update({"memory_" + k: f for k, f in memory.items()})
        for name, eng in sorted(self._engines().items()):
            m = eng.snapshot()
            fams["running"].add_metric([name], m.num_running)
            fams["waiting"].add_metric([name], m.num_waiting)
            fams["kv"].add_metric([name], m.kv_usage)
            fams["alive"].add_metric([name], 1.0 if eng.is_alive else 0.0)
            fams["prompt"].add_metric([name], m.prompt_tokens_total)
            fams["gen"].add_metric([name], m.generation_tokens_total)
            fams["preempt"].add_metric([name], m.num_preemptions_total)
            fams["pq"].add_metric([name], m.prefix_cache.query_tokens)
            fams["ph"].add_metric([name], m.prefix_cache.hit_tokens)
            for reason, count in sorted(m.pooling_finished_total.items()):
                fams["pool"].add_metric([name, reason], count)
            fams["pooled"].add_metric([name], m.pooled_tokens_total)
            if getattr(m, "spec", None) is not None:  # speculative decoding on
                fams["sd"].add_metric([name], m.spec.num_draft_tokens)
                fams["sa"].add_metric([name], m.spec.num_accepted_tokens)
                fams["sr"].add_metric([name], m.spec.acceptance_rate)
                fams["sl"].add_metric([name], m.spec.mean_accepted_length)
            mem = getattr(m, "memory", None)
            if mem is not None:  # the core's runner (a fake reports none)
                for field, fam in memory.items():
                    fam.add_metric([name], getattr(mem, field))
            d = getattr(m, "prompt_cache_disk", None)
            if d is not None:  # --prompt-cache-dir given
                for key, _, _ in _DISK_SERIES:
                    disk[key].add_metric([name], getattr(d, key))
            r = getattr(m, "cache_reuse", None)
            if r is not None:  # --cache-reuse N given
                for key, _, _ in _REUSE_SERIES:
                    reuse[key].add_metric([name], getattr(r, key))
        yield from fams.values()


class ServerMetrics:
    """The /metrics registry of one server; `engines()` gives served name -> AsyncEngine."""

    def __init__(self, engines: Callable[[], dict]):
        self._engines = engines
        self._lock = threading.Lock()  # one request's observations land together
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(engines))
        reg = dict(registry=self.registry)
        self.request_success = Counter(PREFIX + "request_success", "Finished requests by finish reason "
                                       "(one per completion; n > 1 counts n).", ["model_name", "finished_reason"],
                                       **reg)
        self.http_errors = Counter(PREFIX + "http_errors", "HTTP requests answered with an error, by status.",
                                   ["model_name", "status"], **reg)
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Arrival to first output token.",
                              ["model_name"], buckets=TTFT_BUCKETS, **reg)
        self.tpot = Histogram(PREFIX + "time_per_output_token_seconds", "Mean time per output token after the "
                              "first, per request.", ["model_name"], buckets=TPOT_BUCKETS, **reg)
        self.itl = Histogram(PREFIX + "inter_token_latency_seconds", "Time between consecutive streamed chunks.",
                             ["model_name"], buckets=TPOT_BUCKETS, **reg)
        self.e2e = Histogram(PREFIX + "e2e_request_latency_seconds", "Arrival to the last byte of the response.",
                             ["model_name"], buckets=E2E_BUCKETS, **reg)
        self.tracked_users = Gauge(PREFIX + "admission_tracked_users", "Identities the admission control keeps "
                                   "state for (in flight, or charged within the token-budget window); bounded by "
                                   "--max-tracked-users plus the requests in flight.", **reg)
        self.admission_queued = Gauge(PREFIX + "admission_queued", "Requests waiting at the server for a slot "
                                      "(--max-queue bounds them; beyond it a request is refused with 429).", **reg)
        self.admission_active = Gauge(PREFIX + "admission_active", "Requests holding a slot (in the engine, "
                                      "running or in its queue); --max-concurrent-requests bounds them.", **reg)

    def track_admission(self, admission) -> None:
        """Report `admission`'s tracked identities, queued and active requests at every scrape."""
        self.tracked_users.set_function(lambda: admission.num_tracked_users)
        self.admission_queued.set_function(lambda: admission.num_queued)
        self.admission_active.set_function(lambda: admission.num_active)

    def _label(self, model: Optional[str]) -> str:
        return model if model and model in self._engines() else UNKNOWN_MODEL

    def on_request_done(self, model: Optional[str], out, status: int, ttft_s: Optional[float], e2e_s: float,
                        itl_s: list) -> None:
        """Record one finished HTTP request (call once per request, errors included).

        `out` is its final RequestOutput (None when it never reached the engine), `ttft_s`
        the server-measured time to the first token (None: take the engine's timestamps),
        `itl_s` the gaps between streamed chunks (empty when not streaming)."""
        name = self._label(model)
        with self._lock:
            if status >= 400:
                self.http_errors.labels(name, str(int(status))).inc()
            if out is None or not out.finished:
                return
            for c in out.outputs:
                self.request_success.labels(name, c.finish_reason or "unknown").inc()
            if status >= 400:
                return
            times = out.metrics
            if ttft_s is None and times is not None and times.first_token is not None:
                ttft_s = times.first_token - times.arrival
            if ttft_s is not None:
                self.ttft.labels(name).observe(ttft_s)
            tpot = _tpot(out, itl_s)
            if tpot is not None:
                self.tpot.labels(name).observe(tpot)
            for gap in itl_s:
                self.itl.labels(name).observe(gap)
            self.e2e.labels(name).observe(e2e_s)

    def render(self) -> tuple:
        """(body, content type) of the Prometheus text exposition."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _tpot(out, itl_s: list) -> Optional[float]:
    """Mean seconds per output token after the first, from the engine's timestamps of
    completion 0; from the streamed gaps when the engine's are missing; None for <= 1 token."""
    times = out.metrics
    n = len(out.outputs[0].token_ids) if out.outputs else 0
    if times is not None and times.first_token is not None and times.last_token is not None and n > 1:
        return (times.last_token - times.first_token) / (n - 1)
    if itl_s:
        return sum(itl_s) / len(itl_s)
    return None
