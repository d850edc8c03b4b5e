"""Incremental detokenization for one sequence (stop strings: output_processor.StopMatcher).

``decode(ids, skip_special_tokens=...) -> str`` is the tokenizer's; a decode that ends in
U+FFFD means the last token ended inside a UTF-8 character, so the text waits for the next
token. Decoding a short window (the tokens since the previous emit, after some context)
keeps each step O(1) and keeps tokenizers that drop a word's leading space right.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

PROMPT_CONTEXT = 5  # prompt tokens decoded as left context of the first output token
REPLACEMENT = "\ufffd"
MEMO_IDS = 1 << 18  # one-token decodes kept per skip_special_tokens value (a vocabulary's worth)


class MemoDecode:
    """``decode`` with the text of single ids memoised: a steady decode step's window is the
    token emitted last (the context) plus the new one, so half its decodes are of one id, and a
    tokenizer's decode is a pure function of the ids. Longer windows go to ``decode`` as they are.

    ``concatenates``: decode(a + b) == decode(a) + decode(b) whenever neither text holds U+FFFD,
    as for a byte-level decoder (Qwen2's, Llama 3's: the ids' bytes joined, then read as UTF-8,
    so two runs of whole characters read as the two texts joined; models/tokenizer.py's
    ``decode_concatenates``). Then a token after a clean context is its own memoised text, and
    the detokenizer skips the window's decode. Not so where a decoder strips a leading space
    (SentencePiece's)."""

    def __init__(self, decode: Callable, concatenates: bool = False):
        self._decode = decode
        self._one = ({}, {})  # by skip_special_tokens: token id -> text
        self.concatenates = concatenates

    def __call__(self, ids, skip_special_tokens: bool = False) -> str:
        if len(ids) != 1:
            return self._decode(ids, skip_special_tokens=skip_special_tokens)
        memo = self._one[bool(skip_special_tokens)]
        text = memo.get(ids[0])
        if text is None:
            text = self._decode(ids, skip_special_tokens=skip_special_tokens)
            if len(memo) < MEMO_IDS:
                memo[ids[0]] = text
        return text


class IncrementalDetokenizer:
    def __init__(self, decode: Callable, prompt_token_ids: Sequence[int], skip_special_tokens: bool):
        self._decode = decode
        self._skip = skip_special_tokens
        # a MemoDecode's single-id texts, read here directly (the window's context is one id
        # in steady decoding), and the decode behind it for the longer windows
        memo = decode if isinstance(decode, MemoDecode) else None
        self._memo = None if memo is None else memo._one[bool(skip_special_tokens)]
        self._many = decode if memo is None else memo._decode
        self._concat = memo is not None and memo.concatenates
        self._ids = list(prompt_token_ids[-PROMPT_CONTEXT:])  # window: context + tokens not yet emitted
        self._read = len(self._ids)  # start of the tokens not yet turned into text
        self._before: Optional[str] = None  # the text of the context ids[:_read], once decoded

    def add(self, token_id: Optional[int], final: bool = False) -> str:
        """Append a token (None: none); return the complete characters it finished (maybe none).
        ``final``: nothing more is coming, a broken character is given as U+FFFD (flush)."""
        ids = self._ids
        before = self._before
        if before is None:  # the context's text, once a window
            memo = self._memo
            if self._read == 1 and memo is not None:
                before = memo.get(ids[0])
            if before is None:
                before = self._decode(ids[:self._read], skip_special_tokens=self._skip)
            self._before = before
        if self._concat and token_id is not None and self._read == len(ids) and REPLACEMENT not in before:
            # nothing pending after a clean context: a clean token's text is what the window's
            # decode would add (MemoDecode.concatenates), and it becomes the next context
            text = self._memo.get(token_id)
            if text is None:
                text = self._decode([token_id], skip_special_tokens=self._skip)  # memoised
            if text and REPLACEMENT not in text:
                self._ids, self._read, self._before = [token_id], 1, text
                return text
        if token_id is not None:
            ids.append(token_id)
        full = self._many(ids, skip_special_tokens=self._skip) if len(ids) > 1 else \
            self._decode(ids, skip_special_tokens=self._skip)
        if len(full) <= len(before) or (not final and full.endswith(REPLACEMENT)):
            return ""
        self._ids = ids[self._read:]  # the new text's tokens become the next context
        self._read, self._before = len(self._ids), None
        return full[len(before):]

    def flush(self) -> str:
        """At the end: whatever is still pending, a broken character as U+FFFD."""
        return self.add(None, final=True)
