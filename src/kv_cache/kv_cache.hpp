// KV storage for all layers plus, in the SLOT layout, the cells' metadata.
#pragma once

#include "../tensor/tensor.hpp"
#include "llaisys/kv_cache.h"
#include "unified/cells.hpp"

#include <memory>
#include <vector>

namespace llaisys::kv {

class KVCache {
public:
    explicit KVCache(const llaisysKVCacheParams_t &params);
    ~KVCache();  // destroys seq_add's stream (GPU caches), after its work
    KVCache(const KVCache &) = delete;
    KVCache &operator=(const KVCache &) = delete;

    const llaisysKVCacheParams_t &params() const { return p_; }
    llaisysKVLayout_t layout() const { return p_.layout; }
    llaisysDataType_t dtype() const { return p_.dtype; }
    size_t n_slots() const { return p_.n_slots; }
    size_t row_elems() const { return p_.n_kv_heads * p_.head_dim; }  // elements of one slot of one layer
    size_t row_bytes() const { return row_bytes(p_); }                 // bytes of one slot of one layer
    // Bytes of one slot of one layer: elements x dtype size, or whole q8_0 blocks (34 bytes
    // per 32 values, each head's row its own head_dim / 32 blocks).
    static size_t row_bytes(const llaisysKVCacheParams_t &params);
    // The block sizes of the Hadamard basis the cache keeps keys and values in (hadamard.hpp):
    // a q8_0 cache's key_rotation(head_dim) and value_rotation(head_dim); 0 (stored as they
    // are) for the float dtypes. The writer rotates K, V and the query; attention's output is
    // rotated back by value_rotation.
    size_t k_rotation() const;
    size_t v_rotation() const;

    std::byte *k(size_t layer) const;  // [n_slots, n_kv_heads, head_dim] of layer (row_bytes() per slot)
    std::byte *v(size_t layer) const;

    UnifiedCells &cells();  // SLOT only; throws UNSUPPORTED on BLOCK
    llaisysKVCacheStats_t stats() const;
    void clear();

    // SLOT: shift seq's positions and re-rotate the stored keys by delta.
    void seq_add(int32_t seq, int64_t p0, int64_t p1, int64_t delta);

    // BLOCK, CPU or NVIDIA (cache reuse): for i < n, in every layer, slot dst[i] gets slot src[i]'s V and
    // its K re-rotated by delta[i] positions, with seq_add's rotation and table. The dst slots
    // are distinct and none is a src slot; every check is made before anything is written.
    void copy_shift(size_t n, const int32_t *src, const int32_t *dst, const int64_t *delta);

    // The RoPE frequencies seq_add rotates keys with: inv_freq [head_dim / 2], the model's
    // (scaled) table (ops/rope/rope_freqs.hpp). A pure rotation (attention scale 1). Until it
    // is called, the default table of params().rope_theta. A GPU cache keeps a device copy.
    void set_rope(std::vector<float> inv_freq);

    // BLOCK: one block's K and V over all layers as host bytes laid out
    // [n_layers][2: K, V][block_size, n_kv_heads, head_dim] (block_bytes() of them).
    size_t block_bytes() const;
    void read_block(size_t block, void *dst, size_t capacity) const;
    void write_block(size_t block, const void *src, size_t size);

    // Bytes of K+V storage for n_slots slots.
    static size_t bytes_per_slot(const llaisysKVCacheParams_t &params);

private:
    void check_block(size_t block) const;

    // CPU: re-rotate the key of `slot` in `layer` by delta positions, in place (seq_add and
    // copy_shift). A q8_0 row is widened into `scratch` [row_elems()], taken out of its Hadamard
    // basis, rotated, put back and quantized again.
    void rotate_key_cpu(size_t layer, int32_t slot, int64_t delta, std::vector<float> &scratch);

    // seq_add on a GPU: rotate the keys of `cells` by delta positions, in one launch on the
    // cache's own stream, synchronized before it returns (nvidia/shift_nvidia.cpp).
    void rotate_keys_nvidia(const std::vector<int32_t> &cells, int64_t delta);
    // copy_shift on a GPU, its arguments checked: one launch on the same stream, the same order.
    void copy_shift_nvidia(size_t n, const int32_t *src, const int32_t *dst, const int64_t *delta);

    llaisysKVCacheParams_t p_;
    tensor_t k_, v_;  // [n_layers, n_slots, n_kv_heads, head_dim]
    std::vector<float> inv_freq_;  // [head_dim / 2] host table of seq_add's (and copy_shift's) rotation;
                                   // empty for a BLOCK cache made without a rope_theta > 0 or set_rope
    tensor_t inv_freq_dev_;        // [head_dim / 2] f32 copy on the cache's device (GPU caches only)
    std::unique_ptr<UnifiedCells> cells_;
    void *shift_stream_ = nullptr;  // GPU caches: the native stream seq_add's and copy_shift's kernels
                                    // run on (created on first use, owned here)
};

}  // namespace llaisys::kv
