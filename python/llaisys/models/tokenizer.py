"""Tokenizer for a HuggingFace model directory: `tokenizers` for BPE, jinja2 for chat.

Reads `tokenizer.json`, plus `tokenizer_config.json`, `generation_config.json` and
`config.json` for special tokens, and the chat template from `chat_template.jinja`
or `tokenizer_config.json["chat_template"]`. Chat rendering copies what
`transformers` does (sandboxed jinja2, trim_blocks, lstrip_blocks, `raise_exception`,
a `tojson` that does not escape HTML), so prompts are byte-identical.
"""

import copy
import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional, Union

import jinja2
import jinja2.ext
import numpy as np
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special tokens the engine cares about (None when the model has none)."""

    bos_token_id: Optional[int]  # beginning of sequence (Qwen2 does not add it when encoding)
    eos_token_id: Optional[int]  # the tokenizer's end token (<|im_end|> for instruct models)
    pad_token_id: Optional[int]  # padding token
    im_start_id: Optional[int]  # <|im_start|>, opens a chat turn
    im_end_id: Optional[int]  # <|im_end|>, closes a chat turn
    stop_token_ids: tuple  # every id that ends generation (eos + generation_config eos ids), in order


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` as in transformers, rendering its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a chat template in the same sandboxed environment transformers uses."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ValueError(f"chat template has a syntax error: {e}") from None


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
        if content is None and tool_calls:
            continue  # an assistant turn that only calls tools
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}]['content'] must be a string, got {type(content).__name__}")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: must hold a JSON object")
    return data


def _token_text(value) -> Optional[str]:
    """A special token in tokenizer_config: a string, or an AddedToken dict with 'content'."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value) -> list:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, int) and not isinstance(v, bool)]


def _pick_template(path: Path, tok_config: dict) -> Optional[str]:
    jinja_file = path / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = tok_config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


class Tokenizer:
    """Encode/decode text and render chat prompts for one model directory."""

    def __init__(self, backend: tokenizers.Tokenizer, tok_config: dict, gen_config: dict,
                 model_config: dict, chat_template: Optional[str]):
        self._backend = backend  # the tokenizers.Tokenizer doing BPE
        self._tok_config = tok_config  # tokenizer_config.json contents ({} if absent)
        self.chat_template = chat_template  # jinja source, None if the model has none
        self._compiled = None  # compiled chat template, built on first use
        self.special_tokens_map = {k: t for k in ("bos_token", "eos_token", "unk_token", "pad_token")
                                   if (t := _token_text(tok_config.get(k))) is not None}
        self.special = self._resolve_special(gen_config, model_config)

    @classmethod
    def from_dir(cls, path: Union[str, os.PathLike]) -> "Tokenizer":
        path = Path(path)
        tok_file = path / "tokenizer.json"
        if not tok_file.is_file():
            raise ValueError(f"{path}: no tokenizer.json")
        try:
            backend = tokenizers.Tokenizer.from_file(str(tok_file))
        except Exception as e:  # the Rust library raises a bare Exception on bad files
            raise ValueError(f"{tok_file}: cannot load tokenizer: {e}") from None
        tok_config = _read_json(path / "tokenizer_config.json")
        return cls(backend, tok_config, _read_json(path / "generation_config.json"),
                   _read_json(path / "config.json"), _pick_template(path, tok_config))

    def _resolve_special(self, gen_config: dict, model_config: dict) -> SpecialTokens:
        def from_text(key: str) -> Optional[int]:
            text = self.special_tokens_map.get(key)
            return self.token_to_id(text) if text is not None else None

        def first(*candidates):
            return next((c for c in candidates if c is not None), None)

        def config_id(key: str) -> Optional[int]:
            found = _ids(gen_config.get(key)) or _ids(model_config.get(key))
            return found[0] if found else None

        eos = first(from_text("eos_token"), config_id("eos_token_id"))
        stops = [eos] + (_ids(gen_config.get("eos_token_id")) or _ids(model_config.get("eos_token_id")))
        return SpecialTokens(
            bos_token_id=first(from_text("bos_token"), config_id("bos_token_id")),
            eos_token_id=eos,
            pad_token_id=first(from_text("pad_token"), config_id("pad_token_id")),
            im_start_id=self.token_to_id("<|im_start|>"),
            im_end_id=self.token_to_id("<|im_end|>"),
            stop_token_ids=tuple(dict.fromkeys(s for s in stops if s is not None)),
        )

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows, added tokens included."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> Optional[str]:
        return self._backend.id_to_token(token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        """Text -> token ids. Qwen2 adds no BOS/EOS, and special-token text maps to its id."""
        if not isinstance(text, str):
            raise ValueError(f"text to encode must be a string, got {type(text).__name__}")
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list, add_special_tokens: bool = False) -> list:
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError("texts to encode must be a list of strings")
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

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = False,
                            tools=None, **kwargs):
        """Render `messages` with the model's chat template (same output as transformers).

        Returns the prompt string, or its token ids when `tokenize` is true.
        Extra keyword arguments are passed to the template, overriding special tokens.
        """
        validate_messages(messages)
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise ValueError("tools must be a list of JSON-schema dicts")
        if self.chat_template is None:
            raise ValueError("this model has no chat template; pass a plain prompt instead")
        if self._compiled is None:
            self._compiled = compile_chat_template(self.chat_template)
        context = {**self.special_tokens_map, **kwargs}
        try:
            text = self._compiled.render(messages=copy.deepcopy(messages), tools=copy.deepcopy(tools),
                                         documents=None, add_generation_prompt=add_generation_prompt,
                                         **context)
        except jinja2.exceptions.TemplateError as e:
            raise ValueError(f"chat template rejected the messages: {e}") from None
        return self.encode(text) if tokenize else text
