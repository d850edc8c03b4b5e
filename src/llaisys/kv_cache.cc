// C ABI: KV cache (include/llaisys/kv_cache.h).
#include "guard.hpp"

#include "../kv_cache/kv_cache.hpp"
#include "kv_handles.hpp"

using namespace llaisys;
using capi::guard;
using capi::guard_value;

namespace {

std::shared_ptr<kv::KVCache> cache_of(llaisysKVCache_t h) { return capi::live(h, "cache"); }

void check_seq(int32_t seq, const char *what) {
    LLAISYS_CHECK(seq >= 0 && seq < LLAISYS_KV_MAX_SEQS, LLAISYS_STATUS_OUT_OF_RANGE, what, " ", seq,
                  " is outside [0, ", LLAISYS_KV_MAX_SEQS, ")");
}

}  // namespace

extern "C" {

size_t llaisysKVCacheSlotsForBytes(const llaisysKVCacheParams_t *params, size_t bytes) {
    return guard_value<size_t>(0, [&] {
        LLAISYS_CHECK_ARG(params != nullptr, "params is NULL");
        const llaisysKVCacheParams_t p = capi::checked(*params);
        size_t per = kv::KVCache::bytes_per_slot(p);
        LLAISYS_CHECK_ARG(per > 0, "params describe an empty slot (n_layers, n_kv_heads, head_dim or dtype is 0)");
        size_t n = bytes / per;
        if (p.layout == LLAISYS_KV_LAYOUT_BLOCK && p.block_size > 0) n -= n % p.block_size;
        return n;
    });
}

llaisysStatus_t llaisysKVCacheCreate2(const llaisysKVCacheParams_t *params, llaisysKVCache_t *out) {
    return capi::create_into(out, [&] {
        LLAISYS_CHECK_ARG(params != nullptr, "params is NULL");
        return capi::make_handle<llaisysKVCache_t>(std::make_shared<kv::KVCache>(capi::checked(*params)));
    });
}

// Deprecated: llaisysKVCacheCreate2 with the handle as the return value.
llaisysKVCache_t llaisysKVCacheCreate(const llaisysKVCacheParams_t *params) {
    llaisysKVCache_t cache = nullptr;
    llaisysKVCacheCreate2(params, &cache);
    return cache;
}

llaisysStatus_t llaisysKVCacheDestroy(llaisysKVCache_t cache) { return capi::destroy(cache, "cache"); }

llaisysStatus_t llaisysKVCacheGetStats(llaisysKVCache_t cache, llaisysKVCacheStats_t *out) {
    return guard([&] {
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = cache_of(cache)->stats();
    });
}

llaisysStatus_t llaisysKVCacheSeqRm(llaisysKVCache_t cache, int32_t seq, int64_t p0, int64_t p1) {
    return guard([&] {
        if (seq != -1) check_seq(seq, "seq");
        cache_of(cache)->cells().seq_rm(seq, p0, p1);
    });
}

llaisysStatus_t llaisysKVCacheSeqCp(llaisysKVCache_t cache, int32_t src, int32_t dst, int64_t p0, int64_t p1) {
    return guard([&] {
        check_seq(src, "src");
        check_seq(dst, "dst");
        cache_of(cache)->cells().seq_cp(src, dst, p0, p1);
    });
}

llaisysStatus_t llaisysKVCacheSeqKeep(llaisysKVCache_t cache, int32_t seq) {
    return guard([&] {
        check_seq(seq, "seq");
        cache_of(cache)->cells().seq_keep(seq);
    });
}

llaisysStatus_t llaisysKVCacheSeqAdd(llaisysKVCache_t cache, int32_t seq, int64_t p0, int64_t p1, int64_t delta) {
    return guard([&] {
        check_seq(seq, "seq");
        cache_of(cache)->seq_add(seq, p0, p1, delta);
    });
}

llaisysStatus_t llaisysKVCacheSeqPosMax(llaisysKVCache_t cache, int32_t seq, int64_t *out) {
    return guard([&] {
        check_seq(seq, "seq");
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = cache_of(cache)->cells().seq_pos_max(seq);
    });
}

llaisysStatus_t llaisysKVCacheBlockBytes(llaisysKVCache_t cache, size_t *out) {
    return guard([&] {
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = cache_of(cache)->block_bytes();
    });
}

llaisysStatus_t llaisysKVCacheBlockRead(llaisysKVCache_t cache, size_t block, void *dst, size_t capacity) {
    return guard([&] { cache_of(cache)->read_block(block, dst, capacity); });
}

llaisysStatus_t llaisysKVCacheBlockWrite(llaisysKVCache_t cache, size_t block, const void *src, size_t size) {
    return guard([&] { cache_of(cache)->write_block(block, src, size); });
}

llaisysStatus_t llaisysKVCacheCopyShift(llaisysKVCache_t cache, size_t n, const int32_t *src_slots,
                                        const int32_t *dst_slots, const int64_t *deltas) {
    return guard([&] { cache_of(cache)->copy_shift(n, src_slots, dst_slots, deltas); });
}

llaisysStatus_t llaisysKVCacheClear(llaisysKVCache_t cache) {
    return guard([&] { cache_of(cache)->clear(); });
}

}  // extern "C"
