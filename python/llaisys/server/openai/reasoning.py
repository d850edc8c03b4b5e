"""Reasoning split: the `<think>…</think>` block of a reasoning model returned apart from
its answer (``message.reasoning_content`` / ``delta.reasoning_content``, the answer as
``content``), as DeepSeek's API and vLLM do.

Parsers (``llaisys serve --reasoning-parser``):
- ``deepseek_r1``: everything before ``</think>`` is reasoning, with or without an opening
  ``<think>`` in the output (R1-Distill templates open it in the generation prompt; older
  ones leave it to the model). No ``</think>`` at all: the whole output is reasoning.
- ``qwen3``: reasoning only inside ``<think>…</think>`` that opens the output (or that the
  generation prompt left open); an output that does not start with ``<think>`` is all answer.
- ``auto``: chosen from the chat template (``<｜Assistant｜>`` with ``<think>``: deepseek_r1;
  any other template that mentions ``<think>``: qwen3; otherwise none).
- ``none``: no split.

The split works on text as it streams: a tag cut across two deltas is held back until it is
known, so the streamed pieces add up to exactly the non-streamed fields. Whitespace between
``</think>`` and the answer is dropped (the template puts it there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

PARSERS = ("auto", "deepseek_r1", "qwen3", "none")
OPEN, CLOSE = "<think>", "</think>"


def parser_for_template(template: Optional[str]) -> Optional[str]:
    """The parser `auto` picks for a chat template's source (None: the model does not reason)."""
    if not template or OPEN not in template:
        return None
    return "deepseek_r1" if "｜Assistant｜" in template else "qwen3"


def resolve_parser(choice: str, template: Optional[str]) -> Optional[str]:
    """The parser a served model uses for `--reasoning-parser choice` (None: no split)."""
    if choice not in PARSERS:
        raise ValueError(f"reasoning parser must be one of {', '.join(PARSERS)}, got {choice!r}")
    if choice == "auto":
        return parser_for_template(template)
    return None if choice == "none" else choice


def opened_in_prompt(prompt: str) -> bool:
    """True when the rendered prompt ends inside a `<think>` block the template opened."""
    tail = prompt.rstrip()
    return tail.endswith(OPEN)


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag` (what a stream
    must hold back: it may be the start of the tag). Used by the tool-call parser too."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


@dataclass
class Split:
    """One feed's new text, by field."""

    reasoning: str = ""  # new reasoning text
    content: str = ""  # new answer text


class ReasoningSplitter:
    """Splits one choice's streamed text into reasoning and answer.

    States: "start" (the output may still open `<think>`), "reasoning", "answer".
    """

    def __init__(self, parser: str, opened: bool):
        self.parser = parser  # "deepseek_r1" | "qwen3"
        self.state = "reasoning" if (opened or parser == "deepseek_r1") else "start"
        self.strip_open = True  # drop a `<think>` the model writes at the very start
        self._held = ""  # text not yet assigned (a tag may be cut across deltas)
        self._answer_started = False  # leading whitespace of the answer is dropped until text comes
        self.reasoning_seen = False  # some reasoning text was produced (or a block opened)

    @property
    def in_reasoning(self) -> bool:
        return self.state in ("start", "reasoning")

    def feed(self, text: str, final: bool = False) -> Split:
        """Assign `text` (and what was held); with `final`, flush everything."""
        buf = self._held + text
        self._held = ""
        out = Split()
        while buf:
            if self.state == "start":
                lead = buf.lstrip()
                if lead.startswith(OPEN):
                    self.state, self.reasoning_seen = "reasoning", True
                    buf = lead[len(OPEN):]
                    self.strip_open = False
                    continue
                if OPEN.startswith(lead) and not final:  # whitespace or a cut `<thi`: wait
                    self._held = buf
                    break
                self.state = "answer"
                continue
            if self.state == "reasoning":
                if self.strip_open:
                    lead = buf.lstrip()
                    if lead.startswith(OPEN):
                        buf = lead[len(OPEN):]
                        self.strip_open = False
                        continue
                    if OPEN.startswith(lead) and not final:
                        self._held = buf
                        break
                    self.strip_open = False
                i = buf.find(CLOSE)
                if i >= 0:
                    out.reasoning += buf[:i]
                    buf = buf[i + len(CLOSE):]
                    self.state = "answer"
                    self.reasoning_seen = True
                    continue
                keep = 0 if final else partial_suffix(buf, CLOSE)
                out.reasoning += buf[:len(buf) - keep]
                self._held = buf[len(buf) - keep:]
                break
            # answer
            if not self._answer_started:
                buf = buf.lstrip()
                if not buf:
                    break
                self._answer_started = True
            out.content += buf
            break
        if out.reasoning:
            self.reasoning_seen = True
        return out
