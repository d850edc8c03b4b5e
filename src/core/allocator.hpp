// Every allocation of the library goes through here, so allocated/reserved byte counters are
// exact and a free of a pointer that we never handed out is caught instead of corrupting
// the heap.
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
    size_t reserved;   // bytes held from the system (equal to allocated: no caching yet)
};
MemoryStats memory_stats(llaisysDeviceType_t device, int id);

}  // namespace llaisys::core
