// A device or pinned buffer of the NVIDIA backend (backend_nvidia.cpp, int8_fold.cpp).
#pragma once

#include "../../../core/allocator.hpp"
#include "llaisys.h"

#include <cstddef>

namespace llaisys::models::nvidia {

// A buffer from the library allocator (caching on the GPU), grown and never shrunk.
class Buffer {
public:
    Buffer(llaisysMemoryKind_t kind, int device_id) : kind_(kind), device_id_(device_id) {}
    ~Buffer() { release(); }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;

    std::byte *data() const { return data_; }
    size_t size() const { return size_; }
    void reserve(size_t bytes) {
        if (bytes <= size_) return;
        release();
        data_ = static_cast<std::byte *>(core::allocate(LLAISYS_DEVICE_NVIDIA, device_id_, kind_, bytes));
        size_ = bytes;
    }

private:
    void release() {
        if (data_) core::release(LLAISYS_DEVICE_NVIDIA, device_id_, kind_, data_);
        data_ = nullptr;
        size_ = 0;
    }
    llaisysMemoryKind_t kind_;
    int device_id_;
    std::byte *data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace llaisys::models::nvidia
