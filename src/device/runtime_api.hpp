// The interface every device backend implements. Backends see raw pointers and sizes only.
#pragma once

#include "llaisys.h"
#include "llaisys/runtime.h"

#include <cstddef>

namespace llaisys::device {

class Runtime {
public:
    virtual ~Runtime() = default;

    virtual int device_count() = 0;
    virtual void set_device(int id) = 0;
    virtual void synchronize(int id) = 0;
    // Bytes of the device's memory that are free now and in total (the host's RAM for the
    // CPU: MemAvailable / MemTotal).
    virtual void mem_info(int id, size_t *free, size_t *total) = 0;

    // Raw memory; sizes are tracked by core/allocator, not here.
    virtual void *malloc(int id, llaisysMemoryKind_t kind, size_t size) = 0;
    virtual void free(int id, llaisysMemoryKind_t kind, void *ptr) = 0;

    virtual void memcpy(int id, void *dst, const void *src, size_t size, llaisysMemcpyKind_t kind) = 0;
    // stream: a native stream from stream_create, or nullptr for the default stream
    virtual void memcpy_async(int id, void *dst, const void *src, size_t size,
                              llaisysMemcpyKind_t kind, void *stream) = 0;

    virtual void *stream_create(int id) = 0;
    virtual void stream_destroy(int id, void *stream) = 0;
    virtual void stream_synchronize(int id, void *stream) = 0;

    virtual void *event_create(int id) = 0;
    virtual void event_destroy(int id, void *event) = 0;
    virtual void event_record(int id, void *event, void *stream) = 0;
    virtual bool event_query(int id, void *event) = 0;  // true when complete
    virtual void event_synchronize(int id, void *event) = 0;
    virtual float event_elapsed_ms(int id, void *start, void *end) = 0;
};

// The backend of a device type; throws UNSUPPORTED when it is not compiled in.
Runtime &runtime(llaisysDeviceType_t device);

// Throws INVALID_ARGUMENT unless (device, id) names an existing device.
void check_device(llaisysDeviceType_t device, int id);

namespace cpu {
Runtime &runtime();
}
namespace nvidia {
Runtime &runtime();  // defined only in builds with LLAISYS_NVIDIA
}

}  // namespace llaisys::device
