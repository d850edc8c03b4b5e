"""Fill-in-the-middle (code infill) prompts for models that have FIM tokens (Qwen2.5-Coder).

Two layouts, both Qwen2.5-Coder's published ones:

- file-level:  ``<|fim_prefix|>{prefix}{typed}<|fim_suffix|>{suffix}<|fim_middle|>``
- repo-level, when extra context chunks are given (and the model has ``<|repo_name|>`` and
  ``<|file_sep|>``)::

      <|repo_name|>{repo name}\\n
      <|file_sep|>{filename 1}\\n{text 1}\\n
      ...
      <|file_sep|>{current filename}\\n
      <|fim_prefix|>{prefix}{typed}<|fim_suffix|>{suffix}<|fim_middle|>

  A model with FIM tokens but no repo tokens gets the chunks before the FIM part, each after a
  ``\\n\\n--- snippet ---\\n\\n`` line (llama-server's fallback).

The FIM token ids are read from the tokenizer's added (special) tokens by their text; nothing
is hard-coded but the token names. User text (prefix, suffix, chunks, file names) is
tokenized as plain text, as llama-server does: a ``<|file_sep|>`` typed in a file is the six
characters, never the control token.

The text typed on the cursor line (``typed``, /infill's ``prompt``) ends the prefix, as in
llama-server's code. Putting it after ``<|fim_middle|>`` instead (where llama-server's
documentation once had it) would leave the suffix before it, so a keystroke would not make the
suffix be computed again; but the middle would then continue a token boundary the model never
saw in training (``prompt: "    "`` made the 0.5B indent ``else:`` by five spaces), so the
prefix it is.

Fitting the context (llama-server's rule): the local part (prefix + typed text + suffix) gets
at most ``LOCAL_MAX`` tokens, split prefix:suffix = 3:1 when both are long (the prefix loses
its start, the suffix its end; a side shorter than its share leaves the rest to the other);
the extra chunks fill what is left of the budget, the newest (last) first, and are dropped
whole, oldest first, when they do not fit. The chunks come first in the prompt in the order
given, so chunks that stay the same across requests (an editor's ring) are a stable prefix
that the engine's prefix cache serves.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Optional, Sequence

FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
FIM_PAD, REPO_NAME, FILE_SEP = "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"
# tokens that end a FIM generation, when the model has them (llama.cpp's end-of-generation set
# for Qwen2.5-Coder, plus the three FIM markers, which never belong in a middle)
END_TOKENS = (FIM_PAD, FILE_SEP, REPO_NAME, "<|endoftext|>", FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)
LOCAL_MAX = 2048  # most tokens of prefix + typed text + suffix (llama-server's default batch)
DEFAULT_REPO = "myproject"  # llama-server's repo name (the API has no field for it)
DEFAULT_FILENAME = "filename"  # llama-server's name of the file being edited
SNIPPET_SEP = "\n\n--- snippet ---\n\n"  # chunk separator without repo tokens (llama-server's)


@dataclass(frozen=True)
class ExtraChunk:
    """One chunk of extra context: text from another file (or elsewhere in this one)."""

    filename: str  # its file's name, written after <|file_sep|>
    text: str  # its text


@dataclass(frozen=True)
class FimTokens:
    """The FIM token ids of one tokenizer."""

    prefix: int  # <|fim_prefix|>
    suffix: int  # <|fim_suffix|>
    middle: int  # <|fim_middle|>
    repo: Optional[int]  # <|repo_name|>; None: no repo-level layout
    file_sep: Optional[int]  # <|file_sep|>; None: no repo-level layout
    stop_ids: tuple  # ids that end a FIM generation (END_TOKENS present + the tokenizer's stop ids)


@dataclass
class FimPrompt:
    """A built FIM prompt and what fitting it to the budget kept."""

    token_ids: list  # [n_prompt] the prompt
    n_prefix: int  # prefix tokens kept (of n_prefix_in)
    n_suffix: int  # suffix tokens kept (of n_suffix_in)
    n_prefix_in: int  # prefix tokens given
    n_suffix_in: int  # suffix tokens given
    n_chunks: int  # extra chunks kept (the last n_chunks of those given)
    n_chunks_in: int  # extra chunks given

    @classmethod
    def whole(cls, token_ids: list) -> "FimPrompt":
        """A prompt taken as it is (llama-server's /completion): all prefix, nothing left out."""
        n = len(token_ids)
        return cls(token_ids, n, 0, n, 0, 0, 0)

    @property
    def truncated(self) -> bool:
        """Whether anything given was left out to fit the budget."""
        return (self.n_prefix < self.n_prefix_in or self.n_suffix < self.n_suffix_in
                or self.n_chunks < self.n_chunks_in)


class FimCodec:
    """The FIM tokens of one tokenizer and plain-text encoding (special-token text not parsed)."""

    def __init__(self, tokenizer, tokens: FimTokens, special_ids: frozenset):
        self.tokenizer = tokenizer  # models.tokenizer.Tokenizer
        self.tokens = tokens
        self._special_ids = special_ids  # ids of the tokenizer's special added tokens
        self._plain = None  # a copy of the backend that reads special-token text as text (built on need)
        self._lock = threading.Lock()

    def encode(self, text: str) -> list:
        """`text` as plain text: the usual ids unless it spells a special token, then the ids
        of those characters (as llama-server's parse_special=false)."""
        ids = self.tokenizer.encode(text)
        if not any(i in self._special_ids for i in ids):
            return ids
        return self._plain_backend().encode(text, add_special_tokens=False).ids

    def _plain_backend(self):
        with self._lock:
            if self._plain is None:
                import tokenizers

                plain = tokenizers.Tokenizer.from_str(self.tokenizer.backend.to_str())
                plain.encode_special_tokens = True
                self._plain = plain
            return self._plain


_CODECS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> FimCodec or None
_CODECS_LOCK = threading.Lock()
_NONE = object()


def fim_codec(tokenizer) -> Optional[FimCodec]:
    """The FimCodec of `tokenizer`, or None when it lacks any of the prefix/suffix/middle
    tokens (memoised per tokenizer)."""
    with _CODECS_LOCK:
        found = _CODECS.get(tokenizer)
    if found is not None:
        return None if found is _NONE else found
    codec = _read_codec(tokenizer)
    with _CODECS_LOCK:
        _CODECS[tokenizer] = _NONE if codec is None else codec
    return codec


def _read_codec(tokenizer) -> Optional[FimCodec]:
    backend = getattr(tokenizer, "backend", None)
    if backend is None:
        return None
    special = {t.content: i for i, t in backend.get_added_tokens_decoder().items() if t.special}
    if not all(name in special for name in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)):
        return None
    sp = getattr(tokenizer, "special", None)
    stops = [special[n] for n in END_TOKENS if n in special] + list(getattr(sp, "stop_token_ids", ()) or ())
    tokens = FimTokens(prefix=special[FIM_PREFIX], suffix=special[FIM_SUFFIX], middle=special[FIM_MIDDLE],
                       repo=special.get(REPO_NAME), file_sep=special.get(FILE_SEP),
                       stop_ids=tuple(dict.fromkeys(stops)))
    return FimCodec(tokenizer, tokens, frozenset(special.values()))


def _split_local(n_prefix: int, n_suffix: int, room: int) -> tuple:
    """(prefix, suffix) tokens to keep of n_prefix and n_suffix within `room`: all of both if
    they fit, else 3:1, a side under its share leaving the rest to the other."""
    if n_prefix + n_suffix <= room:
        return n_prefix, n_suffix
    share_p = room * 3 // 4
    if n_prefix <= share_p:
        return n_prefix, room - n_prefix
    if n_suffix <= room - share_p:
        return room - n_suffix, n_suffix
    return share_p, room - share_p


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def build_fim_prompt(codec: FimCodec, prefix: str, suffix: str, typed: str = "", extra: Sequence = (),
                     budget: int = 1 << 30, local_max: int = LOCAL_MAX, repo_name: str = DEFAULT_REPO,
                     filename: str = DEFAULT_FILENAME) -> FimPrompt:
    """The FIM prompt of the text before the cursor (`prefix`, then `typed`, the text typed
    after it, kept whole), the text after it (`suffix`) and `extra` chunks (ExtraChunk, oldest
    first), fitted into `budget` tokens. ValueError when the typed text and the FIM markers
    alone do not fit."""
    t = codec.tokens
    p_ids, s_ids, m_ids = codec.encode(prefix), codec.encode(suffix), codec.encode(typed)
    local_room = min(local_max, budget) - 3 - len(m_ids)  # 3: the prefix, suffix and middle markers
    if local_room < 0:
        raise ValueError(f"the typed text ({len(m_ids)} tokens) and the FIM markers do not fit in "
                         f"{min(local_max, budget)} tokens")
    n_p, n_s = _split_local(len(p_ids), len(s_ids), local_room)
    local = [t.prefix] + p_ids[len(p_ids) - n_p:] + m_ids + [t.suffix] + s_ids[:n_s] + [t.middle]
    head, kept = _fit_extra(codec, list(extra), budget - len(local), repo_name, filename)
    return FimPrompt(token_ids=head + local, n_prefix=n_p, n_suffix=n_s, n_prefix_in=len(p_ids),
                     n_suffix_in=len(s_ids), n_chunks=kept, n_chunks_in=len(extra))


def _fit_extra(codec: FimCodec, extra: list, room: int, repo_name: str, filename: str) -> tuple:
    """(ids put before the FIM part, chunks kept): the newest chunks that fit in `room`, in
    their given order, framed by the repo-level header or snippet separators. Chunks are
    tokenized newest first and no further than the room allows."""
    if not extra or room <= 0:
        return [], 0
    t = codec.tokens
    repo_level = t.repo is not None and t.file_sep is not None
    if repo_level:
        open_ids = [t.repo] + codec.encode(repo_name + "\n")
        close_ids = [t.file_sep] + codec.encode(filename + "\n")
    else:
        open_ids, close_ids = [], []
    room -= len(open_ids) + len(close_ids)
    parts = []
    for chunk in reversed(extra):
        if repo_level:
            ids = [t.file_sep] + codec.encode(chunk.filename + "\n") + codec.encode(_with_newline(chunk.text))
        else:
            ids = codec.encode(SNIPPET_SEP + chunk.text)
        if len(ids) > room:
            break
        room -= len(ids)
        parts.append(ids)
    if not parts:
        return [], 0
    head = list(open_ids)
    for ids in reversed(parts):
        head += ids
    return head + close_ids, len(parts)
