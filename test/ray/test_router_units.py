"""PrefixAwareRouter's decisions without a cluster: the affinity passes that offer the chosen
replica alone before Serve may fall back to another, and the reason recorded when it does."""

import asyncio
import types
from collections import namedtuple

import pytest

pytest.importorskip("ray")

from llaisys.ray import router as R  # noqa: E402
from llaisys.ray.routing_log import ROUTING  # noqa: E402


_Id = namedtuple("_Id", "unique_id")  # hashable, like Serve's ReplicaID


class _Replica:
    """What the router reads of a Serve RunningReplica: its id and its latest report."""

    def __init__(self, name, running=0):
        self.replica_id = _Id(name)
        self.routing_stats = {"replica": name, "num_running": running, "num_waiting": 0, "time": 0.0}


def _pending(rid, session):
    return types.SimpleNamespace(metadata=types.SimpleNamespace(internal_request_id=rid),
                                 kwargs={"route": {"session": session, "tokens": 10}})


def _router(replicas):
    router = R.PrefixAwareRouter.__new__(R.PrefixAwareRouter)  # Serve's constructor needs a controller
    router.initialize_state(imbalance=8)
    router._replicas = {r.replica_id: r for r in replicas}  # what Serve's update_replicas keeps
    return router


def test_session_pass_offers_its_replica_alone_then_everyone():
    a, b = _Replica("a"), _Replica("b")
    router = _router([a, b])
    router._sessions["s"] = a.replica_id
    req = _pending("r1", "s")
    for _ in range(R.AFFINITY_TRIES):
        assert asyncio.run(router.choose_replicas([a, b], req)) == [[a]]
    assert asyncio.run(router.choose_replicas([a, b], req)) == [[a], [b]]  # then Serve may pass it on


def test_fallback_is_recorded_as_unavailable_and_repins_the_session():
    a, b = _Replica("a"), _Replica("b")
    router = _router([a, b])
    router._sessions["s"] = a.replica_id
    req = _pending("r2", "s")
    asyncio.run(router.choose_replicas([a, b], req))
    before = ROUTING.snapshot()[0].get(("prefix_aware", "unavailable"), 0)
    router.on_request_routed(req, b.replica_id, None)
    assert ROUTING.snapshot()[0].get(("prefix_aware", "unavailable"), 0) == before + 1
    assert router._sessions["s"] == b.replica_id  # the next turn follows its history


def test_least_tokens_choice_offers_every_replica_at_once():
    a, b = _Replica("a"), _Replica("b", running=3)
    router = _router([a, b])
    ranks = asyncio.run(router.choose_replicas([a, b], _pending("r3", None)))
    assert ranks == [[a], [b]]


def test_completion_before_routed_keeps_the_session_reason():
    """Serve schedules a request's completion callback and on_request_routed on the router's
    loop; a short request can complete first (a CI run counted one session turn of four as
    least_tokens). The decision must survive it, and a rejected attempt keeps counting passes."""
    a, b = _Replica("a"), _Replica("b")
    router = _router([a, b])
    router._sessions["s"] = a.replica_id
    req = _pending("r4", "s")
    asyncio.run(router.choose_replicas([a, b], req))
    router.on_request_completed(a.replica_id, "r4")  # a rejected or finished attempt
    assert router._decided["r4"][3] == 1
    asyncio.run(router.choose_replicas([a, b], req))  # the retry is the second pass, not a first
    assert router._decided["r4"][3] == 2
    before = ROUTING.snapshot()[0].get(("prefix_aware", "session"), 0)
    router.on_request_routed(req, a.replica_id, None)
    assert ROUTING.snapshot()[0].get(("prefix_aware", "session"), 0) == before + 1
    assert "r4" not in router._decided and router._sessions["s"] == a.replica_id
