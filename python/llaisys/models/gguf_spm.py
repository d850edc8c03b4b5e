"""The SentencePiece vocabulary of a GGUF file (`tokenizer.ggml.model` "llama": Llama 2, Mistral,
Mixtral) as a `tokenizers.Tokenizer`, and `tokenizer_files`, which picks it or gguf_tokenizer's
byte-level BPE ("gpt2") by that key.

The metadata: `tokenizer.ggml.tokens` (pieces, "▁" for a space, "<0xXX>" for the byte-fallback
pieces), `tokenizer.ggml.scores` (one float per piece), `tokenizer.ggml.token_type` (optional:
1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), the bos / eos / unknown /
padding ids, `tokenizer.ggml.add_bos_token` (default true, as llama.cpp and transformers read a
SentencePiece file), `tokenizer.ggml.add_eos_token` (default false) and
`tokenizer.ggml.add_space_prefix` (default true).

SentencePiece BPE, as llama.cpp's SPM tokenizer runs it, repeatedly joins the adjacent pair whose
join is the piece of the highest score; a BPE whose merges are every split (left, right) of every
piece into two pieces, ranked by the joined piece's score, does the same. The merges are derived
here by transformers' rule for GGUF files (tokenization_utils_base.generate_merges: ties by the
longer left piece, then by vocabulary order), so the result encodes as
`AutoTokenizer.from_pretrained(dir, gguf_file=...)` does. Spaces become "▁", and unless
add_space_prefix is false one "▁" (SentencePiece's dummy prefix) is prepended to every run of text
between special tokens, as llama.cpp does and as the models' own tokenizers give llama.cpp's
test files (test/models/test_gguf_vocab_llama_cpp.py: Llama 2's and Phi-3's vocabularies);
transformers' GGUF loading adds it to the first run only, and not before a leading space
(" Hello" is "▁▁Hello" here, "▁Hello" there). Characters without a piece fall back to their
UTF-8 bytes' "<0xXX>" pieces. A file's `tokenizer.ggml.merges`, if any, is not used (llama.cpp's
SPM tokenizer ignores it too). Control and unknown pieces are special tokens, user-defined ones
added tokens, so their text maps to their id whole."""

from __future__ import annotations

import math

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

from .chat_template import ChatTemplate
from .config import ModelParams
from .files import ModelFileError
from .gguf_tokenizer import TokenizerFiles, _added_tokens_decoder, build_tokenizer_files, metadata

_UNKNOWN, _CONTROL, _USER_DEFINED = 2, 3, 4  # llama.cpp token types
MAX_PIECE_CHARS = 4096  # a longer piece is refused: deriving its merges costs its length squared
# and the vocabulary's whole cost, the sum of its pieces' squared lengths (a real 32k or 256k
# vocabulary: a few million), is bounded too, so that a file cannot make the load run for hours
MAX_MERGE_WORK = 1 << 27


def tokenizer_files(reader: gguf.GGUFReader, config: ModelParams, source: str = "GGUF file") -> TokenizerFiles:
    """The tokenizer files of a GGUF file: SentencePiece ("llama") here, byte-level BPE ("gpt2") in
    gguf_tokenizer; any other tokenizer.ggml.model is refused there, naming the key."""
    if metadata(reader, "tokenizer.ggml.model", str, source) == "llama":
        return build_spm_files(reader, config, source)
    return build_tokenizer_files(reader, config, source)


def spm_merges(tokens: list, scores: list) -> list:
    """Every split of every piece into two pieces, best joined score first (transformers'
    generate_merges order: ties by the longer left piece, then the longer right, then as listed)."""
    vocab = {t: i for i, t in enumerate(tokens)}  # a repeated piece: its last id, as llama.cpp and transformers
    score_of = dict(zip(tokens, scores))
    merges = []
    for piece, score in score_of.items():
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)  # stable: equal keys keep their order
    return [(left, right) for left, right, _ in merges]


def build_spm_backend(tokens: list, scores: list, types: list, unk: str | None, add_space_prefix: bool,
                      bos: str | None, eos: str | None, add_bos: bool, add_eos: bool) -> Tokenizer:
    """The tokenizers.Tokenizer of a SentencePiece vocabulary (see the module docstring)."""
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=spm_merges(tokens, scores), dropout=None, unk_token=unk, fuse_unk=True,
                     byte_fallback=True)
    tok = Tokenizer(bpe)
    # SentencePiece's dummy prefix, as llama.cpp adds it: one "▁" before every run of text (the
    # text's start and after each special token), even one that starts with a space (" Hello" is
    # "▁▁Hello"). A normalizer, because the added tokens split the text first and each run is
    # normalized alone; the Metaspace pre-tokenizer prepends to the first run only, and not to
    # one that already starts with "▁".
    spaces = normalizers.Replace(" ", "▁")
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), spaces]) if add_space_prefix else spaces
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tok.decoder = decoders.Sequence(steps)
    special = [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types)
               if k in (_CONTROL, _UNKNOWN)]
    user = [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == _USER_DEFINED]
    tok.add_special_tokens(special)
    tok.add_tokens(user)
    ends = [(t, vocab[t]) for t, on in ((bos, add_bos), (eos, add_eos)) if on and t is not None]
    if ends:
        first = [t for t, on in ((bos, add_bos),) if on and t is not None]
        last = [t for t, on in ((eos, add_eos),) if on and t is not None]
        single = " ".join(first + ["$A"] + last)
        pair = " ".join(first + ["$A"] + last + first + ["$B:1"] + last)
        tok.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=ends)
    return tok


def _token_id(reader, key: str, tokens: list, source: str):
    """(piece, id) of the id under `key`, or (None, None) without one; an id outside the vocabulary is refused."""
    token_id = metadata(reader, key, int, source, required=False)
    if token_id is None:
        return None, None
    if not 0 <= token_id < len(tokens):
        raise ModelFileError(source, key, f"{key} {token_id} is outside the vocabulary ({len(tokens)} tokens)")
    return tokens[token_id], token_id


def build_spm_files(reader: gguf.GGUFReader, config: ModelParams, source: str = "GGUF file") -> TokenizerFiles:
    """Read a SentencePiece GGUF vocabulary and build the HF tokenizer files (each value checked, errors naming the key)."""
    tokens = metadata(reader, "tokenizer.ggml.tokens", (list, str), source)
    if not tokens:
        raise ModelFileError(source, "tokenizer.ggml.tokens", "GGUF metadata 'tokenizer.ggml.tokens' is empty")
    if len(tokens) > config.vocab_size:
        raise ModelFileError(source, "tokenizer.ggml.tokens", f"tokenizer.ggml.tokens has {len(tokens)} tokens but "
                                                              f"the embedding only {config.vocab_size} rows")
    long = next((t for t in tokens if len(t) > MAX_PIECE_CHARS), None)
    if long is not None:
        raise ModelFileError(source, "tokenizer.ggml.tokens", f"tokenizer.ggml.tokens holds a piece of {len(long)} "
                                                              f"characters (at most {MAX_PIECE_CHARS})")
    work = sum(len(t) * len(t) for t in tokens)
    if work > MAX_MERGE_WORK:
        raise ModelFileError(source, "tokenizer.ggml.tokens", f"tokenizer.ggml.tokens: its pieces' squared lengths "
                                                              f"sum to {work} (at most {MAX_MERGE_WORK})")
    scores = metadata(reader, "tokenizer.ggml.scores", (list, float), source)
    if len(scores) != len(tokens):
        raise ModelFileError(source, "tokenizer.ggml.scores",
                             f"tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} tokens")
    if not all(math.isfinite(s) for s in scores):
        raise ModelFileError(source, "tokenizer.ggml.scores", "tokenizer.ggml.scores holds a NaN or infinity")
    types = metadata(reader, "tokenizer.ggml.token_type", (list, int), source, required=False)
    if types is None:
        types = [1] * len(tokens)
    if len(types) != len(tokens):
        raise ModelFileError(source, "tokenizer.ggml.token_type",
                             f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    bos, bos_id = _token_id(reader, "tokenizer.ggml.bos_token_id", tokens, source)
    eos, eos_id = _token_id(reader, "tokenizer.ggml.eos_token_id", tokens, source)
    unk, _ = _token_id(reader, "tokenizer.ggml.unknown_token_id", tokens, source)
    pad, pad_id = _token_id(reader, "tokenizer.ggml.padding_token_id", tokens, source)
    add_bos = metadata(reader, "tokenizer.ggml.add_bos_token", bool, source, False, True)
    add_eos = metadata(reader, "tokenizer.ggml.add_eos_token", bool, source, False, False)
    prefix = metadata(reader, "tokenizer.ggml.add_space_prefix", bool, source, False, True)
    template = metadata(reader, "tokenizer.chat_template", str, source, required=False)
    if template is not None:
        ChatTemplate(template, f"{source} (tokenizer.chat_template)")  # compiles, within the limits
    try:
        tok = build_spm_backend(tokens, [float(s) for s in scores], types, unk, prefix, bos, eos, add_bos, add_eos)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - the Rust library raises Exception, or PanicException (a BaseException)
        raise ModelFileError(source, "tokenizer.ggml.tokens",
                             f"tokenizer.ggml.tokens: cannot build the tokenizer: {str(e)[:300]}") from None
    tok_config = {
        "add_bos_token": add_bos, "add_eos_token": add_eos, "add_prefix_space": prefix,
        "added_tokens_decoder": _added_tokens_decoder(tok), "bos_token": bos, "chat_template": template,
        "clean_up_tokenization_spaces": False, "eos_token": eos, "legacy": False,
        "model_max_length": config.max_position_embeddings, "pad_token": pad, "tokenizer_class": "LlamaTokenizer",
        "unk_token": unk,
    }
    gen_config = {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id}
    return TokenizerFiles(tokenizer=tok, tokenizer_config=tok_config, generation_config=gen_config)
