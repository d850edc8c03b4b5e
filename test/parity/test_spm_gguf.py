"""The SentencePiece vocabulary a Llama 2 / Mistral / Mixtral GGUF carries (`tokenizer.ggml.model`
"llama": pieces with scores, "▁" for spaces, "<0xXX>" byte-fallback pieces, control and
user-defined token types), read by gguf_spm.py: it encodes and decodes as transformers' own GGUF
tokenizer loading does (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`) on the same file,
but for SentencePiece's dummy prefix, which it adds as llama.cpp (and SentencePiece, and the
models' own Hugging Face tokenizers: test/models/test_gguf_vocab_llama_cpp.py) do: before every
run of text between special tokens, also one that starts with a space, where transformers' GGUF
tokenizer adds it to the first run only, and not when it starts with a space.

The vocabulary is trained here: a `tokenizers` SentencePiece BPE over a few hundred sentences,
its merged pieces scored by merge rank (as SentencePiece scores them: earlier is higher) and its
single characters below them, behind `<unk>` `<s>` `</s>` and the 256 byte pieces, as Llama 2's
vocabulary is laid out. Characters it never saw (CJK, emoji) fall back to bytes."""

import json
import re

import gguf
import numpy as np
import pytest
from tokenizers import SentencePieceBPETokenizer

from llaisys import LLM, SamplingParams
from llaisys.models.files import ModelFileError
from llaisys.models.gguf_convert import convert_gguf
from llaisys.models.gguf_model import load_gguf
from llaisys.models.tokenizer import Tokenizer

from .conftest import ARCH_VOCAB
from .test_llama_gguf import LINEAR, make_tiny_llama, write_llama_gguf

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex the jolly "
         "kings and queens of northern lands; programmers write code, tests, and documents every day").split()
TEXTS = [
    "Hello world", "the quick brown fox", " leading space", "  two leading spaces", "trailing space ",
    "multi\nline\n\ntext\n", "tab\tseparated\tvalues", "unicode: café naïve 你好 🙂 Ω", "", " ", "\n",
    "<s>wrapped</s> in control tokens", "[INST] an instruction [/INST] <tool> user token",
    "UPPER lower MiXeD 12345 3.14159", "punctuation!? (parens) [brackets] {braces} -- dashes",
    "repeated    interior     spaces", "the the the thethe quickquick", "an <unk> piece written out",
]
SPECIALS = [("<unk>", 2), ("<s>", 3), ("</s>", 3)]  # id 0, 1, 2 as in Llama 2


def train_vocab():
    """(tokens, scores, types) of a SentencePiece-style vocabulary of at most ARCH_VOCAB pieces."""
    rng = np.random.default_rng(0)
    sentences = [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) for _ in range(300)]
    trainer = SentencePieceBPETokenizer()
    trainer.train_from_iterator(sentences, vocab_size=2000, min_frequency=2, show_progress=False)
    merges = json.loads(trainer.to_str())["model"]["merges"]  # in merge order
    merged = ["".join(m.split(" ")) if isinstance(m, str) else "".join(m) for m in merges]
    chars = sorted({c for s in sentences for c in s.replace(" ", "▁")} | {"▁"})
    tokens = [t for t, _ in SPECIALS] + [f"<0x{b:02X}>" for b in range(256)]
    types = [k for _, k in SPECIALS] + [6] * 256
    extra = [("[INST]", 3), ("[/INST]", 3), ("<tool>", 4)]
    room = ARCH_VOCAB - len(tokens) - len(chars) - len(extra)
    pieces = list(dict.fromkeys(p for p in merged if p not in chars))[:room]
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(pieces))]
    scores += [-float(len(pieces) + i) for i in range(len(chars))] + [0.0] * len(extra)
    tokens += pieces + chars + [t for t, _ in extra]
    types += [1] * (len(pieces) + len(chars)) + [k for _, k in extra]
    assert len(tokens) <= ARCH_VOCAB and len(pieces) > 50
    return tokens, scores, types


VOCAB = train_vocab()
# the unknown, control and user-defined pieces, longest first: where llama.cpp cuts the text
SPECIAL_PIECES = sorted((t for t, k in zip(VOCAB[0], VOCAB[2]) if k in (2, 3, 4)), key=len, reverse=True)


def spm_vocab(overrides=None):
    """A writer of the vocabulary's metadata; `overrides`: key -> (value, GGUFValueType, sub type) or None (left out)."""
    tokens, scores, types = VOCAB
    kv = {"tokenizer.ggml.model": ("llama", gguf.GGUFValueType.STRING, None),
          "tokenizer.ggml.tokens": (tokens, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING),
          "tokenizer.ggml.scores": (scores, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32),
          "tokenizer.ggml.token_type": (types, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32),
          "tokenizer.ggml.bos_token_id": (1, gguf.GGUFValueType.UINT32, None),
          "tokenizer.ggml.eos_token_id": (2, gguf.GGUFValueType.UINT32, None),
          "tokenizer.ggml.unknown_token_id": (0, gguf.GGUFValueType.UINT32, None)}
    kv.update(overrides or {})

    def write(w: gguf.GGUFWriter) -> None:
        for key, spec in kv.items():
            if spec is not None:
                value, kind, sub = spec
                w.add_key_value(key, value, kind, sub_type=sub)
    return write


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf_spm")
    make_tiny_llama(path / "hf", "linear_untied")
    write_llama_gguf(path / "spm.gguf", path / "hf", LINEAR, vocab=spm_vocab())
    return path


def hf_tokenizer(path, name):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), gguf_file=name)


def llama_cpp_ids(theirs, text: str, add_special: bool) -> list:
    """transformers' GGUF tokenizer run the way llama.cpp tokenizes: the text cut at the control
    and user-defined pieces, each run encoded alone with the dummy prefix (transformers adds it
    to a run on its own, unless the run starts with a space: then a space in front makes the
    "▁▁" SentencePiece gives), the BOS first when asked."""
    ids = [theirs.bos_token_id] if add_special else []
    for run in re.split("(" + "|".join(map(re.escape, SPECIAL_PIECES)) + ")", text):
        if run in SPECIAL_PIECES:
            ids.append(VOCAB[0].index(run))
        elif run:
            ids += theirs.encode(" " + run if run.startswith(" ") else run, add_special_tokens=False)
    return ids


@pytest.mark.parametrize("add_special", [False, True])
def test_encodes_and_decodes_as_transformers_gguf_loading(spm, add_special):
    ours, theirs = load_gguf(spm / "spm.gguf").tokenizer, hf_tokenizer(spm, "spm.gguf")
    for text in TEXTS:
        want = llama_cpp_ids(theirs, text, add_special)
        if not text.startswith(" ") and not any(p in text for p in SPECIAL_PIECES):
            assert want == theirs.encode(text, add_special_tokens=add_special), text  # where the two rules agree
        assert ours.encode(text, add_special_tokens=add_special) == want, text
        assert ours.decode(want) == theirs.decode(want), text
        assert ours.decode(want, skip_special_tokens=True) == theirs.decode(want, skip_special_tokens=True), text
    tokens = VOCAB[0]
    byte_ids = ours.encode("你")  # not in the vocabulary: its three UTF-8 bytes
    assert [tokens[i] for i in byte_ids] == ["▁", "<0xE4>", "<0xBD>", "<0xA0>"]
    assert ours.encode("[INST]")[0] == tokens.index("[INST]") and ours.special.bos_token_id == 1
    assert ours.encode("x", add_special_tokens=True)[0] == 1  # add_bos_token's default for SentencePiece


def test_the_vocabulary_is_used(spm):
    """The trained merges apply: common words are one piece, so this test cannot pass on bytes alone."""
    tok = load_gguf(spm / "spm.gguf").tokenizer
    pieces = [VOCAB[0][i] for i in tok.encode("the quick brown fox")]
    assert "".join(pieces) == "▁the▁quick▁brown▁fox" and pieces[0] == "▁the" and len(pieces) <= 8, pieces


def test_no_space_prefix(spm, tmp_path):
    off = write_llama_gguf(tmp_path / "off.gguf", spm / "hf", LINEAR, vocab=spm_vocab(
        {"tokenizer.ggml.add_space_prefix": (False, gguf.GGUFValueType.BOOL, None)}))
    tok, on = load_gguf(off).tokenizer, load_gguf(spm / "spm.gguf").tokenizer
    assert VOCAB[0][tok.encode("the fox")[0]] != "▁the" and VOCAB[0][on.encode("the fox")[0]] == "▁the"
    assert tok.encode(" the fox") == on.encode("the fox")
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text


def test_runs_and_converts(spm, tmp_path):
    sp = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    with LLM(str(spm / "spm.gguf"), kv_cache_memory=4 << 20, max_num_seqs=2) as engine:
        out = engine.generate(["the quick brown fox"], sp)[0]
    assert len(out.outputs[0].token_ids) == 8
    out_dir = convert_gguf(spm / "spm.gguf", tmp_path / "converted")
    conv, direct = Tokenizer.from_dir(out_dir), load_gguf(spm / "spm.gguf").tokenizer
    for text in TEXTS:
        assert conv.encode(text, add_special_tokens=True) == direct.encode(text, add_special_tokens=True), text


I32, F32, STR, ARR = (gguf.GGUFValueType.INT32, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.STRING,
                      gguf.GGUFValueType.ARRAY)


@pytest.mark.parametrize("overrides, key", [
    ({"tokenizer.ggml.scores": None}, "tokenizer.ggml.scores"),
    ({"tokenizer.ggml.scores": (["a"] * len(VOCAB[0]), ARR, STR)}, "tokenizer.ggml.scores"),
    ({"tokenizer.ggml.scores": (VOCAB[1][:-1], ARR, F32)}, "tokenizer.ggml.scores"),
    ({"tokenizer.ggml.scores": ([float("nan")] * len(VOCAB[0]), ARR, F32)}, "tokenizer.ggml.scores"),
    ({"tokenizer.ggml.token_type": (VOCAB[2] + [1], ARR, I32)}, "tokenizer.ggml.token_type"),
    ({"tokenizer.ggml.token_type": ([1.5] * len(VOCAB[0]), ARR, F32)}, "tokenizer.ggml.token_type"),
    ({"tokenizer.ggml.tokens": (list(range(len(VOCAB[0]))), ARR, I32)}, "tokenizer.ggml.tokens"),
    ({"tokenizer.ggml.tokens": (VOCAB[0] + ["x"] * (ARCH_VOCAB + 1 - len(VOCAB[0])), ARR, STR),
      "tokenizer.ggml.scores": None}, "tokenizer.ggml.tokens"),  # more tokens than embedding rows
    ({"tokenizer.ggml.tokens": (VOCAB[0][:-1] + ["▁" * 4097], ARR, STR)}, "tokenizer.ggml.tokens"),  # one too long
    ({"tokenizer.ggml.tokens": (VOCAB[0][:-9] + [f"{i}" * 4000 for i in range(9)], ARR, STR)},
     "tokenizer.ggml.tokens"),  # nine long pieces: more merge work than allowed
    ({"tokenizer.ggml.bos_token_id": ("<s>", STR, None)}, "tokenizer.ggml.bos_token_id"),
    ({"tokenizer.ggml.eos_token_id": (ARCH_VOCAB + 5, gguf.GGUFValueType.UINT32, None)},
     "tokenizer.ggml.eos_token_id"),
    ({"tokenizer.ggml.add_bos_token": (1, gguf.GGUFValueType.UINT8, None)}, "tokenizer.ggml.add_bos_token"),
    ({"tokenizer.ggml.add_space_prefix": ("yes", STR, None)}, "tokenizer.ggml.add_space_prefix"),
    ({"tokenizer.ggml.model": ("bert", STR, None)}, "tokenizer.ggml.model"),
])
def test_bad_vocabulary_is_named(spm, tmp_path, overrides, key):
    bad = write_llama_gguf(tmp_path / "bad.gguf", spm / "hf", LINEAR, vocab=spm_vocab(overrides))
    for read in (load_gguf, lambda p: convert_gguf(p, tmp_path / "out")):
        with pytest.raises(ValueError, match=key.replace(".", r"\.")) as e:
            read(bad)
        assert isinstance(e.value, ModelFileError)
