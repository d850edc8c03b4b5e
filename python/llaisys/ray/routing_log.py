"""This process's routing log: the routers' decisions and their replicas' latest reports,
read by the ingress's /metrics and by ReplicaEngine.snapshot (router.py writes it)."""

from __future__ import annotations

import threading


class RoutingLog:
    """Routing decisions and the replicas' latest reports, for /metrics (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.decisions: dict = {}  # (policy, reason) -> requests routed
        self.routed: dict = {}  # replica label -> requests routed to it
        self.matched_blocks: dict = {}  # replica label -> prompt blocks routed to it that it held
        self.routers: list = []  # the routers of this process (their replicas' reports)

    def record(self, policy: str, reason: str, replica: str, matched: int) -> None:
        with self._lock:
            self.decisions[(policy, reason)] = self.decisions.get((policy, reason), 0) + 1
            self.routed[replica] = self.routed.get(replica, 0) + 1
            self.matched_blocks[replica] = self.matched_blocks.get(replica, 0) + matched

    def reports(self) -> dict:
        """replica label -> its latest record_routing_stats report, over every router here."""
        out = {}
        for router in list(self.routers):
            for r in list(router.curr_replicas.values()):
                stats = r.routing_stats or {}
                if stats.get("replica"):
                    out[stats["replica"]] = stats
        return out

    def snapshot(self) -> tuple:
        with self._lock:
            return dict(self.decisions), dict(self.routed), dict(self.matched_blocks)


ROUTING = RoutingLog()  # this process's routing log
