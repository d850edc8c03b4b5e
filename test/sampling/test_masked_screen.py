"""Greedy rows with an allowed_mask through the model step, where the lm_head screen decides
them (src/ops/linear/cpu/logit_screen.hpp: bounds over the allowed ids only, or the exact
logits of just the allowed ids when a mask allows few), against the full logits of the same
step: every token must be the first largest allowed logit (numpy's argmax over the allowed
ids, ascending), which is also what the full sampler gives on those logits.

Masks allow one id, a few, a few hundred (JSON punctuation, enums), a few thousand, most ids,
and every id; rows mix masked and unmasked in one step, alone (batch 1) and past the screen's
8 rows. The tiny checkpoint's lm_head has pairs of identical rows (exact ties, which the
first id must win) and runs in f32, f16 and bf16 under every ISA (child processes); the real
0.5B runs once in this process with a mask of its JSON punctuation tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cpu_features import run_on_isa

PROMPT = "def add(a, b):\n    return a + b\n\nnumbers = [3, 1, 4, 1, 5, 9, 2, 6]\nprint(add("
N_ROWS = 8  # sample rows per step: the screen's kMaxRows
PAIRED = 100_000  # the tiny lm_head's rows 2i + 1 < PAIRED repeat rows 2i


def mask_of(allowed, vocab: int) -> np.ndarray:
    """[(vocab + 31) // 32] uint32 with the bits of `allowed` set."""
    bits = np.zeros((vocab + 31) // 32 * 32, np.uint8)
    bits[np.asarray(allowed, np.int64)] = 1
    return np.packbits(bits, bitorder="little").view(np.uint32).copy()


def ascending_ids(a) -> np.ndarray:
    """The distinct ids of `a`, ascending (np.unique's hash pass took ~90% of this file's time
    on the 152k vocabulary)."""
    a = np.sort(np.asarray(a, np.int64))
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


def all_but(vocab: int, ids) -> np.ndarray:
    """Every id below vocab except `ids`, ascending."""
    keep = np.ones(vocab, bool)
    keep[np.asarray(ids, np.int64)] = False
    return np.flatnonzero(keep)


def case_masks(logits: np.ndarray, rng: np.random.Generator, punct=None) -> list:
    """(name, allowed ids ascending or None) for one row of free logits [vocab]."""
    vocab = logits.shape[0]
    order = np.argsort(-logits, kind="stable")
    top = int(order[0])
    cases = [("one id", [int(rng.integers(vocab))]),
             ("few ids", rng.choice(vocab, 7, replace=False)),
             ("near the top", np.concatenate([order[1:40], rng.choice(vocab, 60, replace=False)])),
             ("a few hundred", rng.choice(vocab, 600, replace=False)),
             ("a few thousand", rng.choice(vocab, 3000, replace=False)),
             ("most, not the top", all_but(vocab, np.append(rng.choice(vocab, 5000), top))),
             ("every id", np.arange(vocab)),
             ("unmasked", None),
             ("a pair", [top & ~1, top | 1]),
             ("twin of the top", all_but(vocab, [top & ~1]))]
    if punct is not None:
        cases.append(("json punctuation", punct))
    return [(name, None if a is None else ascending_ids(a)) for name, a in cases]


def expected(logits: np.ndarray, allowed) -> int:
    if allowed is None:
        return int(np.argmax(logits))
    return int(allowed[np.argmax(logits[allowed])])  # ascending ids: the first of ties


def check_model(model, tokenizer, seed: int, punct=None) -> dict:
    """{case: (ok, tie)}: every case's token from masked steps (8 rows mixed, rotated, alone,
    and 11 rows) against the full logits; tie: the answer had an allowed equal logit."""
    from llaisys.models.qwen2 import RowSampling
    from llaisys.sampler import sample

    ids = np.array(tokenizer.encode(PROMPT), np.int64)
    vocab = model.config.vocab_size
    rng = np.random.default_rng(seed)

    def step(rows, sampling=None, **kw):
        with model.create_kv_cache("slot", n_slots=len(ids) + 8) as cache:
            return model.step(cache, token_ids=ids, positions=np.arange(len(ids)), query_start=[0, len(ids)],
                              sample_rows=[len(ids) - 11 + r for r in rows], seq_ids=[0],
                              sampling=sampling or [RowSampling()] * len(rows), **kw)

    positions = list(range(11))
    full = step(positions, want_logits=True).logits  # [11, vocab]
    cases = [case_masks(full[p], rng, punct) for p in positions]
    names = [name for name, _ in cases[0]]
    results = {name: [True, False] for name in names}

    def run(rows, which):  # which[j]: the case index of row j
        allowed = [cases[p][c][1] for p, c in zip(rows, which)]
        rs = [RowSampling(allowed_mask=None if a is None else mask_of(a, vocab)) for a in allowed]
        got = step(rows, rs, want_logprobs=False).token_ids
        by_sampler = sample(full[rows], rs).token_ids
        for j, (p, c) in enumerate(zip(rows, which)):
            want = expected(full[p], allowed[j])
            res = results[names[c]]
            res[0] = res[0] and int(got[j]) == want == int(by_sampler[j])
            a = np.arange(vocab) if allowed[j] is None else allowed[j]
            res[1] = res[1] or int(np.count_nonzero(full[p][a] == full[p][want])) > 1

    n_cases = len(names)
    for shift in range(n_cases):  # 8 rows mixing cases, each case on every position over the shifts
        run(positions[:N_ROWS], [(j + shift) % n_cases for j in range(N_ROWS)])
    for c in range(n_cases):  # batch 1
        run([0], [c])
    run(positions, [j % n_cases for j in range(11)])  # past the screen's rows: every logit
    return {name: tuple(v) for name, v in results.items()}


def paired_checkpoint(path: Path, tokenizer_dir) -> Path:
    """The tiny checkpoint with lm_head rows 2i + 1 = rows 2i below PAIRED: exact ties."""
    from safetensors.torch import load_file, save_file
    from tiny_checkpoint import make_tiny_checkpoint

    make_tiny_checkpoint(path, tokenizer_dir, seed=3)
    f = path / "model.safetensors"
    tensors = load_file(f)
    w = tensors["lm_head.weight"]
    w[1:PAIRED:2] = w[0:PAIRED:2]
    save_file(tensors, f, metadata={"format": "pt"})
    return path


CHILD = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.."]
from llaisys import runtime
print(runtime.cpu_isa())
from llaisys.models.qwen2 import Qwen2Model
from llaisys.models.tokenizer import Tokenizer
from test_masked_screen import check_model
out = {}
tok = Tokenizer.from_dir(sys.argv[2])
for dtype in ("f32", "f16", "bf16"):
    with Qwen2Model.from_path(sys.argv[2], dtype=dtype) as model:
        for case, v in check_model(model, tok, seed=11).items():
            out[f"{dtype} {case}"] = v
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def tiny_paired(qwen05_dir, tmp_path_factory):
    return paired_checkpoint(tmp_path_factory.mktemp("tiny_paired"), qwen05_dir)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16"])
def test_masked_greedy_on_tiny_model(isa, tiny_paired):
    results = run_on_isa(isa, CHILD, str(Path(__file__).parent), str(tiny_paired))
    wrong = [case for case, (ok, _) in results.items() if not ok]
    assert not wrong, f"{isa}: masked greedy differs from the full logits' allowed argmax: {wrong}"
    for dtype in ("f32", "f16", "bf16"):  # the pairs made ties the first id had to win
        for case in ("every id", "unmasked", "a pair"):
            assert results[f"{dtype} {case}"][1], f"{isa} {dtype} {case}: no tie was exercised"


@pytest.mark.slow
def test_masked_greedy_on_qwen05(qwen05_dir):
    from llaisys.models.qwen2 import Qwen2Model
    from llaisys.models.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(qwen05_dir)
    vocab = json.loads((Path(qwen05_dir) / "config.json").read_text())["vocab_size"]
    punct = [i for i in range(min(vocab, tok.vocab_size))
             if (s := tok.decode([i])) and s.strip() and set(s.strip()) <= set('{}[]:,"')]
    assert 20 < len(punct) < 2000, len(punct)
    with Qwen2Model.from_path(qwen05_dir) as model:
        results = check_model(model, tok, seed=5, punct=punct)
    wrong = [case for case, (ok, _) in results.items() if not ok]
    assert not wrong, f"masked greedy differs from the full logits' allowed argmax: {wrong}"
