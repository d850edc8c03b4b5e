"""Tool calling: the request's `tools` / `tool_choice` checked, conversation messages made
ready for the model's own chat template, and the model's `<tool_call>{json}</tool_call>`
blocks (Qwen2.5's format, also Hermes' and Qwen3's) parsed into OpenAI `tool_calls`.

The parser reads text as it streams and emits, per call, first its id and function name
(once `{"name": "...", "arguments": ` is known), then the arguments text in pieces as the
model writes it. The arguments string is exactly the JSON text the model wrote between
`"arguments": ` and the closing `}`, so the streamed pieces join to the non-streamed value.
Text before the first call is the message's content; a block that does not hold a call
(`{"name": str, "arguments": object}`) is left in the content as written. An answer that
opens with such an object without the tags (Qwen2.5-Coder 0.5B answers so) is read as a call
too, when the name is one of the request's functions; it ends where the object closes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Optional

from .errors import bad_request

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's rule for function names
_HEAD = re.compile(r'^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=\S)')


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


@dataclass
class ToolConfig:
    """A chat request's tool settings, checked."""

    tools: list  # [{"type": "function", "function": {...}}] as given (rendered into the prompt)
    choice: object = "auto"  # "auto" | "none" | "required" | the named function's name (str in `named`)
    named: Optional[str] = None  # tool_choice {"type": "function", "function": {"name": ...}}
    parallel: bool = True  # parallel_tool_calls

    @property
    def parse(self) -> bool:
        """Whether the output is parsed for calls (tools given, tool_choice not "none")."""
        return bool(self.tools) and self.choice != "none"

    @property
    def names(self) -> list:
        return [t["function"]["name"] for t in self.tools]


def check_tools(tools, tool_choice, parallel) -> Optional[ToolConfig]:
    """ToolConfig from a body's (schema-checked) fields, None without tools; 400 naming
    `tools` or `tool_choice` for what the schema cannot see."""
    tools = tools or []
    names = set()
    for i, t in enumerate(tools):
        name = t["function"]["name"]
        if not NAME_RE.match(name):
            raise bad_request(f"tools[{i}].function.name must be 1 to 64 letters, digits, '_' or '-', got {name!r}",
                              param="tools")
        if name in names:
            raise bad_request(f"tools[{i}].function.name {name!r} is given twice", param="tools")
        names.add(name)
        params = t["function"].get("parameters")
        if params is not None and params.get("type", "object") != "object":
            raise bad_request(f"tools[{i}].function.parameters must be a JSON Schema of type 'object'",
                              param="tools")
    named = None
    if isinstance(tool_choice, dict):
        named = tool_choice["function"]["name"]
        if named not in names:
            raise bad_request(f"tool_choice names function {named!r}, which is not among the tools", param="tool_choice")
    elif tool_choice == "required" and not tools:
        raise bad_request("tool_choice 'required' needs tools", param="tool_choice")
    if not tools:
        return None
    choice = "named" if named is not None else (tool_choice or "auto")
    return ToolConfig(tools=tools, choice=choice, named=named, parallel=True if parallel is None else parallel)


def template_messages(messages: list) -> list:
    """Messages as chat templates expect them: an assistant turn's tool call arguments (a JSON
    string in OpenAI's API) as the object they encode (Qwen2.5's template writes them with
    `tojson`). 400 naming `messages` for arguments that are not a JSON object."""
    out = []
    for i, m in enumerate(messages):
        calls = m.get("tool_calls")
        if not calls:
            out.append(m)
            continue
        fixed = []
        for j, c in enumerate(calls):
            if not isinstance(c, dict) or not isinstance(c.get("function"), dict) \
                    or not isinstance(c["function"].get("name"), str):
                raise bad_request(f"messages[{i}].tool_calls[{j}] must be {{'id', 'type': 'function', 'function': "
                                  "{'name', 'arguments'}}", param="messages")
            args = c["function"].get("arguments", "{}")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    raise bad_request(f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON",
                                      param="messages") from None
            if not isinstance(args, dict):
                raise bad_request(f"messages[{i}].tool_calls[{j}].function.arguments must encode a JSON object",
                                  param="messages")
            fixed.append(dict(c, function=dict(c["function"], arguments=args)))
        out.append(dict(m, tool_calls=fixed))
    return out


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


def _partial_suffix(text: str, tag: str) -> int:
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


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
                    keep = 0 if final else _partial_suffix(self._buf, OPEN)
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
            keep = 0 if final else _partial_suffix(self._buf, CLOSE)
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


def with_tool_constraint(sp, tools: Optional[ToolConfig]):
    """SamplingParams `sp`, constrained for tool_choice "required" / a named function so that
    the output is `<tool_call>` blocks whose arguments parse against the function's
    parameters schema (engine/structured_tools.py's tool_call_spec, a grammar the sampler
    applies as a per-row token mask). Other requests are returned as they are; a parameters
    schema the grammar compiler refuses is a 400 naming `tools`."""
    if tools is None or tools.choice not in ("required", "named"):
        return sp
    from ..engine.structured import StructuredOutputError
    from ..engine.structured_tools import tool_call_spec

    choice = {"type": "function", "function": {"name": tools.named}} if tools.named else "required"
    try:
        spec = tool_call_spec(tools.tools, choice, tools.parallel)
    except StructuredOutputError as e:
        raise bad_request(str(e), param=e.param or "tools") from None
    return dataclasses.replace(sp, structured=spec)
