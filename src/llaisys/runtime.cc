// C ABI: device runtime (include/llaisys/runtime.h).
#include "guard.hpp"

#include "../core/allocator.hpp"
#include "../core/threads.hpp"
#include "../device/runtime_api.hpp"
#include "../ops/linear/cpu/quant_plan.hpp"
#include "../utils/cpu_isa.hpp"
#include "../utils/types.hpp"
#include "llaisys/runtime.h"

#include <memory>
#include <utility>

using namespace llaisys;
using capi::enum_arg;
using capi::guard;

namespace {

// What a stream or event handle holds: a backend stream or event of one device. It is released
// by its Destroy, or, when another thread's call still used it then, as that call returns.
template <bool kEvent>
struct Native {
    llaisysDeviceType_t device;
    int id;
    void *native;  // backend stream or event; NULL once released

    Native(llaisysDeviceType_t d, int i, void *n) : device(d), id(i), native(n) {}
    Native(const Native &) = delete;
    Native &operator=(const Native &) = delete;
    void release() {
        void *n = std::exchange(native, nullptr);
        if (kEvent) device::runtime(device).event_destroy(id, n);
        else device::runtime(device).stream_destroy(id, n);
    }
    ~Native() {
        try {
            if (native) release();
        } catch (...) {
            // a destructor must not throw; Destroy reports the error when it releases
        }
    }
};
using Stream = Native<false>;
using Event = Native<true>;

}  // namespace

LLAISYS_HANDLE_TYPE(llaisysStream_t, Stream, llaisys::capi::HandleKind::Stream);
LLAISYS_HANDLE_TYPE(llaisysEvent_t, Event, llaisys::capi::HandleKind::Event);

namespace {

void check_memcpy_kind(llaisysMemcpyKind_t kind) {
    LLAISYS_CHECK_ARG(kind >= LLAISYS_MEMCPY_H2H && kind <= LLAISYS_MEMCPY_D2D, "unknown memcpy kind ", int(kind));
}

void check_copy_args(void *dst, const void *src, size_t size) {
    LLAISYS_CHECK_ARG(size == 0 || (dst != nullptr && src != nullptr), "memcpy of ", size,
                      " bytes with a NULL pointer");
}

// The stream of a handle for work on (device, id): nullptr (the default stream) for NULL.
std::shared_ptr<Stream> stream_on(llaisysDeviceType_t device, int id, llaisysStream_t h) {
    if (!h) return nullptr;
    auto s = capi::live(h, "stream");
    LLAISYS_CHECK(s->device == device && s->id == id, LLAISYS_STATUS_DEVICE_MISMATCH, "stream belongs to another device");
    return s;
}

void *native_of(const std::shared_ptr<Stream> &s) { return s ? s->native : nullptr; }

}  // namespace

extern "C" {

const char *llaisysCpuIsa(void) { return isa_name(active_isa()); }

int llaisysCpuUsesAmx(void) { return cpu_uses_amx() ? 1 : 0; }

int llaisysCpuQuantVnni(void) { return cpu_has_avx512_vnni() || cpu_has_avx_vnni() ? 1 : 0; }

int llaisysCpuSplits256(void) { return cpu_splits_256() ? 1 : 0; }

int llaisysCpuQuantRepacked(int dtype) {
    const auto dt = static_cast<llaisysDataType_t>(dtype);
    return is_quant_dtype(dt) && ops::cpu::quant_plan(dt).x16 ? 1 : 0;
}

llaisysStatus_t llaisysCpuQuantPlan(int dtype, const char **text) {
    return guard([&] {
        const auto dt = static_cast<llaisysDataType_t>(dtype);
        LLAISYS_CHECK_ARG(is_quant_dtype(dt), "dtype ", dtype, " is not block-quantized (", kQuantDtypeNames, " are)");
        const ops::cpu::QuantPlan &plan = ops::cpu::quant_plan(dt);  // a function-local static: lives to the end
        if (text) *text = plan.text.c_str();
    });
}

llaisysStatus_t llaisysSetBatchInvariant(int on) {
    return guard([&] {
        LLAISYS_CHECK_ARG(on == 0 || on == 1, "on must be 0 or 1, got ", on);
        ops::cpu::set_batch_invariant(on == 1);
    });
}

llaisysStatus_t llaisysGetBatchInvariant(int *out) {
    return guard([&] {
        LLAISYS_CHECK_ARG(out != nullptr, "out must not be NULL");
        *out = ops::cpu::batch_invariant() ? 1 : 0;
    });
}

llaisysStatus_t llaisysCpuQuantPrefetch(size_t *bytes, const char **reason) {
    return guard([&] {
        const Tunable &t = quant_prefetch();  // a function-local static: the string lives to the end
        if (bytes) *bytes = t.value;
        if (reason) *reason = t.reason.c_str();
    });
}

int llaisysCpuAmxBuilt(void) {
#ifdef LLAISYS_NO_AMX
    return 0;
#else
    return 1;
#endif
}

static_assert(LLAISYS_MAX_THREADS == core::kMaxThreads);

llaisysStatus_t llaisysSetNumThreads(int threads) {
    return guard([&] { core::set_threads(threads); });
}

llaisysStatus_t llaisysGetNumThreads(int *out) {
    return guard([&] {
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = core::threads();
    });
}

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
        const auto s = stream_on(device, device_id, stream);
        device::runtime(device).memcpy_async(device_id, dst, src, size, kind, native_of(s));
    });
}

llaisysStatus_t llaisysStreamCreate(llaisysDeviceType_t device, int device_id, llaisysStream_t *out) {
    return capi::create_into(out, [&] {
        device = enum_arg(device);
        device::check_device(device, device_id);
        auto h = std::make_shared<Stream>(device, device_id, nullptr);
        h->native = device::runtime(device).stream_create(device_id);  // released by ~Stream if registering fails
        return capi::make_handle<llaisysStream_t>(std::move(h));
    });
}

llaisysStatus_t llaisysStreamDestroy(llaisysStream_t stream) {
    return guard([&] {
        if (!stream) return;
        auto s = capi::take(stream, "stream");
        if (s.use_count() == 1) s->release();  // else the call still using it releases it
    });
}

llaisysStatus_t llaisysStreamSynchronize(llaisysStream_t stream) {
    return guard([&] {
        const auto s = capi::live(stream, "stream");
        device::runtime(s->device).stream_synchronize(s->id, s->native);
    });
}

llaisysStatus_t llaisysEventCreate(llaisysDeviceType_t device, int device_id, llaisysEvent_t *out) {
    return capi::create_into(out, [&] {
        device = enum_arg(device);
        device::check_device(device, device_id);
        auto h = std::make_shared<Event>(device, device_id, nullptr);
        h->native = device::runtime(device).event_create(device_id);  // released by ~Event if registering fails
        return capi::make_handle<llaisysEvent_t>(std::move(h));
    });
}

llaisysStatus_t llaisysEventDestroy(llaisysEvent_t event) {
    return guard([&] {
        if (!event) return;
        auto e = capi::take(event, "event");
        if (e.use_count() == 1) e->release();  // else the call still using it releases it
    });
}

llaisysStatus_t llaisysEventRecord(llaisysEvent_t event, llaisysStream_t stream) {
    return guard([&] {
        const auto e = capi::live(event, "event");
        const auto s = stream_on(e->device, e->id, stream);
        device::runtime(e->device).event_record(e->id, e->native, native_of(s));
    });
}

llaisysStatus_t llaisysEventQuery(llaisysEvent_t event) {
    bool done = false;
    llaisysStatus_t s = guard([&] {
        const auto e = capi::live(event, "event");
        done = device::runtime(e->device).event_query(e->id, e->native);
    });
    if (s != LLAISYS_STATUS_OK) return s;
    return done ? LLAISYS_STATUS_OK : capi::report(LLAISYS_STATUS_NOT_READY, "event has not completed yet");
}

llaisysStatus_t llaisysEventSynchronize(llaisysEvent_t event) {
    return guard([&] {
        const auto e = capi::live(event, "event");
        device::runtime(e->device).event_synchronize(e->id, e->native);
    });
}

llaisysStatus_t llaisysEventElapsedTime(llaisysEvent_t start, llaisysEvent_t end, float *ms) {
    return guard([&] {
        const auto a = capi::live(start, "start"), b = capi::live(end, "end");
        LLAISYS_CHECK_ARG(ms != nullptr, "ms is NULL");
        LLAISYS_CHECK(a->device == b->device && a->id == b->id, LLAISYS_STATUS_DEVICE_MISMATCH,
                      "events belong to different devices");
        *ms = device::runtime(a->device).event_elapsed_ms(a->id, a->native, b->native);
    });
}

}  // extern "C"
