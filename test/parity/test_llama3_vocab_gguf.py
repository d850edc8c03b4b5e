"""A Llama 3 GGUF's byte-level BPE vocabulary (`tokenizer.ggml.model` "gpt2", `tokenizer.ggml.pre`
"llama-bpe"): Llama 3's split regex (digits in groups of up to three), no normalizer, and BOS
added with special tokens when `add_bos_token` says so. Trained here (a `tokenizers` byte-level
BPE over a few hundred sentences with numbers), written into a tiny llama GGUF, it encodes and
decodes as transformers' own GGUF tokenizer loading does on the same file."""

import json

import gguf
import numpy as np
import pytest
from tokenizers import ByteLevelBPETokenizer

from llaisys.models.files import ModelFileError
from llaisys.models.gguf_model import load_gguf

from .conftest import ARCH_VOCAB
from .test_llama_gguf import LINEAR, make_tiny_llama, write_llama_gguf
from .test_spm_gguf import WORDS, hf_tokenizer

TEXTS = ["Hello world", "the quick brown fox", " leading space", "numbers 1234567 and 12 and 3.14159",
         "multi\nline\n\ntext\n", "unicode: café naïve 你好 🙂 Ω", "", "I'm sure they'll say it's done",
         "<|begin_of_text|>wrapped<|eot_id|>", "decomposed cafe\u0301 (NFC would compose it)",
         "Ａ full-width digit １２３４ (NFC would not change it)"]
CONTROL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]


def train_vocab():
    """(tokens, merges) of a byte-level BPE with ARCH_VOCAB - 3 entries, then the control tokens."""
    rng = np.random.default_rng(1)
    sentences = [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) + f" {rng.integers(0, 10**6)}"
                 for _ in range(300)]
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(sentences, vocab_size=ARCH_VOCAB - len(CONTROL), min_frequency=2,
                                show_progress=False)
    model = json.loads(trainer._tokenizer.to_str())["model"]  # noqa: SLF001 - the trained BPE
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens + CONTROL, merges


VOCAB = train_vocab()


def llama3_vocab(pre="llama-bpe"):
    tokens, merges = VOCAB

    def write(w: gguf.GGUFWriter) -> None:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types([1] * (len(tokens) - len(CONTROL)) + [3] * len(CONTROL))
        w.add_token_merges(merges)
        w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
        w.add_eos_token_id(tokens.index("<|eot_id|>"))
        w.add_add_bos_token(True)
    return write


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf_llama3_vocab")
    make_tiny_llama(path / "hf", "linear_untied")
    write_llama_gguf(path / "l3.gguf", path / "hf", LINEAR, vocab=llama3_vocab())
    return path


@pytest.mark.parametrize("add_special", [False, True])
def test_encodes_and_decodes_as_transformers_gguf_loading(llama3, add_special):
    ours, theirs = load_gguf(llama3 / "l3.gguf").tokenizer, hf_tokenizer(llama3, "l3.gguf")
    for text in TEXTS:
        want = theirs.encode(text, add_special_tokens=add_special)
        assert ours.encode(text, add_special_tokens=add_special) == want, text
        assert ours.decode(want) == theirs.decode(want), text
    tokens = VOCAB[0]
    split = [piece for piece, _ in ours.backend.pre_tokenizer.pre_tokenize_str("abc 1234567")]
    assert split == ["abc", "Ġ", "123", "456", "7"]  # Llama 3's split: digits in threes
    assert ours.encode("x", add_special_tokens=True)[0] == tokens.index("<|begin_of_text|>")


def test_an_unknown_pre_tokenizer_is_named(llama3, tmp_path):
    bad = write_llama_gguf(tmp_path / "bad.gguf", llama3 / "hf", LINEAR, vocab=llama3_vocab("tekken"))
    with pytest.raises(ModelFileError, match="tokenizer.ggml.pre is 'tekken'"):
        load_gguf(bad)
