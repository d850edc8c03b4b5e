"""Rebuild a HuggingFace byte-level BPE tokenizer from Qwen2, Llama 3 or SmolLM GGUF metadata.

The result matches the tokenizer.json shipped with Qwen2 models: NFC normalizer,
the Qwen2 split regex, byte-level pre-tokenizer and decoder, BPE over
`tokenizer.ggml.tokens` / `tokenizer.ggml.merges`, and the control tokens
(`<|im_start|>`, `<|endoftext|>`, ...) added as special tokens. A Llama 3 file
(`tokenizer.ggml.pre` "llama-bpe", or llama.cpp's other names for it) gets Llama 3's: no
normalizer, its split regex (digits in groups of up to three), and a word that is itself a token
taken whole (`ignore_merges`, as Llama 3's tokenizer.json and llama.cpp do). A SmolLM file
(`tokenizer.ggml.pre` "smollm") gets no normalizer, every digit split off on its own, then GPT-2's
split, as llama.cpp tokenizes it. With
`tokenizer.ggml.add_bos_token` (absent: true for Llama 3, as llama.cpp reads it) the BOS token is added when special tokens are
(`add_special_tokens=True`). SentencePiece vocabularies are gguf_spm.py's.
"""

from dataclasses import dataclass

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from .chat_template import ChatTemplate
from .config import Qwen2Config
from .files import ModelFileError

# The pre-tokenizer split used by Qwen2 (and the distills built on its vocabulary).
QWEN2_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                     r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                      r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# GPT-2's split (its ByteLevel pre-tokenizer's regex), which SmolLM's vocabularies use after
# splitting every digit off on its own (llama.cpp's "smollm": the regexes \p{N}, then this one)
GPT2_SPLIT_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_QWEN2_PRE = ("qwen2", "deepseek-r1-qwen")
_LLAMA3_PRE = ("llama-bpe", "llama3", "llama-v3")  # llama.cpp's names of Llama 3's pre-tokenizer
_SMOLLM_PRE = ("smollm",)  # SmolLM / SmolLM2 (Llama models with a GPT-2-style vocabulary)
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types
# tokens that end a turn or a document in Qwen2 vocabularies (llama.cpp treats them as end-of-generation)
_END_TOKENS = ("<|im_end|>", "<|endoftext|>")


@dataclass
class TokenizerFiles:
    """Everything the HF directory needs for its tokenizer."""

    tokenizer: Tokenizer  # saved as tokenizer.json
    tokenizer_config: dict  # saved as tokenizer_config.json (special tokens, chat template)
    generation_config: dict  # saved as generation_config.json (bos/eos/pad ids)


def bytes_to_unicode() -> dict:
    """GPT-2's byte -> printable character table used by byte-level BPE vocabularies."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "a boolean"}


def metadata(reader: gguf.GGUFReader, key: str, kind, source: str, required: bool = True, default=None):
    """The value of metadata `key`, checked to be of `kind` (int, float, str, bool, or
    (list, item kind)); ModelFileError naming the key otherwise."""
    f = reader.fields.get(key)
    if f is None:
        if required:
            raise ModelFileError(source, key, f"GGUF metadata lacks {key!r}")
        return default
    value = f.contents()
    if isinstance(kind, tuple):
        item = kind[1]
        ok = isinstance(value, list) and all(_is(v, item) for v in value)
        want = f"an array of {_KIND_NAMES[item].split(' ', 1)[1]}s"
    else:
        ok, want = _is(value, kind), _KIND_NAMES[kind]
    if not ok:
        shown = type(value).__name__ if isinstance(value, list) else repr(value)[:60]
        raise ModelFileError(source, key, f"GGUF metadata {key!r} must be {want}, got {shown}")
    return float(value) if kind is float else value


def _is(value, kind) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def build_backend(tokens: list, merges: list, token_types: list, pre: str = "qwen2") -> Tokenizer:
    """The tokenizers.Tokenizer for a Qwen2 (or, by `pre`, Llama 3) byte-level BPE vocabulary."""
    llama3, smollm = pre in _LLAMA3_PRE, pre in _SMOLLM_PRE
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    # tokens are stored in the byte alphabet; respell any that are not (as transformers does)
    vocab = {}
    for i, tok in enumerate(tokens):
        key = tok if set(tok) <= alphabet else "".join(spelling[b] for b in tok.encode("utf-8"))
        vocab.setdefault(key, i)
    pairs = []
    for m in merges:
        pair = m.split(" ")
        if len(pair) != 2:
            raise ValueError(f"merge {m[:40]!r} is not two space-separated tokens")
        pairs.append((pair[0], pair[1]))
    bpe = models.BPE(vocab=vocab, merges=pairs, dropout=None, unk_token=None, continuing_subword_prefix="",
                     end_of_word_suffix="", fuse_unk=False, byte_fallback=False, ignore_merges=llama3)
    tok = Tokenizer(bpe)
    if not llama3 and not smollm:
        tok.normalizer = normalizers.NFC()
    if smollm:
        splits = [pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated", invert=False),
                  pre_tokenizers.Split(Regex(GPT2_SPLIT_REGEX), behavior="isolated", invert=False)]
    else:
        splits = [pre_tokenizers.Split(Regex(LLAMA3_SPLIT_REGEX if llama3 else QWEN2_SPLIT_REGEX),
                                       behavior="isolated", invert=False)]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    types = list(token_types) if token_types else [1] * len(tokens)
    control = [AddedToken(t, special=True, normalized=False)
               for t, k in zip(tokens, types) if k == _CONTROL and set(t) <= alphabet]
    user = [AddedToken(t, special=False, normalized=False)
            for t, k in zip(tokens, types) if k == _USER_DEFINED and t in vocab]
    tok.add_special_tokens(control)
    tok.add_tokens(user)
    return tok


def _added_tokens_decoder(tok: Tokenizer) -> dict:
    out = {}
    for token_id, added in sorted(tok.get_added_tokens_decoder().items()):
        out[str(token_id)] = {"content": added.content, "lstrip": added.lstrip, "normalized": added.normalized,
                              "rstrip": added.rstrip, "single_word": added.single_word, "special": added.special}
    return out


def build_tokenizer_files(reader: gguf.GGUFReader, config: Qwen2Config, source: str = "GGUF file") -> TokenizerFiles:
    """Read the byte-level BPE tokenizer metadata of a Qwen2 or Llama 3 GGUF and build the HF tokenizer files."""
    model = metadata(reader, "tokenizer.ggml.model", str, source)
    pre = metadata(reader, "tokenizer.ggml.pre", str, source, required=False)
    if model != "gpt2":
        raise ModelFileError(source, "tokenizer.ggml.model", f"tokenizer.ggml.model is {model[:40]!r}; "
                                                              f"only byte-level BPE ('gpt2') is supported")
    if pre not in _QWEN2_PRE + _LLAMA3_PRE + _SMOLLM_PRE:
        raise ModelFileError(source, "tokenizer.ggml.pre", f"tokenizer.ggml.pre is {str(pre)[:40]!r}; supported: "
                                                           f"{', '.join(_QWEN2_PRE + _LLAMA3_PRE + _SMOLLM_PRE)}")
    tokens = metadata(reader, "tokenizer.ggml.tokens", (list, str), source)
    merges = metadata(reader, "tokenizer.ggml.merges", (list, str), source)
    if not tokens or not merges:
        key = "tokenizer.ggml.tokens" if not tokens else "tokenizer.ggml.merges"
        raise ModelFileError(source, key, f"GGUF metadata {key!r} is empty")
    if len(tokens) > config.vocab_size:
        raise ModelFileError(source, "tokenizer.ggml.tokens", f"tokenizer.ggml.tokens has {len(tokens)} tokens but "
                                                              f"the embedding only {config.vocab_size} rows")
    types = metadata(reader, "tokenizer.ggml.token_type", (list, int), source, required=False, default=[])
    if types and len(types) != len(tokens):
        raise ModelFileError(source, "tokenizer.ggml.token_type",
                             f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    try:
        tok = build_backend(tokens, merges, types, pre)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - the Rust library raises Exception, or PanicException (a BaseException)
        raise ModelFileError(source, "tokenizer.ggml.merges",
                             f"tokenizer.ggml.merges: cannot build the tokenizer: {str(e)[:300]}") from None
    template = metadata(reader, "tokenizer.chat_template", str, source, required=False)
    if template is not None:
        ChatTemplate(template, f"{source} (tokenizer.chat_template)")  # compiles, within the limits

    def token_of(key: str):
        token_id = metadata(reader, f"tokenizer.ggml.{key}", int, source, required=False)
        return (tokens[token_id], token_id) if token_id is not None and 0 <= token_id < len(tokens) else (None, None)

    bos, bos_id = token_of("bos_token_id")
    eos, eos_id = token_of("eos_token_id")
    pad, pad_id = token_of("padding_token_id")
    unk, _ = token_of("unknown_token_id")
    ends = [eos_id] + [tok.token_to_id(t) for t in _END_TOKENS]
    ends = list(dict.fromkeys(i for i in ends if i is not None))
    add_bos = metadata(reader, "tokenizer.ggml.add_bos_token", bool, source, False, pre in _LLAMA3_PRE)  # llama.cpp's
    if add_bos and bos is not None:
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                          special_tokens=[(bos, bos_id)])])
    tok_config = {
        "add_bos_token": add_bos,
        "add_eos_token": metadata(reader, "tokenizer.ggml.add_eos_token", bool, source, False, False),
        "add_prefix_space": False,
        "added_tokens_decoder": _added_tokens_decoder(tok),
        "bos_token": bos,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": eos,
        "errors": "replace",
        "model_max_length": config.max_position_embeddings,
        "pad_token": pad,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": unk,
    }
    gen_config = {"bos_token_id": bos_id, "eos_token_id": ends[0] if len(ends) == 1 else ends,
                  "pad_token_id": pad_id}
    return TokenizerFiles(tokenizer=tok, tokenizer_config=tok_config, generation_config=gen_config)
