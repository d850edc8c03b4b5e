"""Tokenizer for a HuggingFace model directory: `tokenizers` for BPE, jinja2 for chat.

Reads `tokenizer.json`, plus `tokenizer_config.json`, `generation_config.json` and
`config.json` for special tokens, and the chat template from `chat_template.jinja`
or `tokenizer_config.json["chat_template"]`. Chat rendering copies what
`transformers` does (see chat_template.py), so prompts are byte-identical. Every file is
read with a size bound and checked; special token ids must lie inside the model's
vocabulary, and text must be valid Unicode (a lone surrogate is a ValueError here, not a
TypeError from `tokenizers`).
"""

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np
import tokenizers

from .chat_template import DEFAULT_LIMITS, ChatTemplate, ChatTemplateError
from .config import MAX_EOS_IDS
from .files import JSON_FILE_LIMITS, ModelFileError, decode_utf8, read_bytes_bounded, read_json_file, unicode_problem

ROLES = ("system", "user", "assistant", "tool")
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")
_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special tokens the engine cares about (None when the model has none)."""

    bos_token_id: Optional[int]  # beginning of sequence (Qwen2 does not add it when encoding)
    eos_token_id: Optional[int]  # the tokenizer's end token (<|im_end|> for instruct models)
    pad_token_id: Optional[int]  # padding token
    im_start_id: Optional[int]  # <|im_start|>, opens a chat turn
    im_end_id: Optional[int]  # <|im_end|>, closes a chat turn
    stop_token_ids: tuple  # every id that ends generation (eos + generation_config eos ids), in order


def check_text(text: str, what: str = "text") -> None:
    """ValueError unless `text` is valid Unicode (no lone surrogates)."""
    problem = unicode_problem(text)
    if problem:
        raise ValueError(f"{what} {problem}")


def _check_nested(value, what: str, max_depth: int = 64) -> None:
    """ValueError if any string inside `value` (dicts and lists, any depth) is not valid Unicode,
    or if `value` nests deeper than max_depth."""
    stack = [(value, what, 0)]
    while stack:
        v, where, depth = stack.pop()
        if depth > max_depth:
            raise ValueError(f"{what} is nested more than {max_depth} levels deep")
        if isinstance(v, str):
            check_text(v, where)
        elif isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str):
                    check_text(k, f"a key in {where}")
                stack.append((x, f"{where}[{k!r}]", depth + 1))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v))


def validate_messages(messages) -> None:
    """Raise ValueError unless `messages` is a non-empty list of well-formed chat messages."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise ValueError(f"messages[{i}]['role'] must be one of {', '.join(ROLES)}, got {role!r}")
        content = m.get("content")
        tool_calls = m.get("tool_calls")
        if tool_calls is not None and (role != "assistant" or not isinstance(tool_calls, list)):
            raise ValueError(f"messages[{i}]['tool_calls'] must be a list on an assistant message")
        if not (content is None and tool_calls) and not isinstance(content, str):  # else: only calls tools
            raise ValueError(f"messages[{i}]['content'] must be a string, got {type(content).__name__}")
        _check_nested(m, f"messages[{i}]")


def _special_text(tok_config: dict, key: str, source: Path) -> Optional[str]:
    """A special token in tokenizer_config: a string, an AddedToken dict with 'content', or null."""
    value = tok_config.get(key)
    text = value.get("content") if isinstance(value, dict) else value
    if text is None and not isinstance(value, dict):
        return None
    if not isinstance(text, str):
        raise ModelFileError(source, key, f"{key} must be a string or {{\"content\": string}}, "
                                          f"got {type(value).__name__}")
    problem = unicode_problem(text)
    if problem:
        raise ModelFileError(source, key, f"{key} {problem}")
    return text


def _config_ids(config: dict, key: str, source: Path, vocab: int) -> list:
    """The id(s) under `key` (an int, a list of ints, or null), each inside the vocabulary."""
    value = config.get(key)
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    if len(items) > MAX_EOS_IDS:
        raise ModelFileError(source, key, f"{key} lists {len(items)} ids (at most {MAX_EOS_IDS})")
    for v in items:
        if not isinstance(v, int) or isinstance(v, bool):
            raise ModelFileError(source, key, f"{key} must be an integer or a list of integers, "
                                              f"got {type(v).__name__}")
        if not 0 <= v < vocab:
            raise ModelFileError(source, key, f"{key} {v} outside the vocabulary (size {vocab})")
    return items


def _pick_template(path: Path, tok_config: dict) -> Optional[ChatTemplate]:
    jinja_file = path / "chat_template.jinja"
    if jinja_file.exists():
        data = read_bytes_bounded(jinja_file, 4 * DEFAULT_LIMITS.max_source_chars, jinja_file.name)
        return ChatTemplate(decode_utf8(data, jinja_file, "chat_template"), str(jinja_file))
    source = path / "tokenizer_config.json"
    template = tok_config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is None:
        return None
    return ChatTemplate(template, str(source))


def _load_backend(tok_file: Path) -> tokenizers.Tokenizer:
    limit = JSON_FILE_LIMITS["tokenizer.json"]
    if not tok_file.is_file():
        raise ModelFileError(tok_file, None, "tokenizer.json is not a regular file")
    if tok_file.stat().st_size > limit:
        raise ModelFileError(tok_file, None, f"tokenizer.json is larger than the limit of {limit} bytes")
    try:
        backend = tokenizers.Tokenizer.from_file(str(tok_file))  # serde_json: nesting is bounded (128)
        backend.encode("Hello, world! 123 \u4f60\u597d", add_special_tokens=False)  # a broken model fails here
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - the Rust library raises Exception, or PanicException (a BaseException)
        raise ModelFileError(tok_file, None, f"cannot load tokenizer: {str(e)[:500]}") from None
    return backend


class Tokenizer:
    """Encode/decode text and render chat prompts for one model directory."""

    def __init__(self, backend: tokenizers.Tokenizer, special_tokens_map: dict, special: SpecialTokens,
                 chat_template: Optional[ChatTemplate]):
        self._backend = backend  # the tokenizers.Tokenizer doing BPE
        self.special_tokens_map = special_tokens_map  # "bos_token"... -> text, from tokenizer_config.json
        self.special = special  # validated special ids
        self._template = chat_template  # compiled chat template, None if the model has none
        self.chat_template = chat_template.source if chat_template else None  # its jinja source

    @classmethod
    def from_dir(cls, path: Union[str, os.PathLike]) -> "Tokenizer":
        path = Path(path)
        tok_file = path / "tokenizer.json"
        if not tok_file.exists():
            raise ModelFileError(path, None, "no tokenizer.json")
        backend = _load_backend(tok_file)
        tok_path, gen_path, cfg_path = (path / n for n in
                                        ("tokenizer_config.json", "generation_config.json", "config.json"))
        tok_config = read_json_file(tok_path, required=False)
        gen_config = read_json_file(gen_path, required=False)
        model_config = read_json_file(cfg_path, required=False)
        vocab = _checked_vocab(backend, model_config.get("vocab_size"), tok_file, cfg_path)
        special_map = {k: t for k in _SPECIAL_KEYS if (t := _special_text(tok_config, k, tok_path)) is not None}
        gen_ids = {k: _config_ids(gen_config, k, gen_path, vocab) for k in _ID_KEYS}
        model_ids = {k: _config_ids(model_config, k, cfg_path, vocab) for k in _ID_KEYS}
        special = _resolve_special(backend, special_map, gen_ids, model_ids)
        return cls(backend, special_map, special, _pick_template(path, tok_config))

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The HuggingFace `tokenizers.Tokenizer` doing BPE (for libraries that take one, such as
        llguidance's grammar matcher)."""
        return self._backend

    @property
    def decode_concatenates(self) -> bool:
        """Whether decode(a + b) == decode(a) + decode(b) whenever neither text holds U+FFFD: a
        byte-level decoder (Qwen2, Llama 3) joins the ids' bytes and reads them as UTF-8. Not a
        decoder that strips a leading space or merges pieces (SentencePiece's Sequence). The
        incremental detokenizer then reads a token's text from its memo (engine/detokenizer.py)."""
        return isinstance(self._backend.decoder, tokenizers.decoders.ByteLevel)

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows, added tokens included."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> Optional[int]:
        check_text(token, "token")
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> Optional[str]:
        return self._backend.id_to_token(token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        """Text -> token ids. Qwen2 adds no BOS/EOS, and special-token text maps to its id."""
        if not isinstance(text, str):
            raise ValueError(f"text to encode must be a string, got {type(text).__name__}")
        check_text(text, "text to encode")
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list, add_special_tokens: bool = False) -> list:
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError("texts to encode must be a list of strings")
        for i, t in enumerate(texts):
            check_text(t, f"texts[{i}]")
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Token ids -> text; ids outside the vocabulary are a ValueError."""
        try:
            arr = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids))
        except (TypeError, ValueError, OverflowError):
            raise ValueError("token ids must be a flat sequence of integers") from None
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValueError("token ids must be a flat sequence of integers")
        n = self.vocab_size
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
            bad = int(arr[(arr < 0) | (arr >= n)][0])
            raise ValueError(f"token id {bad} outside the vocabulary (size {n})")
        return self._backend.decode(arr.tolist(), skip_special_tokens=skip_special_tokens)

    def decode_known(self, ids: list, skip_special_tokens: bool = False) -> str:
        """decode for ids already known to be in the vocabulary (the engine's sampled ids,
        checked against the model's logits width): no per-call validation."""
        return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = False,
                            tools=None, **kwargs):
        """Render `messages` with the model's chat template (same output as transformers).

        Returns the prompt string, or its token ids when `tokenize` is true.
        Extra keyword arguments are passed to the template, overriding special tokens.
        A template that fails or goes over its limits is a ChatTemplateError (a ValueError).
        """
        validate_messages(messages)
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise ValueError("tools must be a list of JSON-schema dicts")
        _check_nested(tools, "tools")
        if self._template is None:
            raise ValueError("this model has no chat template; pass a plain prompt instead")
        context = {**self.special_tokens_map, **kwargs}
        text = self._template.render(messages=copy.deepcopy(messages), tools=copy.deepcopy(tools),
                                     documents=None, add_generation_prompt=add_generation_prompt, **context)
        return self.encode(text) if tokenize else text


def _checked_vocab(backend: tokenizers.Tokenizer, model_vocab, tok_file: Path, cfg_path: Path) -> int:
    """The number of ids the model accepts, which must cover the tokenizer's vocabulary.

    Checks the vocabulary's size and every added token's id (cheap); an id of a sparse
    base vocabulary beyond the model's is refused per request by the engine instead.
    """
    size = backend.get_vocab_size(with_added_tokens=True)
    added = backend.get_added_tokens_decoder()  # id -> AddedToken
    if not isinstance(model_vocab, int) or isinstance(model_vocab, bool) or model_vocab <= 0:
        return max(max(added, default=-1) + 1, size)  # no usable config.json: the loader reports it
    where = f"outside the model's vocabulary ({cfg_path.name} vocab_size {model_vocab})"
    top = max(added, default=-1)
    if top >= model_vocab:
        raise ModelFileError(tok_file, added[top].content, f"added token {added[top].content[:40]!r} has id {top}, {where}")
    if size > model_vocab:
        raise ModelFileError(tok_file, None, f"the tokenizer has {size} tokens, {where}")
    return model_vocab


def _resolve_special(backend: tokenizers.Tokenizer, special_map: dict, gen_ids: dict, model_ids: dict) -> SpecialTokens:
    def from_text(key: str) -> Optional[int]:
        text = special_map.get(key)
        return backend.token_to_id(text) if text is not None else None

    def first(*candidates):
        return next((c for c in candidates if c is not None), None)

    def config_id(key: str) -> Optional[int]:
        found = gen_ids[key] or model_ids[key]
        return found[0] if found else None

    eos = first(from_text("eos_token"), config_id("eos_token_id"))
    stops = [eos] + (gen_ids["eos_token_id"] or model_ids["eos_token_id"])
    return SpecialTokens(
        bos_token_id=first(from_text("bos_token"), config_id("bos_token_id")),
        eos_token_id=eos,
        pad_token_id=first(from_text("pad_token"), config_id("pad_token_id")),
        im_start_id=backend.token_to_id("<|im_start|>"),
        im_end_id=backend.token_to_id("<|im_end|>"),
        stop_token_ids=tuple(dict.fromkeys(s for s in stops if s is not None)),
    )
