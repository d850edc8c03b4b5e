// C ABI: device runtime (include/llaisys/runtime.h).
#include "guard.hpp"

#include "../core/allocator.hpp"
#include "../device/runtime_api.hpp"
#include "../utils/cpu_isa.hpp"
#include "llaisys/runtime.h"

using namespace llaisys;
using capi::enum_arg;
using capi::guard;

struct LlaisysStream {
    llaisysDeviceType_t device;
    int id;
    void *native;  // backend stream
};

struct LlaisysEvent {
    llaisysDeviceType_t device;
    int id;
    void *native;  // backend event
};

namespace {

void check_memcpy_kind(llaisysMemcpyKind_t kind) {
    LLAISYS_CHECK_ARG(kind >= LLAISYS_MEMCPY_H2H && kind <= LLAISYS_MEMCPY_D2D, "unknown memcpy kind ", int(kind));
}

void check_copy_args(void *dst, const void *src, size_t size) {
    LLAISYS_CHECK_ARG(size == 0 || (dst != nullptr && src != nullptr), "memcpy of ", size,
                      " bytes with a NULL pointer");
}

void *native_stream(llaisysDeviceType_t device, int id, llaisysStream_t stream) {
    if (!stream) return nullptr;
    LLAISYS_CHECK(stream->device == device && stream->id == id, LLAISYS_STATUS_DEVICE_MISMATCH,
                  "stream belongs to another device");
    return stream->native;
}

}  // namespace

extern "C" {

const char *llaisysCpuIsa(void) { return isa_name(active_isa()); }

llaisysStatus_t llaisysGetDeviceCount(llaisysDeviceType_t device, int *count) {
    return guard([&] {
        device = enum_arg(device);
        LLAISYS_CHECK_ARG(count != nullptr, "count is NULL");
        if (device == LLAISYS_DEVICE_NVIDIA) {
#ifndef LLAISYS_ENABLE_NVIDIA
            *count = 0;
            return;
#endif
        }
        *count = device::runtime(device).device_count();
    });
}

llaisysStatus_t llaisysSetDevice(llaisysDeviceType_t device, int device_id) {
    return guard([&] {
        device = enum_arg(device);
        device::check_device(device, device_id);
        device::runtime(device).set_device(device_id);
    });
}

llaisysStatus_t llaisysDeviceSynchronize(llaisysDeviceType_t device, int device_id) {
    return guard([&] {
        device = enum_arg(device);
        device::check_device(device, device_id);
        device::runtime(device).synchronize(device_id);
    });
}

llaisysStatus_t llaisysMalloc(llaisysDeviceType_t device, int device_id, llaisysMemoryKind_t kind, size_t size,
                              void **out) {
    return guard([&] {
        device = enum_arg(device);
        kind = enum_arg(kind);
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = nullptr;
        *out = core::allocate(device, device_id, kind, size);
    });
}

llaisysStatus_t llaisysFree(llaisysDeviceType_t device, int device_id, llaisysMemoryKind_t kind, void *ptr) {
    return guard([&] {
        device = enum_arg(device);
        kind = enum_arg(kind);
        core::release(device, device_id, kind, ptr);
    });
}

llaisysStatus_t llaisysMemoryStats(llaisysDeviceType_t device, int device_id, size_t *allocated, size_t *reserved) {
    return guard([&] {
        device = enum_arg(device);
        auto s = core::memory_stats(device, device_id);
        if (allocated) *allocated = s.allocated;
        if (reserved) *reserved = s.reserved;
    });
}

llaisysStatus_t llaisysGetMemoryInfo(llaisysDeviceType_t device, int device_id, size_t *free, size_t *total) {
    return guard([&] {
        device = enum_arg(device);
        device::check_device(device, device_id);
        size_t f = 0, t = 0;
        device::runtime(device).mem_info(device_id, &f, &t);
        if (free) *free = f;
        if (total) *total = t;
    });
}

llaisysStatus_t llaisysEmptyCache(llaisysDeviceType_t device, int device_id) {
    return guard([&] {
        device = enum_arg(device);
        core::empty_cache(device, device_id);
    });
}

llaisysStatus_t llaisysMemcpy(llaisysDeviceType_t device, int device_id, void *dst, const void *src, size_t size,
                              llaisysMemcpyKind_t kind) {
    return guard([&] {
        device = enum_arg(device);
        kind = enum_arg(kind);
        device::check_device(device, device_id);
        check_memcpy_kind(kind);
        check_copy_args(dst, src, size);
        device::runtime(device).memcpy(device_id, dst, src, size, kind);
    });
}

llaisysStatus_t llaisysMemcpyAsync(llaisysDeviceType_t device, int device_id, void *dst, const void *src,
                                   size_t size, llaisysMemcpyKind_t kind, llaisysStream_t stream) {
    return guard([&] {
        device = enum_arg(device);
        kind = enum_arg(kind);
        device::check_device(device, device_id);
        check_memcpy_kind(kind);
        check_copy_args(dst, src, size);
        device::runtime(device).memcpy_async(device_id, dst, src, size, kind,
                                             native_stream(device, device_id, stream));
    });
}

llaisysStatus_t llaisysStreamCreate(llaisysDeviceType_t device, int device_id, llaisysStream_t *out) {
    return guard([&] {
        device = enum_arg(device);
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = nullptr;
        device::check_device(device, device_id);
        void *native = device::runtime(device).stream_create(device_id);
        *out = new LlaisysStream{device, device_id, native};
    });
}

llaisysStatus_t llaisysStreamDestroy(llaisysStream_t stream) {
    return guard([&] {
        if (!stream) return;
        device::runtime(stream->device).stream_destroy(stream->id, stream->native);
        delete stream;
    });
}

llaisysStatus_t llaisysStreamSynchronize(llaisysStream_t stream) {
    return guard([&] {
        LLAISYS_CHECK_ARG(stream != nullptr, "stream is NULL");
        device::runtime(stream->device).stream_synchronize(stream->id, stream->native);
    });
}

llaisysStatus_t llaisysEventCreate(llaisysDeviceType_t device, int device_id, llaisysEvent_t *out) {
    return guard([&] {
        device = enum_arg(device);
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = nullptr;
        device::check_device(device, device_id);
        void *native = device::runtime(device).event_create(device_id);
        *out = new LlaisysEvent{device, device_id, native};
    });
}

llaisysStatus_t llaisysEventDestroy(llaisysEvent_t event) {
    return guard([&] {
        if (!event) return;
        device::runtime(event->device).event_destroy(event->id, event->native);
        delete event;
    });
}

llaisysStatus_t llaisysEventRecord(llaisysEvent_t event, llaisysStream_t stream) {
    return guard([&] {
        LLAISYS_CHECK_ARG(event != nullptr, "event is NULL");
        device::runtime(event->device)
            .event_record(event->id, event->native, native_stream(event->device, event->id, stream));
    });
}

llaisysStatus_t llaisysEventQuery(llaisysEvent_t event) {
    bool done = false;
    llaisysStatus_t s = guard([&] {
        LLAISYS_CHECK_ARG(event != nullptr, "event is NULL");
        done = device::runtime(event->device).event_query(event->id, event->native);
    });
    if (s != LLAISYS_STATUS_OK) return s;
    return done ? LLAISYS_STATUS_OK : capi::report(LLAISYS_STATUS_NOT_READY, "event has not completed yet");
}

llaisysStatus_t llaisysEventSynchronize(llaisysEvent_t event) {
    return guard([&] {
        LLAISYS_CHECK_ARG(event != nullptr, "event is NULL");
        device::runtime(event->device).event_synchronize(event->id, event->native);
    });
}

llaisysStatus_t llaisysEventElapsedTime(llaisysEvent_t start, llaisysEvent_t end, float *ms) {
    return guard([&] {
        LLAISYS_CHECK_ARG(start != nullptr && end != nullptr && ms != nullptr, "start, end and ms must not be NULL");
        LLAISYS_CHECK(start->device == end->device && start->id == end->id, LLAISYS_STATUS_DEVICE_MISMATCH,
                      "events belong to different devices");
        *ms = device::runtime(start->device).event_elapsed_ms(start->id, start->native, end->native);
    });
}

}  // extern "C"
