"""tools/perplexity.py: the text is the same on every call and its SHA-256 says which it is, the
windows hold exactly the ids they claim and score exactly the positions the docstring names,
and the llaisys perplexity of the real 0.5B on a short text (two 64-token windows, both KV
layouts, f32 KV) equals exp(mean NLL) computed the same way from transformers' logits. The
llama.cpp side needs the peer build and is run by hand (doc/benchmarks.md)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
WINDOW, N_WINDOWS = 64, 2


def load_tool():
    spec = importlib.util.spec_from_file_location("perplexity_tool", ROOT / "tools" / "perplexity.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["perplexity_tool"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tool():
    return load_tool()


def test_text_is_fixed_and_named_by_its_hash(tool):
    a, b = tool.stdlib_text(), tool.stdlib_text()
    assert a == b
    info = tool.text_info(a)
    assert info["sha256"] == hashlib.sha256(a.encode()).hexdigest()
    assert info["files"] == list(tool.STDLIB_FILES) and info["lines"] > 2000
    root = Path(sysconfig.get_paths()["stdlib"])
    at = 0
    for name in tool.STDLIB_FILES:  # every file whole, in the pinned order, after its header
        part = f"# file: {name}\n" + (root / name).read_text(encoding="utf-8")
        assert a.index(part, at) == at
        at += len(part) + 1
    assert at == len(a) + 1


def test_missing_file_is_a_clear_error(tool):
    with pytest.raises(ValueError, match="files: no_such_module.py"):
        tool.stdlib_text(("no_such_module.py",))


def test_windows_cover_what_they_claim(tool):
    ids = np.arange(1000) * 7
    w = tool.make_windows(ids, 128)
    assert w.shape == (7, 128) and w.dtype == np.int64
    assert (w.ravel() == ids[:7 * 128]).all()  # consecutive, stride = window, the tail dropped
    assert tool.make_windows(ids, 128, max_windows=3).shape == (3, 128)
    assert tool.scored_rows(512) == (256, 511)  # logits of 256..510 score tokens 257..511: 255 per window
    for bad in (dict(window=2), dict(window=True), dict(window=2000), dict(window=128, max_windows=0)):
        with pytest.raises(tool.PerplexityError):
            tool.make_windows(ids, **bad)
    assert issubclass(tool.PerplexityError, ValueError)


def test_llama_kv_dtypes_name_k_and_v_apart(tool):
    args = tool.parse_args(["--llama-kv-dtype", "f16", "q8_0", "q8_0/f16"])
    assert [tool.split_kv(k) for k in args.llama_kv_dtype] == [("f16", "f16"), ("q8_0", "q8_0"), ("q8_0", "f16")]
    for bad in ("q4_0", "q8_0/", "f16/f16/f16"):
        with pytest.raises(SystemExit):
            tool.parse_args(["--llama-kv-dtype", bad])


def test_nll_matches_torch_cross_entropy(tool):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(33, 1000, generator=g) * 8
    targets = torch.randint(0, 1000, (33,), generator=g)
    want = torch.nn.functional.cross_entropy(logits.double(), targets, reduction="none").numpy()
    np.testing.assert_allclose(tool.nll_of(logits.numpy(), targets.numpy()), want, rtol=1e-12, atol=1e-12)
    s = tool.summarize(want)
    assert s["ppl"] == pytest.approx(float(np.exp(want.mean()))) and s["scored_tokens"] == 33


@pytest.mark.slow
def test_a_gguf_file_gives_the_directorys_ids(tool, qwen05_dir, qwen05_gguf):
    """The ids come from the tokenizer of a directory or of a GGUF file (read from its metadata,
    as a model name resolves to on a CPU whose default format is the GGUF) alike."""
    text = tool.stdlib_text()[:4000]
    want = tool.load_tokenizer(str(qwen05_dir)).encode(text)
    assert tool.load_tokenizer(str(qwen05_gguf)).encode(text) == want and len(want) > 500


@pytest.mark.slow
def test_llaisys_perplexity_equals_transformers(tool, qwen05_dir):
    from transformers import AutoModelForCausalLM

    from llaisys import runtime
    from llaisys.models.model import Model

    tokenizer = tool.load_tokenizer(str(qwen05_dir))
    wins = tool.make_windows(tokenizer.encode(tool.stdlib_text()), WINDOW, N_WINDOWS)
    first, end = tool.scored_rows(WINDOW)
    hf = AutoModelForCausalLM.from_pretrained(qwen05_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = hf(torch.from_numpy(wins)).logits[:, first:end]  # [W, R, vocab]
    del hf
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                             torch.from_numpy(wins[:, first + 1:]).reshape(-1),
                                             reduction="none").numpy()
    ppl_hf = float(np.exp(want.mean()))
    # f32 activations: ppl within 1e-6 and each NLL within 2e-5 of transformers (measured); bf16 dot
    # products move a logit by up to ~0.2 (test/parity/test_qwen05_greedy.py)
    rel, per_token = (2e-2, 0.3) if runtime.cpu_isa() == "avx512bf16" else (2e-4, 2e-3)
    with Model.from_path(qwen05_dir) as model:
        for layout in ("block", "slot"):
            nll, top = tool.llaisys_scores(model, wins, "f32", layout)
            assert nll.shape == top.shape == (N_WINDOWS, end - first)
            got = tool.summarize(nll)
            assert got["ppl"] == pytest.approx(ppl_hf, rel=rel), layout
            assert float(np.abs(nll.ravel() - want).max()) < per_token, layout
