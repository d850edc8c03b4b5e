#include "allocator.hpp"

#include "../device/runtime_api.hpp"
#include "../utils/checked.hpp"
#include "../utils/error.hpp"

#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace llaisys::core {
namespace {

constexpr size_t kSmallLimit = size_t(1) << 20;  // up to 1 MiB: 512-byte granularity
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;  // above: 2 MiB granularity

struct Block {
    llaisysDeviceType_t device;
    int id;
    llaisysMemoryKind_t kind;
    size_t size;  // bytes asked for (what `allocated` counts)
    size_t held;  // bytes held from the backend (what `reserved` counts); == size unless cached
};

using DeviceKey = std::pair<int, int>;                   // (device, id)
using PoolKey = std::tuple<int, int, int>;               // (device, id, kind)
using FreeList = std::multimap<size_t, void *>;          // held size -> cached pointer

struct Counters {
    size_t allocated = 0;
    size_t reserved = 0;
};

struct Registry {
    std::mutex mu;
    std::unordered_map<void *, Block> live;   // ptr -> block handed out
    std::map<DeviceKey, Counters> counters;   // (device, id) -> bytes
    std::map<PoolKey, FreeList> cache;        // freed blocks kept for reuse (cached kinds only)
};

Registry &registry() {
    static Registry r;
    return r;
}

void check_kind(llaisysMemoryKind_t kind) {
    LLAISYS_CHECK_ARG(kind == LLAISYS_MEMORY_HOST || kind == LLAISYS_MEMORY_PINNED_HOST ||
                          kind == LLAISYS_MEMORY_DEVICE,
                      "unknown memory kind ", int(kind));
}

// Only CUDA memory is cached: cudaMalloc/cudaFree synchronize the device and cudaHostAlloc
// maps pages, both slow enough to matter every step. CPU memory goes straight to the system.
bool cached(llaisysDeviceType_t device, llaisysMemoryKind_t kind) {
    return device == LLAISYS_DEVICE_NVIDIA && (kind == LLAISYS_MEMORY_DEVICE || kind == LLAISYS_MEMORY_PINNED_HOST);
}

size_t round_up(size_t size) {
    return checked_round_up(size, size <= kSmallLimit ? kSmallRound : kLargeRound, "allocation size",
                            LLAISYS_STATUS_OUT_OF_MEMORY);
}

// Best fit from the free list: the smallest cached block of at least `held` bytes, and no
// more than twice that (a huge block is not spent on a small request). Caller holds r.mu.
void *take_cached(Registry &r, const PoolKey &key, size_t held, size_t *got) {
    auto pool = r.cache.find(key);
    if (pool == r.cache.end()) return nullptr;
    auto it = pool->second.lower_bound(held);
    if (it == pool->second.end() || it->first / 2 > held) return nullptr;
    *got = it->first;
    void *p = it->second;
    pool->second.erase(it);
    return p;
}

// Removes every cached block of (device, id) from the registry, lowering `reserved`, and
// returns them for the caller to free outside the lock. Caller holds r.mu.
std::vector<std::pair<PoolKey, void *>> drain_cache(Registry &r, llaisysDeviceType_t device, int id) {
    std::vector<std::pair<PoolKey, void *>> out;
    Counters &c = r.counters[{int(device), id}];
    for (auto &[key, list] : r.cache) {
        if (std::get<0>(key) != int(device) || std::get<1>(key) != id) continue;
        for (auto &[held, p] : list) {
            c.reserved -= held;
            out.emplace_back(key, p);
        }
        list.clear();
    }
    return out;
}

// Frees every block even when one free fails; then rethrows the first failure.
void free_drained(const std::vector<std::pair<PoolKey, void *>> &blocks) {
    std::exception_ptr first;
    for (const auto &[key, p] : blocks) {
        try {
            auto device = llaisysDeviceType_t(std::get<0>(key));
            device::runtime(device).free(std::get<1>(key), llaisysMemoryKind_t(std::get<2>(key)), p);
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

// The backend allocation; nullptr when it is out of memory.
void *backend_malloc(llaisysDeviceType_t device, int id, llaisysMemoryKind_t kind, size_t size) {
    try {
        return device::runtime(device).malloc(id, kind, size);
    } catch (const std::bad_alloc &) {
        return nullptr;
    } catch (const Error &e) {
        if (e.status() == LLAISYS_STATUS_OUT_OF_MEMORY) return nullptr;
        throw;
    }
}

}  // namespace

void *allocate(llaisysDeviceType_t device, int id, llaisysMemoryKind_t kind, size_t size) {
    check_kind(kind);
    device::check_device(device, id);
    if (size == 0) return nullptr;
    auto &r = registry();
    const bool caching = cached(device, kind);
    const size_t held = caching ? round_up(size) : size;
    const PoolKey key{int(device), id, int(kind)};
    if (caching) {
        std::lock_guard<std::mutex> lock(r.mu);
        size_t got = 0;
        if (void *p = take_cached(r, key, held, &got)) {
            r.live[p] = Block{device, id, kind, size, got};
            r.counters[{int(device), id}].allocated += size;
            return p;  // `reserved` already counts it
        }
    }
    void *p = backend_malloc(device, id, kind, held);
    if (!p && caching) {
        // Out of memory: give every cached block of this device back and try once more.
        empty_cache(device, id);
        p = backend_malloc(device, id, kind, held);
    }
    LLAISYS_CHECK(p != nullptr, LLAISYS_STATUS_OUT_OF_MEMORY, "out of memory allocating ", size, " bytes");
    std::lock_guard<std::mutex> lock(r.mu);
    r.live[p] = Block{device, id, kind, size, held};
    Counters &c = r.counters[{int(device), id}];
    c.allocated += size;
    c.reserved += held;
    return p;
}

void release(llaisysDeviceType_t device, int id, llaisysMemoryKind_t kind, void *ptr) {
    if (!ptr) return;
    auto &r = registry();
    Block b;
    {
        std::lock_guard<std::mutex> lock(r.mu);
        auto it = r.live.find(ptr);
        LLAISYS_CHECK_ARG(it != r.live.end(), "pointer ", ptr, " is not a live llaisys allocation");
        b = it->second;
        LLAISYS_CHECK_ARG(b.device == device && b.id == id && b.kind == kind,
                          "pointer ", ptr, " was allocated with another device or memory kind");
        r.live.erase(it);
        Counters &c = r.counters[{int(device), id}];
        c.allocated -= b.size;
        if (cached(device, kind)) {
            // Kept for reuse. Work queued earlier on any stream may still use the block; the
            // library only releases memory after synchronizing the work that used it.
            r.cache[{int(device), id, int(kind)}].emplace(b.held, ptr);
            return;
        }
        c.reserved -= b.held;
    }
    device::runtime(device).free(id, kind, ptr);
}

void empty_cache(llaisysDeviceType_t device, int id) {
    device::check_device(device, id);
    auto &r = registry();
    std::vector<std::pair<PoolKey, void *>> blocks;
    {
        std::lock_guard<std::mutex> lock(r.mu);
        blocks = drain_cache(r, device, id);
    }
    free_drained(blocks);
}

MemoryStats memory_stats(llaisysDeviceType_t device, int id) {
    device::check_device(device, id);
    auto &r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.counters.find({int(device), id});
    if (it == r.counters.end()) return MemoryStats{0, 0};
    return MemoryStats{it->second.allocated, it->second.reserved};
}

}  // namespace llaisys::core
