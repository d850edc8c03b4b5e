// NVIDIA backend of the device runtime, over the CUDA runtime API. Compiled only with
// -DLLAISYS_NVIDIA=ON; plain C++ (no kernels), so g++ builds it against cuda_runtime_api.h.
//
// Contract (the Runtime interface in ../runtime_api.hpp, as include/llaisys/runtime.h states it):
// - device_count: cudaGetDeviceCount; a machine without a usable driver or without a device
//   (cudaErrorInsufficientDriver, cudaErrorNoDevice) has 0 devices, which is not an error.
// - Every call that takes a device id runs with that device current (DeviceGuard) and leaves
//   the calling thread's current device as it found it; set_device is the one call that
//   changes it on purpose.
// - Memory: DEVICE is cudaMalloc, PINNED_HOST is cudaHostAlloc(portable: page-locked for
//   every device), HOST is 64-byte aligned malloc. The byte counters live in core/allocator.
// - memcpy blocks until the copy is complete, device side included (cudaMemcpy may return
//   before an H2D or D2D copy lands, so the default stream is synchronized after those);
//   memcpy_async queues on the given cudaStream_t, or the default stream when it is null.
// - Streams are cudaStreamCreateWithFlags(cudaStreamNonBlocking): they do not serialize with
//   the legacy default stream. Destroying one waits for its queued work first.
// - Events time with cudaEvent (timing enabled). As on the CPU, querying, synchronizing on or
//   timing an event that was never recorded is INVALID_ARGUMENT, and timing an event whose
//   work has not completed is INVALID_ARGUMENT too (synchronize the end event first).
// - Errors: every CUDA call goes through LLAISYS_CUDA_CHECK, which throws
//   llaisys::Error(DEVICE_ERROR, "<call> failed: <reason> at file:line"), OUT_OF_MEMORY
//   for cudaErrorMemoryAllocation, or DEVICE_LOST for a sticky error (cuda_errors.cpp).
//   Releases that happen while the CUDA runtime is already shutting down (process exit) are
//   ignored: the driver reclaims everything then.
#include "../runtime_api.hpp"

#include "../../utils/checked.hpp"
#include "cuda_check.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace llaisys::device::nvidia {

void cuda_fail(cudaError_t err, const char *call, const char *file, int line) {
    (void)cudaGetLastError();  // reset a non-sticky error so the next call starts clean
    const char *rel = std::strstr(file, "/src/");
    const llaisysStatus_t status = cuda_status(err);
    fail(status, call, " failed: ", cudaGetErrorString(err), " (", cudaGetErrorName(err), ") at ",
         rel ? rel + 1 : file, ":", line,
         status == LLAISYS_STATUS_DEVICE_LOST ? "; the CUDA context is lost (a sticky error): every later call on "
                                                "the device fails until the process restarts"
                                              : "");
}

namespace {

constexpr size_t kHostAlignment = 64;  // same as the CPU backend

// A release during process teardown (the CUDA runtime already unloading) is not an error.
#define LLAISYS_CUDA_CHECK_RELEASE(call)                                                    \
    do {                                                                                    \
        cudaError_t llaisys_release_err_ = (call);                                          \
        if (llaisys_release_err_ == cudaErrorCudartUnloading) return;                       \
        LLAISYS_CUDA_CHECK(llaisys_release_err_);                                           \
    } while (0)

// A CUDA event plus whether it has been recorded (CUDA treats a never-recorded event as
// complete; the llaisys contract calls using one an error, as the CPU backend does).
struct Event {
    cudaEvent_t native = nullptr;
    bool recorded = false;
};

Event &event_of(void *event) {
    LLAISYS_CHECK_ARG(event != nullptr, "event is NULL");
    return *static_cast<Event *>(event);
}

cudaStream_t stream_of(void *stream) { return static_cast<cudaStream_t>(stream); }

cudaMemcpyKind cuda_kind(llaisysMemcpyKind_t kind) {
    switch (kind) {
    case LLAISYS_MEMCPY_H2H: return cudaMemcpyHostToHost;
    case LLAISYS_MEMCPY_H2D: return cudaMemcpyHostToDevice;
    case LLAISYS_MEMCPY_D2H: return cudaMemcpyDeviceToHost;
    case LLAISYS_MEMCPY_D2D: return cudaMemcpyDeviceToDevice;
    }
    fail(LLAISYS_STATUS_INVALID_ARGUMENT, "unknown memcpy kind ", int(kind));
}

class NvidiaRuntime final : public Runtime {
public:
    int device_count() override {
        int n = 0;
        cudaError_t err = cudaGetDeviceCount(&n);
        if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
            (void)cudaGetLastError();
            return 0;
        }
        LLAISYS_CUDA_CHECK(err);
        return n;
    }

    void set_device(int id) override { LLAISYS_CUDA_CHECK(cudaSetDevice(id)); }

    void synchronize(int id) override {
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK(cudaDeviceSynchronize());
    }

    void mem_info(int id, size_t *free, size_t *total) override {
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK(cudaMemGetInfo(free, total));
    }

    void *malloc(int id, llaisysMemoryKind_t kind, size_t size) override {
        void *p = nullptr;
        switch (kind) {
        case LLAISYS_MEMORY_DEVICE: {
            DeviceGuard guard(id);
            LLAISYS_CUDA_CHECK(cudaMalloc(&p, size));
            return p;
        }
        case LLAISYS_MEMORY_PINNED_HOST: {
            DeviceGuard guard(id);
            LLAISYS_CUDA_CHECK(cudaHostAlloc(&p, size, cudaHostAllocPortable));
            return p;
        }
        case LLAISYS_MEMORY_HOST: {
            size_t rounded = checked_round_up(size, kHostAlignment, "allocation size", LLAISYS_STATUS_OUT_OF_MEMORY);
            p = std::aligned_alloc(kHostAlignment, rounded);
            if (!p) throw std::bad_alloc();
            return p;
        }
        }
        fail(LLAISYS_STATUS_INVALID_ARGUMENT, "unknown memory kind ", int(kind));
    }

    void free(int id, llaisysMemoryKind_t kind, void *ptr) override {
        if (!ptr) return;
        switch (kind) {
        case LLAISYS_MEMORY_DEVICE: {
            DeviceGuard guard(id);
            LLAISYS_CUDA_CHECK_RELEASE(cudaFree(ptr));
            return;
        }
        case LLAISYS_MEMORY_PINNED_HOST: LLAISYS_CUDA_CHECK_RELEASE(cudaFreeHost(ptr)); return;
        case LLAISYS_MEMORY_HOST: std::free(ptr); return;
        }
        fail(LLAISYS_STATUS_INVALID_ARGUMENT, "unknown memory kind ", int(kind));
    }

    void memcpy(int id, void *dst, const void *src, size_t size, llaisysMemcpyKind_t kind) override {
        if (size == 0) return;
        cudaMemcpyKind ck = cuda_kind(kind);
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK(cudaMemcpy(dst, src, size, ck));
        // cudaMemcpy returns once a pageable H2D source is staged, and does not wait for D2D
        // at all; non-blocking streams would not be ordered after it, so wait here.
        if (kind == LLAISYS_MEMCPY_H2D || kind == LLAISYS_MEMCPY_D2D) {
            LLAISYS_CUDA_CHECK(cudaStreamSynchronize(nullptr));
        }
    }

    void memcpy_async(int id, void *dst, const void *src, size_t size, llaisysMemcpyKind_t kind,
                      void *stream) override {
        if (size == 0) return;
        cudaMemcpyKind ck = cuda_kind(kind);
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(dst, src, size, ck, stream_of(stream)));
    }

    void *stream_create(int id) override {
        DeviceGuard guard(id);
        cudaStream_t s = nullptr;
        LLAISYS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        return s;
    }

    void stream_destroy(int id, void *stream) override {
        if (!stream) return;
        DeviceGuard guard(id);
        cudaError_t synced = cudaStreamSynchronize(stream_of(stream));
        LLAISYS_CUDA_CHECK_RELEASE(cudaStreamDestroy(stream_of(stream)));  // destroy even if the sync failed
        if (synced != cudaErrorCudartUnloading) LLAISYS_CUDA_CHECK(synced);
    }

    void stream_synchronize(int id, void *stream) override {
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK(cudaStreamSynchronize(stream_of(stream)));
    }

    void *event_create(int id) override {
        DeviceGuard guard(id);
        auto *e = new Event();
        cudaError_t err = cudaEventCreate(&e->native);
        if (err != cudaSuccess) delete e;
        LLAISYS_CUDA_CHECK(err);
        return e;
    }

    void event_destroy(int id, void *event) override {
        if (!event) return;
        Event *e = static_cast<Event *>(event);
        cudaEvent_t native = e->native;
        delete e;
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK_RELEASE(cudaEventDestroy(native));
    }

    void event_record(int id, void *event, void *stream) override {
        Event &e = event_of(event);
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK(cudaEventRecord(e.native, stream_of(stream)));
        e.recorded = true;
    }

    bool event_query(int id, void *event) override {
        Event &e = event_of(event);
        LLAISYS_CHECK_ARG(e.recorded, "event was never recorded");
        DeviceGuard guard(id);
        cudaError_t err = cudaEventQuery(e.native);
        if (err == cudaErrorNotReady) return false;
        LLAISYS_CUDA_CHECK(err);
        return true;
    }

    void event_synchronize(int id, void *event) override {
        Event &e = event_of(event);
        LLAISYS_CHECK_ARG(e.recorded, "event was never recorded");
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK(cudaEventSynchronize(e.native));
    }

    float event_elapsed_ms(int id, void *start, void *end) override {
        Event &a = event_of(start);
        Event &b = event_of(end);
        LLAISYS_CHECK_ARG(a.recorded && b.recorded, "both events must be recorded before timing them");
        DeviceGuard guard(id);
        float ms = 0.0f;
        cudaError_t err = cudaEventElapsedTime(&ms, a.native, b.native);
        if (err == cudaErrorNotReady) {
            (void)cudaGetLastError();
            fail(LLAISYS_STATUS_INVALID_ARGUMENT,
                 "events have not completed yet: synchronize the end event before timing");
        }
        LLAISYS_CUDA_CHECK(err);
        return ms;
    }
};

}  // namespace

Runtime &runtime() {
    static NvidiaRuntime rt;
    return rt;
}

}  // namespace llaisys::device::nvidia
