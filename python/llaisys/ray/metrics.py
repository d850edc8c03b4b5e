"""The Ray part of the ingress's /metrics: routing decisions, retries, and each replica's
latest report (queue, KV usage, prefix-cache hit rate), beside the server's own series
(whose engine gauges and counters are the replicas' sums, see ReplicaEngine.snapshot).

Per-replica series carry ``model_name`` and ``replica`` labels; the set of replicas is
bounded by the deployment (a dead replica's series go when Serve drops it).
"""

from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..server.state.metrics import PREFIX
from .client import FAULTS
from .routing_log import ROUTING


class RayCollector:
    """Collected at every scrape from the router's log and the replicas' reports."""

    def describe(self):
        return []

    def collect(self):
        decisions, routed, matched = ROUTING.snapshot()
        fam = CounterMetricFamily(PREFIX + "ray_routing_decisions", "Requests routed, by router policy and "
                                  "reason (session, prefix, overloaded, least_tokens, unavailable; pow2 for Ray's default).",
                                  labels=["policy", "reason"])
        for (policy, reason), n in sorted(decisions.items()):
            fam.add_metric([policy, reason], n)
        yield fam
        fam = CounterMetricFamily(PREFIX + "ray_requests_routed", "Requests routed to each replica.",
                                  labels=["replica"])
        for replica, n in sorted(routed.items()):
            fam.add_metric([replica], n)
        yield fam
        fam = CounterMetricFamily(PREFIX + "ray_routed_blocks_held", "Prompt blocks the chosen replica already "
                                  "held when the request was routed to it.", labels=["replica"])
        for replica, n in sorted(matched.items()):
            fam.add_metric([replica], n)
        yield fam
        yield CounterMetricFamily(PREFIX + "ray_retries", "Requests re-sent to another replica after theirs died.",
                                  value=FAULTS.retries)
        yield CounterMetricFamily(PREFIX + "ray_failed_streams", "Streams ended with an error event because "
                                  "their replica died after sending tokens.", value=FAULTS.failed_streams)
        yield from self._replicas()

    def _replicas(self):
        labels = ["model_name", "replica"]
        g = {
            "running": GaugeMetricFamily(PREFIX + "replica_num_requests_running", "Sequences holding KV.", labels=labels),
            "waiting": GaugeMetricFamily(PREFIX + "replica_num_requests_waiting", "Sequences queued.", labels=labels),
            "tokens": GaugeMetricFamily(PREFIX + "replica_outstanding_tokens", "Prompt + max_tokens of the "
                                        "requests in flight.", labels=labels),
            "kv": GaugeMetricFamily(PREFIX + "replica_kv_cache_usage_perc", "Fraction of KV blocks held.",
                                    labels=labels),
            "cached": GaugeMetricFamily(PREFIX + "replica_prefix_cache_blocks", "Blocks in the prefix cache.",
                                        labels=labels),
            "rate": GaugeMetricFamily(PREFIX + "replica_prefix_cache_hit_rate", "Prompt tokens served from the "
                                      "prefix cache / prompt tokens looked up, since start-up.", labels=labels),
            "age": GaugeMetricFamily(PREFIX + "replica_report_age_seconds", "Age of the replica's latest report.",
                                     labels=labels),
        }
        c = {
            "pq": CounterMetricFamily(PREFIX + "replica_prefix_cache_queries", "Prompt tokens looked up.",
                                      labels=labels),
            "ph": CounterMetricFamily(PREFIX + "replica_prefix_cache_hits", "Prompt tokens served from the cache.",
                                      labels=labels),
            "gen": CounterMetricFamily(PREFIX + "replica_generation_tokens", "Output tokens generated.",
                                       labels=labels),
        }
        now = time.time()
        for name, rep in sorted(ROUTING.reports().items()):
            m, lab = rep["metrics"], [rep.get("model", ""), name]
            g["running"].add_metric(lab, rep["num_running"])
            g["waiting"].add_metric(lab, rep["num_waiting"])
            g["tokens"].add_metric(lab, rep["outstanding_tokens"])
            g["kv"].add_metric(lab, rep["kv_usage"])
            g["cached"].add_metric(lab, len(rep["cached"]))
            g["rate"].add_metric(lab, m.prefix_cache.hit_rate)
            g["age"].add_metric(lab, max(0.0, now - rep["time"]))
            c["pq"].add_metric(lab, m.prefix_cache.query_tokens)
            c["ph"].add_metric(lab, m.prefix_cache.hit_tokens)
            c["gen"].add_metric(lab, m.generation_tokens_total)
        yield from g.values()
        yield from c.values()
