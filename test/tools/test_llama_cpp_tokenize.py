"""tools/llama_cpp_tokenize.py writes, with the llama.cpp peer's own tokenizer, exactly the ids that
test/models/test_smollm2_real.py holds our SmolLM2 tokenizer to (skips where the peer is not built:
python tools/build_llama_cpp.py)."""

import subprocess
import sys
from pathlib import Path

import pytest
from benchkit.peer import paths
from llama_cpp_files import models_dir
from smollm2_files import smollm2_gguf

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_ids_are_llama_cpps(tmp_path):
    if not paths()["python"].exists():
        pytest.skip("the llama.cpp peer is not built (python tools/build_llama_cpp.py)")
    texts = models_dir(["ggml-vocab-llama-bpe.gguf.inp"]) / "ggml-vocab-llama-bpe.gguf.inp"
    out = tmp_path / "ids.out"
    subprocess.run([sys.executable, str(ROOT / "tools" / "llama_cpp_tokenize.py"), str(smollm2_gguf()), str(texts),
                    str(out)], check=True, capture_output=True, timeout=300)
    assert out.read_text() == (ROOT / "test" / "models" / "smollm2_llama_cpp_ids.out").read_text()
