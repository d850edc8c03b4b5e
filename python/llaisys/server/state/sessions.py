"""Server-side chat sessions: the message history of a conversation, kept per owner.

A client that sends ``session_id`` sends only its new messages; the server prepends the
history, and on success appends the new messages and the reply. The prefix cache then finds
the earlier turns' KV, since the rendered prompt of turn k+1 starts with that of turn k.
Stored responses (/v1/responses ``store``) are sessions of the same store, keyed by the
response id.

Rules:
- A session belongs to the owner that created it (the API key and/or ``user``). Another
  owner gets KeyError for it, exactly as for an id that does not exist, so ids cannot be probed.
- One turn at a time: a second ``begin_turn`` while one runs raises SessionBusy (409).
- A turn that fails or is aborted (``end_turn(..., None)``) leaves the history unchanged.
- Memory is bounded whatever clients send. A session holds at most ``max_session_bytes``
  (the UTF-8 JSON size of its messages): a turn whose new messages would take it past that
  raises SessionTooLarge (400) and changes nothing; the reply of an admitted turn is always
  kept, so the bound is exceeded by at most one reply, and the next turn is refused.
- Quotas per tenant (whose quota a session counts against: the API key, else ``user``, else
  the client address; the caller names it): a tenant holds at most ``max_per_tenant``
  sessions; a new one evicts that tenant's own least recently used idle session. Past
  ``max_sessions`` sessions or ``max_total_bytes`` bytes in all, the least recently used idle
  session of the tenant holding the most (sessions, or bytes; the asking tenant on a tie) is
  evicted: a tenant that grows takes room only from those holding more than it, so one
  tenant's traffic never evicts the sessions of a tenant that holds less than its share.
- Sessions idle for ``ttl_s`` seconds expire. A busy session is never evicted; when nothing
  can be evicted, SessionStoreFull (503).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

MAX_SESSION_ID_LEN = 128


class SessionBusy(Exception):
    """The session already has a turn running."""


class SessionStoreFull(Exception):
    """No room for the session: every session that could be evicted has a turn running."""


class SessionTooLarge(ValueError):
    """The turn would take the session past ``max_session_bytes``."""


def message_bytes(messages: list) -> int:
    """What `messages` count against the byte limits: the size of their compact UTF-8 JSON."""
    return len(json.dumps(messages, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))


@dataclass
class _Session:
    owner: str  # who may read and continue it (the caller's identity)
    tenant: str  # whose quota it counts against
    messages: list = field(default_factory=list)  # [{"role", "content", ...}] committed turns
    nbytes: int = 0  # message_bytes(messages)
    pending: Optional[list] = None  # the running turn's new messages; None when idle
    pending_bytes: int = 0  # message_bytes(pending); 0 when idle
    last_used: float = 0.0  # clock() of the last begin/end


class SessionStore:
    """Thread-safe; every method takes the caller's owner id (and, to create, its tenant)."""

    def __init__(self, max_sessions: int = 1024, ttl_s: float = 3600.0, clock: Callable[[], float] = time.monotonic,
                 *, max_per_tenant: Optional[int] = None, max_session_bytes: int = 4 << 20,
                 max_total_bytes: int = 512 << 20):
        for name, v in (("max_sessions", max_sessions), ("max_session_bytes", max_session_bytes),
                        ("max_total_bytes", max_total_bytes), ("max_per_tenant", max_per_tenant)):
            if v is None and name == "max_per_tenant":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if max_session_bytes > max_total_bytes:
            raise ValueError(f"max_session_bytes ({max_session_bytes}) must not exceed max_total_bytes "
                             f"({max_total_bytes})")
        if not isinstance(ttl_s, (int, float)) or isinstance(ttl_s, bool) or not ttl_s > 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
        self.max_sessions = max_sessions
        self.max_per_tenant = min(max_per_tenant or max_sessions, max_sessions)
        self.max_session_bytes = max_session_bytes
        self.max_total_bytes = max_total_bytes
        self.ttl_s = float(ttl_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict = OrderedDict()  # session id -> _Session, least recently used first
        self._tenants: dict = {}  # tenant -> OrderedDict(session id -> None), least recently used first
        self._tenant_bytes: dict = {}  # tenant -> bytes its sessions hold (pending turns included)
        self.total_bytes = 0  # bytes all sessions hold (pending turns included)

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._sessions)

    def tenant_usage(self, tenant: str) -> tuple:
        """(sessions, bytes) the tenant holds."""
        with self._lock:
            self._expire()
            return len(self._tenants.get(tenant, ())), self._tenant_bytes.get(tenant, 0)

    def begin_turn(self, session_id: str, owner: str, new_messages: list, tenant: Optional[str] = None) -> list:
        """The history plus `new_messages` (copies): the conversation to prompt with.
        Creates the session if absent, counted against `tenant` (default: `owner`).
        KeyError if it belongs to another owner, SessionBusy if a turn is running,
        SessionTooLarge past max_session_bytes, SessionStoreFull when nothing can be evicted
        to make room, ValueError for a malformed id or messages."""
        _check_id(session_id)
        if not isinstance(new_messages, list) or not new_messages:
            raise ValueError("a session turn needs at least one new message")
        size = message_bytes(new_messages)
        with self._lock:
            self._expire()
            s = self._sessions.get(session_id)
            if s is not None and s.owner != owner:
                raise KeyError(session_id)
            if s is not None and s.pending is not None:
                raise SessionBusy(f"session {session_id!r} already has a turn running")
            held = 0 if s is None else s.nbytes
            if held + size > self.max_session_bytes:
                raise SessionTooLarge(f"session {session_id!r} would hold {held + size} bytes of messages, over "
                                      f"the limit of {self.max_session_bytes} bytes per session "
                                      "(--max-session-bytes); start a new session")
            if s is None:
                tenant = owner if tenant is None else tenant
                self._make_room(tenant, size, new=True, keep=None)
                s = self._sessions[session_id] = _Session(owner, tenant)
                self._tenants.setdefault(tenant, OrderedDict())[session_id] = None
            else:
                self._make_room(s.tenant, size, new=False, keep=session_id)
            s.pending = copy.deepcopy(new_messages)
            s.pending_bytes = size
            self._add_bytes(s.tenant, size)
            self._touch(session_id, s)
            return copy.deepcopy(s.messages) + copy.deepcopy(s.pending)

    def end_turn(self, session_id: str, owner: str, assistant_message: Optional[dict]) -> None:
        """Release the running turn: commit its new messages and `assistant_message`, or
        (None) drop them because the turn failed or was aborted."""
        with self._lock:
            s = self._sessions.get(session_id)
            if s is None or s.owner != owner:
                raise KeyError(session_id)
            if s.pending is None:
                raise ValueError(f"session {session_id!r} has no turn running")
            if assistant_message is not None:
                reply = copy.deepcopy(assistant_message)
                reply_bytes = message_bytes([reply])
                s.messages.extend(s.pending)
                s.messages.append(reply)
                s.nbytes += s.pending_bytes + reply_bytes
                self._add_bytes(s.tenant, reply_bytes)
            else:
                self._add_bytes(s.tenant, -s.pending_bytes)
            s.pending, s.pending_bytes = None, 0
            self._touch(session_id, s)
            if not s.messages:  # a first turn that failed leaves nothing worth keeping
                self._remove(session_id)
            while self.total_bytes > self.max_total_bytes and self._evict_from_largest(self._tenant_bytes, None):
                pass

    def get(self, session_id: str, owner: str) -> list:
        """The committed messages (a copy); KeyError if absent or another owner's."""
        with self._lock:
            self._expire()
            s = self._sessions.get(session_id)
            if s is None or s.owner != owner:
                raise KeyError(session_id)
            return copy.deepcopy(s.messages)

    def delete(self, session_id: str, owner: str) -> bool:
        """Forget a session; False if absent or another owner's. SessionBusy while a turn runs."""
        with self._lock:
            s = self._sessions.get(session_id)
            if s is None or s.owner != owner:
                return False
            if s.pending is not None:
                raise SessionBusy(f"session {session_id!r} has a turn running")
            self._remove(session_id)
            return True

    # ---- bookkeeping (caller holds the lock) --------------------------------------------------
    def _touch(self, session_id: str, s: _Session) -> None:
        s.last_used = self._clock()
        self._sessions.move_to_end(session_id)
        self._tenants[s.tenant].move_to_end(session_id)

    def _add_bytes(self, tenant: str, n: int) -> None:
        self.total_bytes += n
        left = self._tenant_bytes.get(tenant, 0) + n
        assert left >= 0 and self.total_bytes >= 0, "session byte accounting went negative"
        self._tenant_bytes[tenant] = left

    def _remove(self, session_id: str) -> None:
        s = self._sessions.pop(session_id)
        mine = self._tenants[s.tenant]
        del mine[session_id]
        self._add_bytes(s.tenant, -(s.nbytes + s.pending_bytes))
        if not mine:
            del self._tenants[s.tenant]
            del self._tenant_bytes[s.tenant]

    def _expire(self) -> None:
        """Drop idle sessions unused for ttl_s (the map is in last-use order: stops at the first recent one)."""
        cutoff = self._clock() - self.ttl_s
        stale = []
        for sid, s in self._sessions.items():
            if s.last_used > cutoff:
                break
            if s.pending is None:
                stale.append(sid)
        for sid in stale:
            self._remove(sid)

    def _evict_lru(self, tenant: str, keep: Optional[str]) -> bool:
        """Evict the tenant's least recently used idle session other than `keep`; False if none."""
        for sid in self._tenants.get(tenant, ()):
            if sid != keep and self._sessions[sid].pending is None:
                self._remove(sid)
                return True
        return False

    def _evict_from_largest(self, holdings, keep: Optional[str], prefer: Optional[str] = None) -> bool:
        """Evict one idle session of the tenant holding the most (by `holdings`: tenant -> sessions
        or bytes; on a tie, `prefer`, the tenant asking for room), or of the next largest if all
        of that one's are busy; False if none can go."""
        size = (lambda t: len(holdings[t])) if holdings is self._tenants else holdings.get
        for tenant in sorted(holdings, key=lambda t: (size(t), t == prefer), reverse=True):
            if self._evict_lru(tenant, keep):
                return True
        return False

    def _make_room(self, tenant: str, add_bytes: int, new: bool, keep: Optional[str]) -> None:
        """Evict until a new session of `tenant` (new) and `add_bytes` more bytes fit the quotas."""
        mine = self._tenants.get(tenant, ())
        if new and len(mine) >= self.max_per_tenant and not self._evict_lru(tenant, keep):
            raise SessionStoreFull(f"all {self.max_per_tenant} sessions of this caller have a turn running")
        while new and len(self._sessions) >= self.max_sessions:
            if not self._evict_from_largest(self._tenants, keep, tenant):
                raise SessionStoreFull(f"all {self.max_sessions} sessions have a turn running")
        while self.total_bytes + add_bytes > self.max_total_bytes:
            if not self._evict_from_largest(self._tenant_bytes, keep, tenant):
                raise SessionStoreFull(f"the sessions' memory budget ({self.max_total_bytes} bytes) is held by "
                                       "turns that are running")


def _check_id(session_id) -> None:
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
    if len(session_id) > MAX_SESSION_ID_LEN or not session_id.isprintable():
        raise ValueError(f"session_id must be at most {MAX_SESSION_ID_LEN} printable characters")
