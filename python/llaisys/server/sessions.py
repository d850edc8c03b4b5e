"""Server-side chat sessions: the message history of a conversation, kept per owner.

A client that sends ``session_id`` sends only its new messages; the server prepends the
history, and on success appends the new messages and the reply. The prefix cache then finds
the earlier turns' KV, since the rendered prompt of turn k+1 starts with that of turn k.

Rules:
- A session belongs to the owner that created it (the API key or ``user``). Another owner
  gets KeyError for it, exactly as for an id that does not exist, so ids cannot be probed.
- One turn at a time: a second ``begin_turn`` while one runs raises SessionBusy (409).
- A turn that fails or is aborted (``end_turn(..., None)``) leaves the history unchanged.
- At most ``max_sessions`` sessions: the least recently used idle one is evicted to make
  room; sessions idle for ``ttl_s`` seconds expire. A busy session is never evicted.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

MAX_SESSION_ID_LEN = 128


class SessionBusy(Exception):
    """The session already has a turn running."""


class SessionStoreFull(Exception):
    """Every session slot is held by a busy session (nothing can be evicted)."""


@dataclass
class _Session:
    owner: str
    messages: list = field(default_factory=list)  # [{"role", "content", ...}] committed turns
    pending: Optional[list] = None  # the running turn's new messages; None when idle
    last_used: float = 0.0  # clock() of the last begin/end


class SessionStore:
    """Thread-safe; every method takes the caller's owner id."""

    def __init__(self, max_sessions: int = 1024, ttl_s: float = 3600.0, clock: Callable[[], float] = time.monotonic):
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
        if not isinstance(ttl_s, (int, float)) or isinstance(ttl_s, bool) or not ttl_s > 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
        self.max_sessions = max_sessions
        self.ttl_s = float(ttl_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict = OrderedDict()  # session id -> _Session, least recently used first

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._sessions)

    def begin_turn(self, session_id: str, owner: str, new_messages: list) -> list:
        """The history plus `new_messages` (copies): the conversation to prompt with.
        Creates the session if absent. KeyError if it belongs to another owner,
        SessionBusy if a turn is running, ValueError for a malformed id or messages."""
        _check_id(session_id)
        if not isinstance(new_messages, list) or not new_messages:
            raise ValueError("a session turn needs at least one new message")
        with self._lock:
            self._expire()
            s = self._sessions.get(session_id)
            if s is None:
                self._make_room()
                s = self._sessions[session_id] = _Session(owner)
            elif s.owner != owner:
                raise KeyError(session_id)
            if s.pending is not None:
                raise SessionBusy(f"session {session_id!r} already has a turn running")
            s.pending = copy.deepcopy(new_messages)
            s.last_used = self._clock()
            self._sessions.move_to_end(session_id)
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
                s.messages.extend(s.pending)
                s.messages.append(copy.deepcopy(assistant_message))
            s.pending = None
            s.last_used = self._clock()
            if not s.messages:  # a first turn that failed leaves nothing worth keeping
                del self._sessions[session_id]

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
            del self._sessions[session_id]
            return True

    # ---- eviction (caller holds the lock) ---------------------------------------------------
    def _expire(self) -> None:
        cutoff = self._clock() - self.ttl_s
        for sid in [sid for sid, s in self._sessions.items() if s.pending is None and s.last_used <= cutoff]:
            del self._sessions[sid]

    def _make_room(self) -> None:
        if len(self._sessions) < self.max_sessions:
            return
        for sid, s in self._sessions.items():  # least recently used first
            if s.pending is None:
                del self._sessions[sid]
                return
        raise SessionStoreFull(f"all {self.max_sessions} sessions have a turn running")


def _check_id(session_id) -> None:
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
    if len(session_id) > MAX_SESSION_ID_LEN or not session_id.isprintable():
        raise ValueError(f"session_id must be at most {MAX_SESSION_ID_LEN} printable characters")
