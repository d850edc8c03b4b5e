"""Rebuild a HuggingFace byte-level BPE tokenizer from Qwen2 GGUF metadata.

The result matches the tokenizer.json shipped with Qwen2 models: NFC normalizer,
the Qwen2 split regex, byte-level pre-tokenizer and decoder, BPE over
`tokenizer.ggml.tokens` / `tokenizer.ggml.merges`, and the control tokens
(`<|im_start|>`, `<|endoftext|>`, ...) added as special tokens.
"""

from dataclasses import dataclass

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from .config import Qwen2Config

# The pre-tokenizer split used by Qwen2 (and the distills built on its vocabulary).
QWEN2_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                     r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_PRE = ("qwen2", "deepseek-r1-qwen")
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


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def build_backend(tokens: list, merges: list, token_types: list) -> Tokenizer:
    """The tokenizers.Tokenizer for a Qwen2 byte-level BPE vocabulary."""
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
            raise ValueError(f"GGUF merge {m!r} is not two space-separated tokens")
        pairs.append((pair[0], pair[1]))
    bpe = models.BPE(vocab=vocab, merges=pairs, dropout=None, unk_token=None, continuing_subword_prefix="",
                     end_of_word_suffix="", fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
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


def build_tokenizer_files(reader: gguf.GGUFReader, config: Qwen2Config) -> TokenizerFiles:
    """Read the tokenizer metadata of a Qwen2 GGUF and build the HF tokenizer files."""
    model = _field(reader, "tokenizer.ggml.model")
    pre = _field(reader, "tokenizer.ggml.pre")
    if model != "gpt2":
        raise ValueError(f"GGUF tokenizer model is {model!r}; only byte-level BPE ('gpt2') is supported")
    if pre not in _QWEN2_PRE:
        raise ValueError(f"GGUF pre-tokenizer is {pre!r}; supported: {', '.join(_QWEN2_PRE)}")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = _field(reader, "tokenizer.ggml.merges")
    if not tokens or not merges:
        raise ValueError("GGUF metadata lacks tokenizer.ggml.tokens or tokenizer.ggml.merges")
    if len(tokens) > config.vocab_size:
        raise ValueError(f"GGUF vocabulary has {len(tokens)} tokens but the embedding only {config.vocab_size}")
    types = _field(reader, "tokenizer.ggml.token_type", [])
    tok = build_backend(tokens, merges, types)

    def token_of(key: str):
        token_id = _field(reader, f"tokenizer.ggml.{key}")
        return (tokens[token_id], token_id) if token_id is not None and 0 <= token_id < len(tokens) else (None, None)

    bos, bos_id = token_of("bos_token_id")
    eos, eos_id = token_of("eos_token_id")
    pad, pad_id = token_of("padding_token_id")
    unk, _ = token_of("unknown_token_id")
    ends = [eos_id] + [tok.token_to_id(t) for t in _END_TOKENS]
    ends = list(dict.fromkeys(i for i in ends if i is not None))
    tok_config = {
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
        "add_prefix_space": False,
        "added_tokens_decoder": _added_tokens_decoder(tok),
        "bos_token": bos,
        "chat_template": _field(reader, "tokenizer.chat_template"),
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
