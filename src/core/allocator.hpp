// Every allocation of the library goes through here, so allocated/reserved byte counters are
// exact and a free of a pointer that we never handed out is caught instead of corrupting
// the heap.
//
// CUDA memory (NVIDIA device and pinned host memory) is cached: a released block goes to a
// free list of its (device, id, kind), sizes rounded up to 512 B (up to 1 MiB) or 2 MiB
// (above), and the next allocation takes the smallest cached block that fits (best fit, at
// most twice the rounded size). When cudaMalloc runs out of memory, every cached block of
// that device is freed and the allocation is tried once more. A cached block may be handed
// out again as soon as it is released: work queued on the same stream stays ordered, work
// on another stream that may still use it must be synchronized before the release (as with
// PyTorch's caching allocator). CPU memory is not cached: released at once.
#pragma once

#include "llaisys.h"
#include "llaisys/runtime.h"

#include <cstddef>

namespace llaisys::core {

// Allocate `size` bytes; size 0 returns nullptr. Throws OUT_OF_MEMORY on failure.
void *allocate(llaisysDeviceType_t device, int id, llaisysMemoryKind_t kind, size_t size);

// Release a pointer from allocate() with the same device, id and kind. Throws
// INVALID_ARGUMENT for a pointer that is not a live allocation of that kind.
void release(llaisysDeviceType_t device, int id, llaisysMemoryKind_t kind, void *ptr);

struct MemoryStats {
    size_t allocated;  // bytes handed out and not yet released
    size_t reserved;   // bytes held from the system: live blocks rounded up, plus the cache
};                     // (equal to allocated on the CPU, which does not cache)
MemoryStats memory_stats(llaisysDeviceType_t device, int id);

// Frees every cached block of (device, id) back to the system; reserved then counts live
// blocks only. A no-op where nothing is cached (the CPU).
void empty_cache(llaisysDeviceType_t device, int id);

}  // namespace llaisys::core
