"""bf16 helpers agree bit for bit with torch's casts."""

import numpy as np
import pytest
import torch

from llaisys.models import bf16


def _special_f32() -> np.ndarray:
    bits = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
                     0x00000001, 0x807FFFFF, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F807FFF,
                     0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x00008000, 0x00018000], dtype=np.uint32)
    return bits.view(np.float32)


def _torch_bf16_bits(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def test_f32_to_bf16_matches_torch_on_edge_cases():
    x = _special_f32()
    assert np.array_equal(bf16.f32_to_bf16(x), _torch_bf16_bits(x))


def test_f32_to_bf16_matches_torch_on_random_bits():
    rng = np.random.default_rng(0)
    # more than one internal chunk, every bit pattern class (normals, subnormals, inf, nan)
    x = rng.integers(0, 2**32, size=(3, (1 << 22) // 3 + 7), dtype=np.uint32).view(np.float32)
    assert np.array_equal(bf16.f32_to_bf16(x), _torch_bf16_bits(x))


def test_bf16_to_f32_is_exact():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    ref = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).to(torch.float32).numpy()
    ours = bf16.bf16_to_f32(bits)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("src,dst", [("bf16", "f16"), ("f16", "bf16"), ("f32", "f16"), ("f16", "f32"),
                                     ("bf16", "f32"), ("f32", "bf16")])
def test_convert_matches_torch(src, dst):
    rng = np.random.default_rng(1)
    t = torch.from_numpy((rng.standard_normal(4096) * 30).astype(np.float32))
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    src_t = t.to(tdt[src])
    raw = src_t.view(torch.int16).numpy().view(np.uint16) if src == "bf16" else src_t.numpy()
    out = bf16.convert(raw, src, dst)
    want = src_t.to(tdt[dst])
    want = want.view(torch.int16).numpy().view(np.uint16) if dst == "bf16" else want.numpy()
    assert out.dtype == want.dtype and np.array_equal(out.view(np.uint8), want.view(np.uint8))


def test_convert_rejects_non_float_tags():
    with pytest.raises(ValueError, match="i32"):
        bf16.convert(np.zeros(2, np.int32), "i32", "f32")
