"""One chat choice's text turned into an assistant message: reasoning split off, stop strings
matched in the answer, tool calls parsed. The same object serves a stream (``feed`` returns
each output's new pieces) and a JSON body (``message()`` is what the pieces add up to), so
a streamed answer reassembles to the non-streamed one by construction.

Order per output: the raw text goes through the reasoning splitter (``reasoning.py``); the
answer part through the stop-string matcher, then the tool-call parser (``tool_calls.py``).
Stop strings are matched here, on the answer only, when a reasoning parser is on (the
engine then gets none: it would match them inside the reasoning too); otherwise the engine
matches them as before. A server-side stop, or the end of the first call when
``parallel_tool_calls`` is false, a call repeating an earlier one or the MAX_TOOL_CALLS-th
call (the parser's ``ended``) ends the choice: ``stopped`` turns true and the route aborts
the engine request once every choice has ended. A choice that returns calls finishes with
"tool_calls", also when the engine stopped it at max_tokens after them (the cut call that
was being written is dropped by the parser).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ...engine.output_processor import StopMatcher
from .reasoning import ReasoningSplitter
from .tool_calls import ToolConfig
from .tool_parser import MAX_TOOL_CALLS, ToolCallParser


@dataclass
class ChoiceDelta:
    """New pieces of one choice from one engine output."""

    reasoning: str = ""  # reasoning_content text
    content: str = ""  # answer text
    started: list = field(default_factory=list)  # tool_calls.Call objects completed now (id and name new)
    arguments: list = field(default_factory=list)  # (call index, arguments text), after its call's head

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.started or self.arguments)


class ChoiceOutput:
    """Reassembles one choice (see the module doc)."""

    def __init__(self, reasoning_parser: Optional[str] = None, opened: bool = False,
                 tools: Optional[ToolConfig] = None, stops: Optional[list] = None, include_stop: bool = False,
                 min_tokens: int = 0):
        self.min_tokens = min_tokens  # output tokens before a stop string may match (as in the engine)
        self.splitter = ReasoningSplitter(reasoning_parser, opened) if reasoning_parser else None
        self.stop = StopMatcher(stops or [], include_stop)
        self.tools = tools if tools is not None and tools.parse else None
        self.parser = ToolCallParser(self.tools.names, MAX_TOOL_CALLS if self.tools.parallel else 1) \
            if self.tools else None
        self.reasoning = ""  # reasoning text so far
        self.content = ""  # answer text so far
        self.stopped = False  # ended here (stop string, the end of the call list: see the module doc)
        self.done = False  # final output seen
        self.engine_output = None  # the engine's latest CompletionOutput of this choice (set by the route)

    def feed(self, text: str, final: bool = False, num_tokens: Optional[int] = None) -> ChoiceDelta:
        """num_tokens: output tokens generated so far (None: min_tokens is out)."""
        d = ChoiceDelta()
        if self.stopped or self.done:
            return d
        self.done = final
        answer = text
        if self.splitter is not None:
            s = self.splitter.feed(text, final)
            d.reasoning, answer = s.reasoning, s.content
        answer = self.stop.feed(answer, final, num_tokens is None or num_tokens >= self.min_tokens)
        final_here = final or self.stop.matched
        if self.parser is not None:
            ev = self.parser.feed(answer, final_here)
            d.content, d.started, d.arguments = ev.content, ev.started, ev.arguments
            if ev.ended:
                self.stopped = True
        else:
            d.content = answer
        if self.stop.matched:
            self.stopped = True
        self.reasoning += d.reasoning
        self.content += d.content
        return d

    @property
    def calls(self) -> list:
        return self.parser.calls if self.parser is not None else []

    def finish_reason(self, engine_reason: Optional[str]) -> Optional[str]:
        """The reported finish_reason, from the engine's ("stop" | "length" | "abort" | None) and
        ours: "tool_calls" whenever calls are returned (an explicit cancel stays "abort")."""
        if self.calls and (self.stopped or engine_reason in ("stop", "length")):
            return "tool_calls"
        if self.stopped:
            return "stop"
        return engine_reason

    def tool_calls(self) -> list:
        return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.calls]

    def message(self) -> dict:
        """The assistant message the choice's pieces add up to."""
        msg: dict = {"role": "assistant"}
        no_answer = not self.content and (self.calls or (self.splitter is not None and self.splitter.in_reasoning))
        msg["content"] = None if no_answer else self.content
        if self.splitter is not None:
            msg["reasoning_content"] = self.reasoning if self.splitter.reasoning_seen or self.reasoning else None
        if self.calls:
            msg["tool_calls"] = self.tool_calls()
        return msg


def delta_bodies(d: ChoiceDelta) -> list:
    """The `delta` objects of OpenAI chat chunks for one ChoiceDelta, in order: reasoning,
    content, then per call its head (index, id, type, function.name, arguments "") and
    argument pieces ({index, function: {arguments}})."""
    out = []
    if d.reasoning:
        out.append({"reasoning_content": d.reasoning})
    if d.content:
        out.append({"content": d.content})
    for c in d.started:
        out.append({"tool_calls": [{"index": c.index, "id": c.id, "type": "function",
                                    "function": {"name": c.name, "arguments": ""}}]})
    for index, piece in d.arguments:
        out.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return out


@dataclass
class ChatSetup:
    """How a chat request's choices are read (one ChoiceOutput per choice)."""

    reasoning_parser: Optional[str] = None  # "deepseek_r1" | "qwen3" | None (no split)
    opened: bool = False  # the prompt ends inside a <think> block the template opened
    tools: Optional[ToolConfig] = None  # the request's tools, None without
    stops: list = field(default_factory=list)  # stop strings matched here (only with a reasoning parser)
    include_stop: bool = False  # include_stop_str_in_output
    min_tokens: int = 0  # the request's min_tokens: stop strings match only after that many tokens

    def new_output(self) -> ChoiceOutput:
        return ChoiceOutput(self.reasoning_parser, self.opened, self.tools, self.stops, self.include_stop,
                            self.min_tokens)
