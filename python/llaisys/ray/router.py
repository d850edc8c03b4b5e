"""Prefix- and session-aware routing of engine requests over the replicas of a model.

``PrefixAwareRouter`` is a ``ray.serve.request_router.RequestRouter``; it runs inside the
process that holds the handle (the ingress). For each request, in order:

1. **session**: a request of a session (``route["session"]``) goes to the replica that
   served the session's last turn;
2. **prefix**: else to the replica holding the longest run of the prompt's leading blocks,
   matched by the engine's own chained block hashes (``route["hashes"]``, the first bytes of
   the SHA-256 the KV cache manager keys its prefix cache by). What a replica holds is its
   ``record_routing_stats`` report (polled by Serve) plus the blocks this router sent it
   since (the report lags by up to one period);
3. either choice is dropped when that replica has ``imbalance`` more requests in flight
   than the least-loaded candidate ("overloaded": the cache hit is not worth the queue);
4. **least_tokens**: otherwise the replica with the fewest outstanding tokens (prompt +
   max_tokens of its requests in flight: its latest report plus what was routed there
   after the report was made: counting in on_request_routed / on_request_completed left
   the count near zero for streaming calls in a measured run, and ties then sent 29 of 33
   requests to one replica). Ties are broken at random.

The chosen replica is the first rank, the others follow by outstanding tokens, so a replica
that refuses (at max_ongoing_requests, or missing Serve's queue-length probe deadline on a
busy machine) passes the request on ("unavailable"). For a session or prefix choice the first
``AFFINITY_TRIES`` passes offer the chosen replica alone: a CI run on a loaded machine had one
turn of a four-turn session land on the other replica that way. Every decision is counted in
``routing_log.ROUTING`` (read by the ingress's /metrics). No FIFOMixin: a decision is made for one
request and fulfils that request (RequestRouter matches by request id), never another. ``ObservedPow2Router`` is Ray's default
power-of-two router unchanged, counting its decisions the same way (the baseline).
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict, deque
from typing import Optional

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

MAX_SESSIONS = 100_000  # session -> replica entries kept (least recently used dropped)
MAX_DECIDED = 100_000  # decisions awaiting on_request_routed (a request cancelled before routing leaves one)
MAX_RECENT_BLOCKS = 100_000  # per replica: block hashes routed there and not yet in a report
ROUTED_MEMORY_S = 60.0  # how long a routed request counts towards a replica's load without a newer report
AFFINITY_TRIES = 4  # routing passes that offer only the session's or prefix's replica before the others


def routing_log():
    """This process's RoutingLog. Imported at call time: Serve pickles this module by value
    into each handle's process, so a module-level object here would be a copy per router."""
    from llaisys.ray.routing_log import ROUTING

    return ROUTING


def replica_label(r: RunningReplica) -> str:
    """Serve's replica id, as the replica labels itself (known before its first report)."""
    return r.replica_id.unique_id


def _route(pending: Optional[PendingRequest]) -> dict:
    if pending is None:
        return {}
    route = pending.kwargs.get("route")
    return route if isinstance(route, dict) else {}


class PrefixAwareRouter(RequestRouter):
    """See the module docstring. request_router_kwargs: ``imbalance`` (requests in flight
    beyond the least-loaded replica's that void an affinity, default 8)."""

    def initialize_state(self, imbalance: int = 8, **kwargs):
        self.imbalance = int(imbalance)
        self._sessions: OrderedDict = OrderedDict()  # session -> ReplicaID of its last turn
        self._recent: dict = {}  # ReplicaID -> OrderedDict(hash prefix -> None), routed there lately
        self._routed: dict = {}  # ReplicaID -> deque of (wall time, tokens) routed there, oldest first
        # internal request id -> (reason, matched, chosen id, passes) from choose_replicas, kept
        # until on_request_routed: Serve may run the completion callback of a short request
        # first (both are scheduled on the router's loop), so completion does not drop it
        self._decided: OrderedDict = OrderedDict()
        routing_log().routers.append(self)

    # ---- the decision --------------------------------------------------------------------
    def _held(self, r: RunningReplica, hashes: list) -> int:
        """How many leading blocks of the prompt the replica holds (reported or routed there)."""
        cached = (r.routing_stats or {}).get("cached") or ()
        recent = self._recent.get(r.replica_id, {})
        n = 0
        for h in hashes:
            if h not in cached and h not in recent:
                break
            n += 1
        return n

    def _since_report(self, r: RunningReplica) -> tuple:
        """(requests, tokens) routed to the replica after its latest report was made."""
        made = (r.routing_stats or {}).get("time", 0.0)
        n = tokens = 0
        for t, k in reversed(self._routed.get(r.replica_id, ())):
            if t <= made:
                break
            n, tokens = n + 1, tokens + k
        return n, tokens

    def _requests(self, r: RunningReplica) -> int:
        """Requests in the replica's engine (its report) plus those routed there since."""
        rep = r.routing_stats or {}
        return rep.get("num_running", 0) + rep.get("num_waiting", 0) + self._since_report(r)[0]

    def _tokens(self, r: RunningReplica) -> int:
        """Outstanding tokens of the replica (its report) plus those routed there since."""
        return (r.routing_stats or {}).get("outstanding_tokens", 0) + self._since_report(r)[1]

    def decide(self, candidates: list, route: dict) -> tuple:
        """(reason, chosen replica, matched blocks) for a request with this `route`."""
        min_q = min(self._requests(r) for r in candidates)
        least = min(candidates, key=lambda r: (self._tokens(r), self._requests(r), random.random()))
        session = route.get("session")
        if session is not None:
            rid = self._sessions.get(session)
            r = next((c for c in candidates if c.replica_id == rid), None)
            if r is not None:
                if self._requests(r) - min_q <= self.imbalance:
                    return "session", r, self._held(r, route.get("hashes") or [])
                return "overloaded", least, self._held(least, route.get("hashes") or [])
        hashes = route.get("hashes") or []
        if hashes:
            held = {c.replica_id: self._held(c, hashes) for c in candidates}
            best = max(candidates, key=lambda c: (held[c.replica_id], -self._tokens(c)))
            if held[best.replica_id] > 0:
                if self._requests(best) - min_q <= self.imbalance:
                    return "prefix", best, held[best.replica_id]
                return "overloaded", least, held[least.replica_id]
        return "least_tokens", least, 0

    async def choose_replicas(self, candidate_replicas: list, pending_request: Optional[PendingRequest] = None
                              ) -> list:
        if not candidate_replicas:
            return []
        route = _route(pending_request)
        reason, chosen, matched = self.decide(candidate_replicas, route)
        tries = 1
        if pending_request is not None:
            rid = pending_request.metadata.internal_request_id
            tries = self._decided.get(rid, (None, 0, None, 0))[3] + 1
            self._decided[rid] = (reason, matched, chosen.replica_id, tries)
            self._decided.move_to_end(rid)
            while len(self._decided) > MAX_DECIDED:
                self._decided.popitem(last=False)
        # Serve moves to the next rank when the chosen replica does not answer its queue-length
        # probe in time (a busy machine) or is full. For an affinity that would lose the cached
        # history, so the first passes offer the chosen replica alone (Serve backs off between
        # passes and lengthens the probe deadline); after them any replica will do.
        if reason in ("session", "prefix") and tries <= AFFINITY_TRIES:
            return [[chosen]]
        rest = sorted((c for c in candidate_replicas if c is not chosen), key=lambda c: self._tokens(c))
        return [[chosen]] + ([rest] if rest else [])

    # ---- bookkeeping ---------------------------------------------------------------------
    def on_request_routed(self, pending_request: PendingRequest, replica_id, result) -> None:
        rid = pending_request.metadata.internal_request_id
        reason, matched, chosen, _ = self._decided.pop(rid, ("least_tokens", 0, replica_id, 0))
        route = _route(pending_request)
        if replica_id != chosen:  # the chosen replica did not take it: Serve's next rank did
            reason, matched = "unavailable", 0
        replica = self.curr_replicas.get(replica_id)
        label = replica_label(replica) if replica is not None else replica_id.unique_id
        routing_log().record("prefix_aware", reason, label, matched)
        session = route.get("session")
        if session is not None:
            self._sessions[session] = replica_id
            self._sessions.move_to_end(session)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        recent = self._recent.setdefault(replica_id, OrderedDict())
        for h in route.get("hashes") or []:
            recent[h] = None
            recent.move_to_end(h)
        while len(recent) > MAX_RECENT_BLOCKS:
            recent.popitem(last=False)
        now = time.time()
        routed = self._routed.setdefault(replica_id, deque())
        routed.append((now, int(route.get("tokens") or 1)))
        while routed and routed[0][0] < now - ROUTED_MEMORY_S:  # long since covered by a report
            routed.popleft()

    def on_replica_actor_died(self, replica_id) -> None:
        super().on_replica_actor_died(replica_id)
        self._recent.pop(replica_id, None)
        self._routed.pop(replica_id, None)
        for s in [s for s, r in self._sessions.items() if r == replica_id]:
            del self._sessions[s]

    def update_replicas(self, replicas: list) -> None:
        super().update_replicas(replicas)
        live = {r.replica_id for r in replicas}
        for rid in [rid for rid in self._recent if rid not in live]:
            self._recent.pop(rid, None)
            self._routed.pop(rid, None)


class ObservedPow2Router(PowerOfTwoChoicesRequestRouter):
    """Ray's default router, unchanged, whose decisions are counted like ours (the baseline
    of the prefix-hit comparison, and its replicas' reports still reach /metrics)."""

    def initialize_state(self, **kwargs):
        routing_log().routers.append(self)

    def on_request_routed(self, pending_request: PendingRequest, replica_id, result) -> None:
        replica = self.curr_replicas.get(replica_id)
        routing_log().record("pow2", "pow2", replica_label(replica) if replica is not None else replica_id.unique_id, 0)
