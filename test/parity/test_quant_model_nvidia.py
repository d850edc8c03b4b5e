"""Block-quantized weights through the whole forward on an NVIDIA GPU (the GPU twin of
test_quant_model.py): the same small random Qwen2 whose linears are GGUF blocks, run by a model on
the GPU, which keeps them as blocks in device memory (models/decoder/weights.hpp) and runs the
quantized GEMV for the decode step (3 rows) and dequantized bf16 panels through cuBLAS for the
batched prefill (27 tokens), against transformers on gguf-py's dequantized weights.

The bound is test_quant_model's own (1.5x what rounding every linear's input to int8 blocks moves
transformers' logits): the GPU's decode sums exact products in f32, and its prefill rounds each
activation and weight once to bf16, at most 2^-9 of each value where the int8 blocks move a
value by up to max|block| / 254, so the GPU's error is expected to be the smaller of the two.
Skipped where there is no NVIDIA GPU.
"""

import pytest

from llaisys import DeviceType
from llaisys import runtime as rt

pytest.importorskip("gguf")

from llaisys.models.model import Model  # noqa: E402

from . import test_quant_model as cpu_case  # noqa: E402
from .test_quant_model import ALL, Reference, build, check_prompts  # noqa: E402

NV = DeviceType.NVIDIA
pytestmark = pytest.mark.skipif(rt.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine")


@pytest.fixture(autouse=True)
def on_the_gpu(monkeypatch):
    """build() constructs its Model on the GPU."""
    monkeypatch.setattr(cpu_case, "Model", lambda loaded: Model(loaded, device=NV))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q5_0", "q4_k", "q5_k", "q6_k"])
@pytest.mark.parametrize("layout", ["block", "slot"])
def test_every_linear_in_one_format_on_the_gpu(fmt, layout):
    fmts = {p: fmt for p in ALL}
    hf, model = build(fmts, tie=False, embed_fmt=None)
    try:
        check_prompts(Reference(hf, fmts), model, layout)
    finally:
        model.close()


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_mixed_formats_like_a_q4_k_m_file_on_the_gpu(tie):
    """One fused qkv of Q4_K and Q6_K parts (three segments), lm_head Q6_K; tied: the quantized
    lm_head is the embedding too, looked up by the device dequantizer."""
    fmts = dict.fromkeys(ALL, "q4_k")
    fmts.update(v_proj="q6_k", down_proj="q6_k", lm_head="q6_k")
    hf, model = build(fmts, tie=tie, embed_fmt="q4_k")
    try:
        check_prompts(Reference(hf, fmts), model, "block")
    finally:
        model.close()


def test_quantized_and_float_weights_in_one_fused_linear_are_refused_on_the_gpu():
    from llaisys import LlaisysInputError

    fmts = dict.fromkeys(ALL, "q8_0")
    fmts["k_proj"] = None  # q quantized first, then k float: one fused qkv holds one form
    with pytest.raises(LlaisysInputError, match="fused"):
        build(fmts, tie=False, embed_fmt=None)
