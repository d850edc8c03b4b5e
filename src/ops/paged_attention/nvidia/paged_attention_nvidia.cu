#include "paged_attention_nvidia.hpp"

#include "../../../core/allocator.hpp"
#include "../../linear/nvidia/gemm_common.hpp"
#include "decode_kernel.cuh"
#include "decode_wide_kernel.cuh"
#include "flash_kernel.cuh"

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace llaisys::ops::nvidia {

namespace {
constexpr size_t kDecodeMaxQueries = 4;  // rows with at most this many queries: decode config

// The split counters of decode_kernel (Partials::done), per (thread, device): zeroed when
// allocated, and every launch leaves them zero. Grown (after a device synchronize: queued
// launches may still use the old ones) to the most (token, kv head) pairs seen.
class SplitCounters {
public:
    ~SplitCounters() {
        for (size_t id = 0; id < bufs_.size(); id++) {
            try {  // at process exit CUDA may be gone already
                if (bufs_[id].first) {
                    core::release(LLAISYS_DEVICE_NVIDIA, int(id), LLAISYS_MEMORY_DEVICE, bufs_[id].first);
                    scratch_released();
                }
            } catch (...) {
            }
        }
    }
    unsigned *get(int device, size_t count, cudaStream_t stream) {
        if (bufs_.size() <= size_t(device)) bufs_.resize(size_t(device) + 1);
        auto &[ptr, size] = bufs_[size_t(device)];
        if (count <= size) return static_cast<unsigned *>(ptr);
        LLAISYS_CUDA_CHECK(cudaDeviceSynchronize());
        if (ptr) {
            core::release(LLAISYS_DEVICE_NVIDIA, device, LLAISYS_MEMORY_DEVICE, ptr);
            scratch_released();  // a captured graph may hold the old counters
        }
        ptr = nullptr;
        size = 0;
        const size_t grown = count < 1024 ? 1024 : count + count / 2;
        ptr = core::allocate(LLAISYS_DEVICE_NVIDIA, device, LLAISYS_MEMORY_DEVICE, grown * sizeof(unsigned));
        size = grown;
        LLAISYS_CUDA_CHECK(cudaMemsetAsync(ptr, 0, grown * sizeof(unsigned), stream));
        return static_cast<unsigned *>(ptr);
    }

private:
    std::vector<std::pair<void *, size_t>> bufs_;
};

unsigned *split_counters(int device, size_t count, cudaStream_t stream) {
    thread_local SplitCounters counters;
    return counters.get(device, count, stream);
}

// LLAISYS_FLASH_PREFILL=1: long query rows take the tensor-core kernel (flash_kernel.cuh) where
// it serves the shape. Opt-in until it has run on a GPU; read at every launch, so a test can
// turn it on and off in one process.
bool flash_prefill() {
    const char *env = std::getenv("LLAISYS_FLASH_PREFILL");
    return env && std::strcmp(env, "1") == 0;
}

// LLAISYS_WIDE_DECODE=1: decode rows take the wide-load kernel (decode_wide_kernel.cuh) where it
// serves the shape. Opt-in until it has run on a GPU; read at every launch, as above.
bool wide_decode() {
    const char *env = std::getenv("LLAISYS_WIDE_DECODE");
    return env && std::strcmp(env, "1") == 0;
}
}  // namespace

namespace {

// Both views' launches (decode split-K, or one block per (token, kv head); then the prefill
// configuration for longer rows) over one Source.
template <class Source>
void run(const Source &src, std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride,
         llaisysDataType_t act, const std::byte *k_cache, const std::byte *v_cache, llaisysDataType_t kvdt,
         size_t n_seqs, size_t n_tokens, size_t max_q_len, size_t max_kv_len, size_t heads, size_t kv_heads, size_t d,
         size_t dv, float scale, cudaStream_t stream, int64_t window) {
    if (n_tokens == 0 || n_seqs == 0 || heads == 0 || dv == 0) return;
    LLAISYS_CHECK_ARG(kv_heads > 0 && heads % kv_heads == 0, "paged_attention: ", heads,
                      " query heads are not a multiple of ", kv_heads, " kv heads");
    LLAISYS_CHECK_ARG(window >= 0, "paged_attention: window must be >= 0, got ", window);
    attention::Params p{out, out_stride, q, q_stride, k_cache, v_cache, heads, kv_heads, d, dv, scale, 0, 0, 0, 0};
    const size_t group = heads / kv_heads;
    // rows of up to kDecodeMaxQueries queries: each token's keys split over several blocks
    // (decode_kernel.cuh) where the shape allows, else one block per (token, kv head)
    const size_t short_tiles = max_q_len < kDecodeMaxQueries ? max_q_len : kDecodeMaxQueries;
    const bool wide = wide_decode() && attention::wide_decode_serves(act, kvdt, group, d, dv, k_cache, v_cache);
    if (wide || attention::decode_split_serves(group, d, dv)) {
        int device = 0;
        LLAISYS_CUDA_CHECK(cudaGetDevice(&device));
        const size_t blocks = n_seqs * short_tiles;
        const size_t splits = attention::decode_splits(
            blocks * kv_heads, max_kv_len, device, wide ? attention::kWideMinKeysPerSplit : attention::kMinKeysPerSplit);
        const size_t floats = attention::decode_partial_floats(blocks, heads, dv, splits);
        float *scratch = floats ? reinterpret_cast<float *>(thread_scratch(device, floats * sizeof(float))) : nullptr;
        unsigned *done = splits > 1 ? split_counters(device, blocks * kv_heads, stream) : nullptr;
        if (wide) {  // its partial sums are read as float4
            LLAISYS_CHECK(scratch == nullptr || attention::aligned16(scratch), LLAISYS_STATUS_INTERNAL,
                          "paged_attention: split scratch is not 16-byte aligned");
            attention::launch_wide_decode(p, src, kvdt, n_seqs, short_tiles, 0, kDecodeMaxQueries, splits, scratch,
                                          done, stream);
        } else {
            attention::launch_decode(p, src, act, kvdt, n_seqs, short_tiles, 0, kDecodeMaxQueries, splits, scratch,
                                     done, stream);
        }
    } else {
        attention::launch(p, src, act, kvdt, n_seqs, 1, short_tiles, 0, kDecodeMaxQueries, stream);
    }
    if (max_q_len > kDecodeMaxQueries && flash_prefill() && attention::flash_serves(kvdt, group, d, dv) &&
        attention::aligned16(k_cache) && attention::aligned16(v_cache)) {  // its K/V loads are 16 bytes
        const size_t tt = attention::flash_tile_tokens(group);
        attention::launch_flash(p, src, act, kvdt, n_seqs, attention::ceil_div(max_q_len, tt), kDecodeMaxQueries + 1,
                                SIZE_MAX, stream);
    } else if (max_q_len > kDecodeMaxQueries) {  // prefill config for the longer rows
        const size_t tt = attention::prefill_tile_tokens(group);
        attention::launch(p, src, act, kvdt, n_seqs, tt, attention::ceil_div(max_q_len, tt), kDecodeMaxQueries + 1,
                          SIZE_MAX, stream);
    }
}

}  // namespace

void paged_attention(std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride,
                     llaisysDataType_t act, const std::byte *k_cache, const std::byte *v_cache,
                     llaisysDataType_t kvdt, const cpu::AttentionView &view, size_t n_tokens,
                     size_t max_q_len, size_t max_kv_len, size_t heads, size_t kv_heads, size_t d,
                     size_t dv, float scale, cudaStream_t stream, int64_t window) {
    const attention::PagedSource src{view.query_start, view.q_pos, view.kv_start, view.kv_slots, view.kv_pos, window};
    run(src, out, out_stride, q, q_stride, act, k_cache, v_cache, kvdt, view.n_seqs, n_tokens, max_q_len, max_kv_len,
        heads, kv_heads, d, dv, scale, stream, window);
}

void paged_attention(std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride,
                     llaisysDataType_t act, const std::byte *k_cache, const std::byte *v_cache,
                     llaisysDataType_t kvdt, const BlockTableView &view, size_t n_tokens,
                     size_t max_q_len, size_t max_kv_len, size_t heads, size_t kv_heads, size_t d,
                     size_t dv, float scale, cudaStream_t stream, int64_t window) {
    LLAISYS_CHECK_ARG(view.block_size > 0 && view.block_size <= UINT32_MAX,
                      "paged_attention: block_size must be in [1, 2^32), got ", view.block_size);
    const attention::BlockSource src{view.query_start, view.q_pos,      view.block_tables, view.context_lens,
                                     view.max_blocks,  view.block_size, window};
    run(src, out, out_stride, q, q_stride, act, k_cache, v_cache, kvdt, view.n_seqs, n_tokens, max_q_len, max_kv_len,
        heads, kv_heads, d, dv, scale, stream, window);
}

}  // namespace llaisys::ops::nvidia
