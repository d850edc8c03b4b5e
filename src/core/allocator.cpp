#include "allocator.hpp"

#include "../device/runtime_api.hpp"
#include "../utils/error.hpp"

#include <map>
#include <mutex>
#include <new>
#include <tuple>
#include <unordered_map>

namespace llaisys::core {
namespace {

struct Block {
    llaisysDeviceType_t device;
    int id;
    llaisysMemoryKind_t kind;
    size_t size;
};

struct Registry {
    std::mutex mu;
    std::unordered_map<void *, Block> live;                      // ptr -> block
    std::map<std::pair<int, int>, size_t> allocated_by_device;  // (device, id) -> bytes
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

}  // namespace

void *allocate(llaisysDeviceType_t device, int id, llaisysMemoryKind_t kind, size_t size) {
    check_kind(kind);
    device::check_device(device, id);
    if (size == 0) return nullptr;
    void *p = nullptr;
    try {
        p = device::runtime(device).malloc(id, kind, size);
    } catch (const std::bad_alloc &) {
        p = nullptr;
    }
    LLAISYS_CHECK(p != nullptr, LLAISYS_STATUS_OUT_OF_MEMORY, "out of memory allocating ", size, " bytes");
    auto &r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live[p] = Block{device, id, kind, size};
    r.allocated_by_device[{int(device), id}] += size;
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
        r.allocated_by_device[{int(device), id}] -= b.size;
    }
    device::runtime(device).free(id, kind, ptr);
}

MemoryStats memory_stats(llaisysDeviceType_t device, int id) {
    device::check_device(device, id);
    auto &r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.allocated_by_device.find({int(device), id});
    size_t n = it == r.allocated_by_device.end() ? 0 : it->second;
    return MemoryStats{n, n};
}

}  // namespace llaisys::core
