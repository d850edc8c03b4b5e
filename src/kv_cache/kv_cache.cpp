#include "kv_cache.hpp"

#include "hadamard.hpp"

#include "../device/runtime_api.hpp"
#include "../ops/rope/cpu/rope_cpu.hpp"
#include "../quant/dequant.hpp"
#include "../quant/quantize.hpp"
#include "../utils/checked.hpp"
#include "../utils/error.hpp"
#include "../utils/types.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <vector>

namespace llaisys::kv {

size_t KVCache::row_bytes(const llaisysKVCacheParams_t &p) {
    const size_t elems = checked_mul(p.n_kv_heads, p.head_dim, "KV cache n_kv_heads * head_dim");
    if (p.dtype == LLAISYS_DTYPE_Q8_0) return quant::row_bytes(p.dtype, elems);  // head_dim % 32 == 0 (checked)
    return checked_mul(elems, dtype_size(p.dtype), "KV cache row bytes");
}

size_t KVCache::k_rotation() const { return p_.dtype == LLAISYS_DTYPE_Q8_0 ? key_rotation(p_.head_dim) : 0; }

size_t KVCache::v_rotation() const { return p_.dtype == LLAISYS_DTYPE_Q8_0 ? value_rotation(p_.head_dim) : 0; }

size_t KVCache::bytes_per_slot(const llaisysKVCacheParams_t &p) {
    const size_t row = row_bytes(p);
    return checked_mul(checked_mul(2, p.n_layers, "KV cache 2 * n_layers"), row, "KV cache bytes per slot");
}

KVCache::KVCache(const llaisysKVCacheParams_t &params) : p_(params) {
    LLAISYS_CHECK_ARG(p_.layout == LLAISYS_KV_LAYOUT_BLOCK || p_.layout == LLAISYS_KV_LAYOUT_SLOT,
                      "unknown KV layout ", int(p_.layout));
    LLAISYS_CHECK(is_float_dtype(p_.dtype) || p_.dtype == LLAISYS_DTYPE_Q8_0, LLAISYS_STATUS_DTYPE_MISMATCH,
                  "KV cache dtype (kv_dtype) must be f32, f16, bf16 or q8_0, got ", dtype_name(p_.dtype));
    LLAISYS_CHECK_ARG(p_.n_layers > 0 && p_.n_kv_heads > 0 && p_.head_dim > 0 && p_.head_dim % 2 == 0,
                      "KV cache needs n_layers, n_kv_heads > 0 and an even head_dim > 0");
    if (p_.dtype == LLAISYS_DTYPE_Q8_0) {  // q8_0: the CPU kernels only, whole 32-value blocks per head
        LLAISYS_CHECK(p_.device == LLAISYS_DEVICE_CPU, LLAISYS_STATUS_UNSUPPORTED,
                      "kv_dtype q8_0 runs on the CPU only (use f16, bf16 or f32 on this device)");
        LLAISYS_CHECK(p_.head_dim % quant_block_size(p_.dtype) == 0, LLAISYS_STATUS_UNSUPPORTED,
                      "kv_dtype q8_0 needs a head_dim that is a multiple of 32, the model's is ", p_.head_dim);
    }
    LLAISYS_CHECK_ARG(p_.n_slots > 0, "KV cache needs at least one slot");
    // slots are int32 in block tables and attention views
    LLAISYS_CHECK_ARG(p_.n_slots <= size_t(INT32_MAX), "KV cache n_slots ", p_.n_slots, " exceeds ", INT32_MAX);
    checked_mul(bytes_per_slot(p_), p_.n_slots, "KV cache bytes (n_slots * bytes per slot)");
    if (p_.layout == LLAISYS_KV_LAYOUT_BLOCK) {
        LLAISYS_CHECK_ARG(p_.block_size > 0 && p_.n_slots % p_.block_size == 0, "BLOCK layout: n_slots (", p_.n_slots,
                          ") must be a positive multiple of block_size (", p_.block_size, ")");
    } else {
        LLAISYS_CHECK_ARG(std::isfinite(p_.rope_theta) && p_.rope_theta > 0.0f, "SLOT layout needs rope_theta > 0");
        cells_ = std::make_unique<UnifiedCells>(p_.n_slots);
    }

    std::vector<size_t> shape{p_.n_layers, p_.n_slots, p_.n_kv_heads, p_.head_dim};
    k_ = Tensor::create(shape, p_.dtype, p_.device, p_.device_id);
    v_ = Tensor::create(shape, p_.dtype, p_.device, p_.device_id);
    // seq_add's (SLOT) and copy_shift's (BLOCK) default table, that of rope_theta (a BLOCK cache
    // may be made without one: then only a delta 0 copy works until set_rope)
    if (cells_ || (std::isfinite(p_.rope_theta) && p_.rope_theta > 0.0f)) {
        std::vector<float> inv_freq(p_.head_dim / 2);  // [head_dim / 2]
        for (size_t j = 0; j < inv_freq.size(); j++) {
            inv_freq[j] = 1.0f / std::pow(p_.rope_theta, float(2 * j) / float(p_.head_dim));
        }
        set_rope(std::move(inv_freq));
    }
}

KVCache::~KVCache() {
    if (shift_stream_ == nullptr) return;
    try {  // a destructor must not throw (and at process exit the device runtime may be gone)
        device::runtime(p_.device).stream_destroy(p_.device_id, shift_stream_);
    } catch (...) {
    }
}

void KVCache::set_rope(std::vector<float> inv_freq) {
    LLAISYS_CHECK(inv_freq.size() == p_.head_dim / 2, LLAISYS_STATUS_SHAPE_MISMATCH, "KV cache set_rope: inv_freq has ",
                  inv_freq.size(), " entries, head_dim / 2 is ", p_.head_dim / 2);
    for (size_t j = 0; j < inv_freq.size(); j++) {
        LLAISYS_CHECK_ARG(std::isfinite(inv_freq[j]), "KV cache set_rope: inv_freq[", j, "] = ", inv_freq[j],
                          " is not finite");
    }
    if (p_.device != LLAISYS_DEVICE_CPU) {
        tensor_t dev = Tensor::create({inv_freq.size()}, LLAISYS_DTYPE_F32, p_.device, p_.device_id);
        dev->load(inv_freq.data(), inv_freq.size() * sizeof(float));
        inv_freq_dev_ = dev;
    }
    inv_freq_ = std::move(inv_freq);
}

std::byte *KVCache::k(size_t layer) const { return k_->data() + layer * p_.n_slots * row_bytes(); }
std::byte *KVCache::v(size_t layer) const { return v_->data() + layer * p_.n_slots * row_bytes(); }

UnifiedCells &KVCache::cells() {
    LLAISYS_CHECK(cells_ != nullptr, LLAISYS_STATUS_UNSUPPORTED,
                  "this operation needs the SLOT layout; the cache uses BLOCK (the block manager owns its slots)");
    return *cells_;
}

llaisysKVCacheStats_t KVCache::stats() const {
    llaisysKVCacheStats_t s{};
    s.layout = p_.layout;
    s.capacity = p_.n_slots;
    s.used = cells_ ? cells_->used() : 0;
    s.free = s.capacity - s.used;
    s.bytes = bytes_per_slot(p_) * p_.n_slots;
    s.block_size = p_.layout == LLAISYS_KV_LAYOUT_BLOCK ? p_.block_size : 1;
    return s;
}

void KVCache::clear() {
    if (cells_) cells_->clear();
}

void KVCache::check_block(size_t block) const {
    LLAISYS_CHECK(p_.layout == LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_STATUS_UNSUPPORTED,
                  "block read/write needs the BLOCK layout; this cache uses SLOT");
    const size_t n_blocks = p_.n_slots / p_.block_size;
    LLAISYS_CHECK(block < n_blocks, LLAISYS_STATUS_OUT_OF_RANGE, "block ", block, " is outside [0, ", n_blocks, ")");
}

size_t KVCache::block_bytes() const {
    LLAISYS_CHECK(p_.layout == LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_STATUS_UNSUPPORTED,
                  "block bytes need the BLOCK layout; this cache uses SLOT");
    return bytes_per_slot(p_) * p_.block_size;  // fits: n_slots * bytes_per_slot was checked
}

// One layer's K (or V) of a block is contiguous: block_size rows of row_elems elements.
void KVCache::read_block(size_t block, void *dst, size_t capacity) const {
    check_block(block);
    LLAISYS_CHECK_ARG(dst != nullptr, "dst is NULL");
    const size_t total = block_bytes(), part = p_.block_size * row_bytes();
    LLAISYS_CHECK(capacity >= total, LLAISYS_STATUS_BUFFER_TOO_SMALL, "a block holds ", total,
                  " bytes, the buffer has ", capacity);
    auto &rt = device::runtime(p_.device);
    auto kind = p_.device == LLAISYS_DEVICE_CPU ? LLAISYS_MEMCPY_H2H : LLAISYS_MEMCPY_D2H;
    if (p_.device != LLAISYS_DEVICE_CPU) rt.synchronize(p_.device_id);  // a step's writes may still be queued
    auto *out = static_cast<std::byte *>(dst);  // [n_layers][2][block_size, n_kv_heads, head_dim]
    for (size_t layer = 0; layer < p_.n_layers; layer++) {
        rt.memcpy(p_.device_id, out + (2 * layer) * part, k(layer) + block * part, part, kind);
        rt.memcpy(p_.device_id, out + (2 * layer + 1) * part, v(layer) + block * part, part, kind);
    }
}

void KVCache::write_block(size_t block, const void *src, size_t size) {
    check_block(block);
    LLAISYS_CHECK_ARG(src != nullptr, "src is NULL");
    const size_t total = block_bytes(), part = p_.block_size * row_bytes();
    LLAISYS_CHECK(size == total, LLAISYS_STATUS_SHAPE_MISMATCH, "a block holds ", total, " bytes, got ", size);
    auto &rt = device::runtime(p_.device);
    auto kind = p_.device == LLAISYS_DEVICE_CPU ? LLAISYS_MEMCPY_H2H : LLAISYS_MEMCPY_H2D;
    const auto *in = static_cast<const std::byte *>(src);
    for (size_t layer = 0; layer < p_.n_layers; layer++) {
        rt.memcpy(p_.device_id, k(layer) + block * part, in + (2 * layer) * part, part, kind);
        rt.memcpy(p_.device_id, v(layer) + block * part, in + (2 * layer + 1) * part, part, kind);
    }
}

void KVCache::seq_add(int32_t seq, int64_t p0, int64_t p1, int64_t delta) {
    std::vector<int32_t> shifted;
    cells().seq_add(seq, p0, p1, delta, shifted);
    if (p_.device != LLAISYS_DEVICE_CPU) {
#ifdef LLAISYS_ENABLE_NVIDIA
        rotate_keys_nvidia(shifted, delta);
        return;
#else
        fail(LLAISYS_STATUS_UNSUPPORTED, "seq_add: no backend for device ", int(p_.device), " in this build");
#endif
    }
    std::vector<float> scratch;
    for (size_t layer = 0; layer < p_.n_layers; layer++) {
        for (int32_t cell : shifted) rotate_key_cpu(layer, cell, delta, scratch);
    }
}

// RoPE composes: rotating a key stored at p by delta gives the key at p + delta. A q8_0 row is
// widened to f32, taken out of its Hadamard basis (H is its own inverse), rotated, put back and
// quantized again (as llama.cpp's K shift does).
void KVCache::rotate_key_cpu(size_t layer, int32_t slot, int64_t delta, std::vector<float> &scratch) {
    std::byte *row = k(layer) + size_t(slot) * row_bytes();
    if (p_.dtype != LLAISYS_DTYPE_Q8_0) {
        ops::cpu::rope(row, row, &delta, p_.dtype, 1, p_.n_kv_heads, p_.head_dim, row_elems(), inv_freq_.data(),
                       1.0f);
        return;
    }
    scratch.resize(row_elems());  // [n_kv_heads * head_dim] one q8_0 row in f32
    auto *blocks = reinterpret_cast<quant::BlockQ8_0 *>(row);
    const size_t nb = row_elems() / quant::kBlock32;
    for (size_t b = 0; b < nb; b++) quant::dequantize_block(blocks[b], scratch.data() + b * quant::kBlock32);
    auto *fb = reinterpret_cast<std::byte *>(scratch.data());
    hadamard(scratch.data(), 1, row_elems(), row_elems(), k_rotation());
    ops::cpu::rope(fb, fb, &delta, LLAISYS_DTYPE_F32, 1, p_.n_kv_heads, p_.head_dim, row_elems(), inv_freq_.data(),
                   1.0f);
    hadamard(scratch.data(), 1, row_elems(), row_elems(), k_rotation());
    for (size_t b = 0; b < nb; b++) quant::quantize_block(scratch.data() + b * quant::kBlock32, blocks[b]);
}

void KVCache::copy_shift(size_t n, const int32_t *src, const int32_t *dst, const int64_t *delta) {
    LLAISYS_CHECK(p_.layout == LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_STATUS_UNSUPPORTED,
                  "copy_shift needs the BLOCK layout; the SLOT layout moves cells with seq_add");
    if (n == 0) return;
    LLAISYS_CHECK_ARG(src != nullptr && dst != nullptr && delta != nullptr,
                      "copy_shift: src, dst and delta must not be NULL when n > 0");
#ifdef LLAISYS_ENABLE_NVIDIA
    LLAISYS_CHECK(p_.device == LLAISYS_DEVICE_CPU || p_.device == LLAISYS_DEVICE_NVIDIA, LLAISYS_STATUS_UNSUPPORTED,
                  "copy_shift (cache reuse) runs on the CPU and NVIDIA GPUs, not on device ", int(p_.device));
#else
    LLAISYS_CHECK(p_.device == LLAISYS_DEVICE_CPU, LLAISYS_STATUS_UNSUPPORTED,
                  "copy_shift (cache reuse) runs on the CPU only in this build");
#endif
    std::vector<int32_t> dsts(dst, dst + n);  // [n] sorted: distinct, and no src among them
    std::sort(dsts.begin(), dsts.end());
    for (size_t i = 0; i < n; i++) {
        for (int32_t s : {src[i], dst[i]}) {
            LLAISYS_CHECK(s >= 0 && size_t(s) < p_.n_slots, LLAISYS_STATUS_OUT_OF_RANGE, "copy_shift: slot ", s,
                          " (entry ", i, ") is outside [0, ", p_.n_slots, ")");
        }
        LLAISYS_CHECK_ARG(delta[i] >= -int64_t(INT32_MAX) && delta[i] <= int64_t(INT32_MAX), "copy_shift: delta ",
                          delta[i], " (entry ", i, ") is outside [-", INT32_MAX, ", ", INT32_MAX, "]");
        LLAISYS_CHECK_ARG(delta[i] == 0 || !inv_freq_.empty(), "copy_shift: the cache has no RoPE table to rotate "
                          "keys with (made with rope_theta 0; a model's cache has the model's)");
        LLAISYS_CHECK_ARG(!std::binary_search(dsts.begin(), dsts.end(), src[i]), "copy_shift: slot ", src[i],
                          " is both a src (entry ", i, ") and a dst");
    }
    const auto dup = std::adjacent_find(dsts.begin(), dsts.end());
    LLAISYS_CHECK_ARG(dup == dsts.end(), "copy_shift: dst slot ", dup == dsts.end() ? 0 : *dup, " is given twice");
#ifdef LLAISYS_ENABLE_NVIDIA
    if (p_.device == LLAISYS_DEVICE_NVIDIA) {  // f32, f16 or bf16 (a GPU cache has no q8_0)
        copy_shift_nvidia(n, src, dst, delta);
        return;
    }
#endif
    const size_t rb = row_bytes();
    std::vector<float> scratch;
    for (size_t layer = 0; layer < p_.n_layers; layer++) {
        for (size_t i = 0; i < n; i++) {
            std::memcpy(k(layer) + size_t(dst[i]) * rb, k(layer) + size_t(src[i]) * rb, rb);
            std::memcpy(v(layer) + size_t(dst[i]) * rb, v(layer) + size_t(src[i]) * rb, rb);
            if (delta[i] != 0) rotate_key_cpu(layer, dst[i], delta[i], scratch);
        }
    }
}

}  // namespace llaisys::kv
