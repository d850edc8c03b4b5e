// The Walsh-Hadamard basis a q8_0 KV cache keeps its keys and values in.
//
// q8_0 rounds every value of a 32-value block to 1/254 of the block's largest magnitude. Where
// one dimension is an outlier (Qwen2's keys carry a bias: a block max of ~130 against a median
// |k| of ~6 in the 0.5B's layer 0) the small values of its block round coarsely, and perplexity
// over the pinned text lost 0.78% against f16 KV. An orthonormal Hadamard rotation H of each
// head's row spreads an outlier over its block before quantizing (0.32% then), and attention
// does not change: q.k = (Hq).(Hk), and sum p (Hv) = H sum p v, with H H = I (H is Sylvester's
// matrix over sqrt(n), symmetric). So a q8_0 cache stores H k and H v; the query is rotated
// like the keys before attention and the output is rotated back. llama.cpp does the same for
// its quantized caches (attn_rot_k / attn_rot_v, LLAMA_ATTN_ROT_DISABLE=1 measures without).
#pragma once

#include <cstddef>

namespace llaisys::kv {

// Block sizes of the rotation for a head of head_dim values (a multiple of 32): keys (and
// queries) in the largest power of two dividing head_dim; values in blocks of 64 where that
// divides head_dim, else 32, as llama.cpp measured smaller blocks better for V.
size_t key_rotation(size_t head_dim);
size_t value_rotation(size_t head_dim);

// x [rows, stride]: the first `width` values of each row (width a multiple of block) are
// rotated in place by H, `block` values at a time (block a power of two, >= 2). H is its own
// inverse, so the same call rotates back.
void hadamard(float *x, size_t rows, size_t width, size_t stride, size_t block);

}  // namespace llaisys::kv
