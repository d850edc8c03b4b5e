"""Real vocabularies: llama.cpp's own tokenizer test files, read by our GGUF tokenizer.

llama.cpp keeps vocabulary-only GGUF files of real models (models/ggml-vocab-<name>.gguf) with
test texts (.inp) and the ids the model's own Hugging Face tokenizer gives them (.out, written by
its convert_hf_to_gguf_update.py; llama.cpp's test-tokenizer-0 checks its tokenizer against
them). Here: Llama 2's SentencePiece vocabulary (llama-spm) and Phi-3's, Llama 3's byte-level
BPE (llama-bpe) and Qwen2's. Every text must encode to the file's ids and decode back to itself.
The files come from the llama-cpp-python sdist that tools/benchkit/peer.py pins
(test/llama_cpp_files.py)."""

import types

import gguf
import pytest
from llama_cpp_files import models_dir, vocab_texts

from llaisys.models.gguf_spm import tokenizer_files

pytestmark = pytest.mark.slow

NAMES = ("llama-spm", "phi-3", "llama-bpe", "qwen2")


@pytest.fixture(scope="module")
def vocab_dir():
    return models_dir([f"ggml-vocab-{name}.gguf{ext}" for name in NAMES for ext in ("", ".inp", ".out")])


def cases(folder, name: str) -> list:
    """(text, ids) of a vocabulary's test file."""
    texts = vocab_texts(folder / f"ggml-vocab-{name}.gguf.inp")
    ids = (folder / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")[:len(texts)]
    assert len(texts) == len(ids) > 40
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, ids)]


@pytest.mark.parametrize("name", NAMES)
def test_encodes_as_the_models_own_tokenizer(vocab_dir, name):
    path = vocab_dir / f"ggml-vocab-{name}.gguf"
    reader = gguf.GGUFReader(path)
    n_tokens = len(reader.fields["tokenizer.ggml.tokens"].data)
    # a vocabulary-only file: no embedding to size the vocabulary by, so the tokens' count stands in
    tok = tokenizer_files(reader, types.SimpleNamespace(vocab_size=n_tokens, max_position_embeddings=4096),
                          str(path)).tokenizer
    wrong = []
    for text, want in cases(vocab_dir, name):
        got = tok.encode(text, add_special_tokens=False).ids
        if got != want or tok.decode(got, skip_special_tokens=False) != text:
            wrong.append((text[:40], got[:12], want[:12]))
    assert not wrong, f"{name}: {len(wrong)} texts differ, e.g. {wrong[:3]}"
