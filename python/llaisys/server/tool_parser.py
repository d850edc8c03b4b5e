"""The parser of tool calls in a model's streamed answer (see tool_calls.py for the format
and the rules): content text, and per call its head (id, name) then its arguments text in
pieces, exactly as the model wrote it."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Optional

from .reasoning import partial_suffix

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_HEAD = re.compile(r'^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=\S)')


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


BARE_HEAD_WAIT = 256  # characters an answer opening with `{` is held to see whether it is a bare call


class _ObjectEnd:
    """Finds where a JSON object that starts the text closes, fed piece by piece."""

    def __init__(self):
        self.depth, self.in_str, self.esc, self.seen = 0, False, False, 0

    def feed(self, text: str) -> Optional[int]:
        """Index in `text` of the closing brace, or None (not yet)."""
        for i, ch in enumerate(text):
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif ch == "\\":
                    self.esc = True
                elif ch == '"':
                    self.in_str = False
            elif ch == '"':
                self.in_str = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return i
        return None


@dataclass
class Call:
    """One parsed call as it streams."""

    index: int  # position among this choice's calls
    id: str  # call_...
    name: str
    arguments: str = ""  # the arguments text emitted so far


@dataclass
class ToolEvents:
    """One feed's output: new content text, calls that started, argument pieces."""

    content: str = ""
    started: list = field(default_factory=list)  # Call objects whose name is now known
    arguments: list = field(default_factory=list)  # (call index, new arguments text)
    finished: list = field(default_factory=list)  # calls whose `</tool_call>` came


class ToolCallParser:
    """Splits one choice's answer text into content and tool calls (see the module doc)."""

    def __init__(self, names: Optional[list] = None):
        self.names = names  # the request's function names (None: any)
        self.calls: list = []  # Call, in order
        self._buf = ""  # text not yet assigned
        self._in_call = False  # inside <tool_call> ... </tool_call>
        self._call: Optional[Call] = None  # the current block's call once its head parsed
        self._body = ""  # the current block's text after <tool_call>
        self._ws = ""  # whitespace-only content held back
        self._head_len = 0  # length of `{"name": "...", "arguments": ` in _body
        self._at_start = True  # nothing of the answer read yet: a bare call may open it
        self._bare = False  # inside a bare call (no <tool_call> tag): it ends where its JSON object does
        self._scan = None  # the bare call's _ObjectEnd

    def feed(self, text: str, final: bool = False) -> ToolEvents:
        ev = ToolEvents()
        self._buf += text
        while self._buf:
            if not self._in_call and self._at_start:
                if not self._start_bare(ev, final):
                    break
                continue
            if self._bare:
                end = self._scan.feed(self._buf)
                if end is None:
                    self._body += self._buf
                    self._buf = ""
                    self._advance(ev, final=False)
                    break
                self._body += self._buf[:end + 1]
                self._buf = self._buf[end + 1:]
                self._end_block(ev, closed=True)
                continue
            if not self._in_call:
                i = self._buf.find(OPEN)
                if i < 0:
                    keep = 0 if final else partial_suffix(self._buf, OPEN)
                    self._emit_content(ev, self._buf[:len(self._buf) - keep], final)
                    self._buf = self._buf[len(self._buf) - keep:]
                    break
                self._emit_content(ev, self._buf[:i])
                self._buf = self._buf[i + len(OPEN):]
                self._in_call, self._body, self._call = True, "", None
                continue
            j = self._buf.find(CLOSE)
            if j >= 0:
                self._body += self._buf[:j]
                self._buf = self._buf[j + len(CLOSE):]
                self._end_block(ev, closed=True)
                continue
            keep = 0 if final else partial_suffix(self._buf, CLOSE)
            self._body += self._buf[:len(self._buf) - keep]
            self._buf = self._buf[len(self._buf) - keep:]
            self._advance(ev, final=False)
            break
        if final and self._in_call:  # the output ended inside a block (max_tokens, EOS)
            self._end_block(ev, closed=False)
        if final:
            self._emit_content(ev, "", final=True)
        return ev

    def _start_bare(self, ev: ToolEvents, final: bool) -> bool:
        """At the answer's start: a bare `{"name": <a tool>, "arguments": ...}` (small models
        often leave out the tags) is read as a call. False: wait for more text."""
        lead = self._buf.lstrip()
        if not lead:
            if final:
                self._at_start = False
                return True
            return False
        if not lead.startswith("{"):
            self._at_start = False
            return True
        m = _HEAD.match(lead)
        if m is None and not final and len(lead) < BARE_HEAD_WAIT:
            return False  # not decided yet
        self._at_start = False
        try:
            known = m is not None and (self.names is None or json.loads(f'"{m.group(1)}"') in self.names)
        except ValueError:
            known = False
        if known:
            self._in_call, self._bare, self._body, self._call = True, True, "", None
            self._buf = lead
            self._scan = _ObjectEnd()
        return True

    def _emit_content(self, ev: ToolEvents, text: str, final: bool = False) -> None:
        """Content text; whitespace is held until text follows it (whitespace around calls is
        not content) or the output ends without calls."""
        text = self._ws + text
        self._ws = ""
        if not text.strip():
            if final and not self.calls:
                ev.content += text
            else:
                self._ws = text
            return
        ev.content += text

    def _advance(self, ev: ToolEvents, final: bool, closed: bool = False) -> None:
        """Start the call once its head is known and emit the arguments text that is certain."""
        if self._call is None:
            m = _HEAD.match(self._body)
            if m is None:
                return
            try:
                name = json.loads(f'"{m.group(1)}"')
            except ValueError:
                return
            if self.names is not None and name not in self.names:
                return
            self._call = Call(len(self.calls), new_call_id(), name)
            self._head_len = m.end()
            self.calls.append(self._call)
            ev.started.append(self._call)
        rest = self._body[self._head_len:]
        if closed:  # the arguments end before the object's closing brace
            stripped = rest.rstrip()
            certain = stripped[:-1].rstrip() if stripped.endswith("}") else stripped
        else:  # hold back trailing whitespace and a `}` that may close the call object
            stripped = rest.rstrip()
            certain = stripped[:-1] if stripped.endswith("}") else stripped
        new = certain[len(self._call.arguments):]
        if new and certain.startswith(self._call.arguments):
            self._call.arguments = certain
            ev.arguments.append((self._call.index, new))

    def _end_block(self, ev: ToolEvents, closed: bool) -> None:
        self._advance(ev, final=True, closed=closed)
        call = self._call
        if call is None:  # not a call: the block stays in the content as written
            self._emit_content(ev, OPEN + self._body + (CLOSE if closed else ""))
        elif closed:
            ev.finished.append(call)
        self._in_call, self._body, self._call, self._bare = False, "", None, False
