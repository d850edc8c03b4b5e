"""The parser of tool calls in a model's streamed answer (see tool_calls.py for the format
and the rules): content text, and the complete calls, each with its id, name and arguments
exactly as the model wrote them.

A call is released only once it is complete (its `</tool_call>`, or the close of a bare
call's object) and its arguments parse as a JSON object: a call cut by max_tokens, a stop
string or the end of the output is dropped, never returned half written, and its markup never
reaches the content. The list of calls ends (``ended``; the caller stops the generation) at a
call identical to an earlier one (same name, same arguments JSON), which is dropped: small
models repeat a call until max_tokens; and after ``max_calls`` calls.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Optional

from ...engine.structured_tools import MAX_TOOL_CALLS
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
    """One parsed, complete call."""

    index: int  # position among this choice's calls
    id: str  # call_...
    name: str
    arguments: str = ""  # the arguments JSON text, as the model wrote it


@dataclass
class ToolEvents:
    """One feed's output: new content text, calls completed."""

    content: str = ""
    started: list = field(default_factory=list)  # Call objects completed by this feed (id and name new)
    arguments: list = field(default_factory=list)  # (call index, its whole arguments text), per started call
    finished: list = field(default_factory=list)  # the same calls (a call is released whole)
    ended: bool = False  # the list of calls ended here: a repeated call, or max_calls reached


def _same_key(name: str, arguments: str) -> tuple:
    """What two calls must share to be the same call: the name and the arguments' JSON value."""
    try:
        return name, json.dumps(json.loads(arguments), sort_keys=True)
    except (ValueError, RecursionError):
        return name, arguments


def _object_arguments(text: str) -> bool:
    """Whether `text` parses as a JSON object (a call's arguments must)."""
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


class ToolCallParser:
    """Splits one choice's answer text into content and tool calls (see the module doc)."""

    def __init__(self, names: Optional[list] = None, max_calls: int = MAX_TOOL_CALLS):
        self.names = names  # the request's function names (None: any)
        self.max_calls = max_calls  # calls after which the list ends (1 for parallel_tool_calls false)
        self.calls: list = []  # complete Calls, in order
        self.ended = False  # the list ended (a repeat, or max_calls): nothing more is read
        self._keys: set = set()  # _same_key of each call in self.calls
        self._buf = ""  # text not yet assigned
        self._in_call = False  # inside <tool_call> ... </tool_call>
        self._body = ""  # the current block's text after <tool_call>
        self._ws = ""  # whitespace-only content held back
        self._at_start = True  # nothing of the answer read yet: a bare call may open it
        self._bare = False  # inside a bare call (no <tool_call> tag): it ends where its JSON object does
        self._scan = None  # the bare call's _ObjectEnd

    def feed(self, text: str, final: bool = False) -> ToolEvents:
        ev = ToolEvents()
        if self.ended:
            return ev
        self._buf += text
        while self._buf and not self.ended:
            if not self._in_call and self._at_start:
                if not self._start_bare(final):
                    break
                continue
            if self._bare:
                end = self._scan.feed(self._buf)
                if end is None:
                    self._body += self._buf
                    self._buf = ""
                    break
                self._body += self._buf[:end + 1]
                self._buf = self._buf[end + 1:]
                self._end_block(ev)
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
                self._in_call, self._body = True, ""
                continue
            j = self._buf.find(CLOSE)
            if j >= 0:
                self._body += self._buf[:j]
                self._buf = self._buf[j + len(CLOSE):]
                self._end_block(ev)
                continue
            keep = 0 if final else partial_suffix(self._buf, CLOSE)
            self._body += self._buf[:len(self._buf) - keep]
            self._buf = self._buf[len(self._buf) - keep:]
            break
        if self.ended:
            ev.ended, self._buf = True, ""
            return ev
        if final:  # an unfinished block (max_tokens, a stop string, EOS inside it) is dropped
            self._in_call, self._bare, self._body = False, False, ""
            self._emit_content(ev, "", final=True)
        return ev

    def _start_bare(self, final: bool) -> bool:
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
        if m is not None and self._known(m.group(1)) is not None:
            self._in_call, self._bare, self._body = True, True, ""
            self._buf = lead
            self._scan = _ObjectEnd()
        return True

    def _known(self, quoted: str) -> Optional[str]:
        """The function name of a head's quoted name if it is one of the request's, else None."""
        try:
            name = json.loads(f'"{quoted}"')
        except ValueError:
            return None
        return name if self.names is None or name in self.names else None

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

    def _end_block(self, ev: ToolEvents) -> None:
        """A block closed: a new call, the end of the list (a repeat), or content as written."""
        body, bare = self._body, self._bare
        self._in_call, self._body, self._bare = False, "", False
        m = _HEAD.match(body)
        name = self._known(m.group(1)) if m is not None else None
        arguments = ""
        if name is not None:  # the arguments end before the call object's closing brace
            arguments = body[m.end():].rstrip()
            arguments = arguments[:-1].rstrip() if arguments.endswith("}") else arguments
        if name is None or not _object_arguments(arguments):  # not a call: stays in the content
            self._emit_content(ev, body if bare else OPEN + body + CLOSE)
            return
        key = _same_key(name, arguments)
        if key in self._keys:
            self.ended = True
            return
        self._keys.add(key)
        call = Call(len(self.calls), new_call_id(), name, arguments)
        self.calls.append(call)
        ev.started.append(call)
        ev.arguments.append((call.index, arguments))
        ev.finished.append(call)
        if len(self.calls) >= self.max_calls:
            self.ended = True
