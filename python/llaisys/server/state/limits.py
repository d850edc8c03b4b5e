"""Admission control: how many requests run at once, how many may wait, and per-user limits.

A request takes a slot before it is tokenized. Up to ``max_concurrent_requests`` hold a slot
(they are in the engine, running or in its queue); up to ``max_queue`` more wait here in
arrival order; anything beyond is answered 429 with Retry-After at once, without touching
the engine. Per user (the caller's identity: API key and/or `user` field) there is an
optional cap on requests in flight (queued ones count) and an optional token budget over a
sliding window (prompt + completion tokens, charged when a request ends).

The state is bounded whatever the callers send: a user's in-flight count is removed when it
drops to zero (a refused request leaves nothing behind), and the budgets live in an LRU map
of at most ``max_tracked_users`` identities, whose charges older than the window are dropped
as the map is used; past the cap the least recently charged identity is forgotten (its
spending restarts from zero, which only happens when more than that many identities spent
tokens within one window).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable, Optional

from ..protocol.errors import APIError, too_many, unavailable

POLL_S = 0.25  # how often a queued request checks for its client leaving and its deadline


@dataclass
class ServerLimits:
    """The server-wide limits (command-line options); None is no limit."""

    max_concurrent_requests: int = 64  # requests holding a slot (in the engine)
    max_queue: int = 256  # requests waiting here for a slot
    per_user_concurrency: Optional[int] = None  # requests in flight (queued included) per identity
    per_user_token_budget: Optional[int] = None  # prompt + completion tokens per identity per window
    token_budget_window_s: float = 60.0  # the budget's sliding window
    max_body_bytes: int = 4 << 20  # request body size (413 beyond)
    request_timeout_s: float = 600.0  # queue wait + generation, then the request is aborted
    max_tracked_users: int = 10_000  # identities whose token budget is remembered (LRU beyond)

    def __post_init__(self) -> None:
        for name in ("max_concurrent_requests", "max_body_bytes", "max_tracked_users"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {self.max_queue}")
        for name in ("per_user_concurrency", "per_user_token_budget"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1 (or unset), got {v}")
        if not self.token_budget_window_s > 0 or not self.request_timeout_s > 0:
            raise ValueError("token_budget_window_s and request_timeout_s must be > 0")


class ClientGone(APIError):
    """The client closed the connection; nothing can be answered (logged as 499)."""

    def __init__(self):
        super().__init__(499, "client closed the connection", code="client_closed")


class Ticket:
    """A slot held by one request; release() once (later calls do nothing)."""

    def __init__(self, admission: "Admission", user: str):
        self._admission = admission
        self.user = user
        self.granted = threading.Event()  # set when the slot is ours
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._admission._release(self)

    def __enter__(self) -> "Ticket":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Admission:
    """Thread-safe slot and queue accounting for all routes that run the engine."""

    def __init__(self, limits: ServerLimits, clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.clock = clock
        self._lock = threading.Lock()
        self._active = 0  # slots held
        self._queue: deque = deque()  # Tickets waiting for a slot, oldest first
        self._user_inflight: dict = {}  # identity -> requests holding or waiting for a slot (> 0 only)
        self._spent: OrderedDict = OrderedDict()  # identity -> deque of (time, tokens), least recently charged first
        self.closed = False  # draining: no new requests

    @property
    def num_active(self) -> int:
        return self._active

    @property
    def num_queued(self) -> int:
        return len(self._queue)

    def acquire(self, user: str, deadline: float, client_gone: Callable[[], bool] = lambda: False) -> Ticket:
        """A granted Ticket, waiting in the queue if need be. 429 when the queue or the user's
        limits are full, 503 when draining or when `deadline` passes in the queue, ClientGone
        when the client leaves while queued."""
        ticket = Ticket(self, user)
        with self._lock:
            self._check_admissible(user)
            if self._active < self.limits.max_concurrent_requests and not self._queue:
                self._user_inflight[user] = self._user_inflight.get(user, 0) + 1
                self._active += 1
                ticket.granted.set()
                return ticket
            if len(self._queue) >= self.limits.max_queue:
                raise too_many(f"server busy: {self._active} requests running and {len(self._queue)} queued",
                               code="queue_full", retry_after=1 + len(self._queue) // max(1, self._active))
            self._user_inflight[user] = self._user_inflight.get(user, 0) + 1
            self._queue.append(ticket)
        while not ticket.granted.wait(POLL_S):
            gone = client_gone()
            if gone or self.clock() >= deadline or self.closed:
                with self._lock:
                    if not ticket.granted.is_set():
                        self._queue.remove(ticket)
                        self._drop_inflight(user)
                        ticket._released = True
                        if gone:
                            raise ClientGone()
                        if self.closed:
                            raise unavailable("the server is shutting down", code="shutting_down")
                        raise unavailable("timed out waiting for a free slot", code="queue_timeout", retry_after=1)
        return ticket

    def _check_admissible(self, user: str) -> None:
        if self.closed:
            raise unavailable("the server is shutting down", code="shutting_down")
        lim = self.limits
        if lim.per_user_concurrency is not None and self._user_inflight.get(user, 0) >= lim.per_user_concurrency:
            raise too_many(f"at most {lim.per_user_concurrency} requests in flight per user",
                           code="user_concurrency_limit", retry_after=1)
        if lim.per_user_token_budget is not None:
            spent, oldest = self._window(user)
            if spent >= lim.per_user_token_budget:
                wait = oldest + lim.token_budget_window_s - self.clock()
                raise too_many(f"token budget of {lim.per_user_token_budget} tokens per "
                               f"{lim.token_budget_window_s:g} s used up ({spent} spent)",
                               code="token_budget_exceeded", retry_after=int(wait) + 1)

    def _window(self, user: str) -> tuple:
        """(tokens spent within the window, time of the oldest charge in it); drops older charges."""
        charges = self._spent.get(user)
        if not charges:
            return 0, self.clock()
        start = self.clock() - self.limits.token_budget_window_s
        while charges and charges[0][0] < start:
            charges.popleft()
        if not charges:
            del self._spent[user]
            return 0, self.clock()
        return sum(t for _, t in charges), charges[0][0]

    def charge(self, user: str, tokens: int) -> None:
        """Count `tokens` against the user's budget (no-op without a budget)."""
        if self.limits.per_user_token_budget is not None and tokens > 0:
            with self._lock:
                now = self.clock()
                self._prune(now)
                charges = self._spent.pop(user, None) or deque()
                charges.append((now, int(tokens)))
                self._spent[user] = charges  # most recently charged last
                while len(self._spent) > self.limits.max_tracked_users:
                    self._spent.popitem(last=False)

    def _prune(self, now: float) -> None:
        """Forget identities whose last charge left the window (oldest first: O(1) per call amortised)."""
        start = now - self.limits.token_budget_window_s
        while self._spent:
            user, charges = next(iter(self._spent.items()))
            if charges and charges[-1][0] >= start:
                break
            del self._spent[user]

    def _drop_inflight(self, user: str) -> None:
        n = self._user_inflight.get(user, 0) - 1
        if n > 0:
            self._user_inflight[user] = n
        else:
            self._user_inflight.pop(user, None)

    @property
    def num_tracked_users(self) -> int:
        """Identities with state here (in flight or within a budget window): bounded."""
        with self._lock:
            return len(set(self._user_inflight) | set(self._spent))

    def _release(self, ticket: Ticket) -> None:
        with self._lock:
            self._drop_inflight(ticket.user)
            if self._queue:  # hand the slot straight to the oldest waiter
                self._queue.popleft().granted.set()
            else:
                self._active -= 1

    def close(self) -> None:
        """Refuse new requests (503); queued ones give up within POLL_S."""
        self.closed = True
