#include "gemm_common.hpp"

#include "../../../core/allocator.hpp"
#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

#include <atomic>
#include <mutex>
#include <vector>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

constexpr unsigned kThreads = 256;

template <class TD, class TS>
__global__ void convert_kernel(TD *dst, const TS *src, size_t count) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        dst[i] = from_float<TD>(to_float(src[i]));
    }
}

// Bytes of every thread's scratch and cuBLAS workspace, per device id (scratch_bytes).
struct Totals {
    std::mutex mutex;
    std::vector<size_t> bytes;  // [device id]
};

Totals &totals() {
    static Totals *t = new Totals;  // never destroyed: thread states release into it at process exit
    return *t;
}

void count(int device_id, size_t add, size_t remove) {
    Totals &t = totals();
    std::lock_guard<std::mutex> lock(t.mutex);
    if (t.bytes.size() <= size_t(device_id)) t.bytes.resize(size_t(device_id) + 1, 0);
    t.bytes[size_t(device_id)] += add;
    t.bytes[size_t(device_id)] -= remove;
}

std::atomic<uint64_t> g_scratch_epoch{0};

void release_counted(int device_id, std::byte *&p, size_t &bytes) {
    if (p) {
        core::release(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, p);
        scratch_released();
    }
    count(device_id, 0, bytes);
    p = nullptr;
    bytes = 0;
}

// cuBLAS's workspace per handle: what NVIDIA recommends (and cuBLAS's own pool takes) on the
// device's architecture: 32 MiB from Hopper (sm_90) on, 4 MiB before.
size_t cublas_workspace_size(int device_id) {
    int major = 0;
    LLAISYS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id));
    return major >= 9 ? (size_t(32) << 20) : (size_t(4) << 20);
}

struct ThreadState {
    std::vector<DeviceState> devices;  // indexed by device id
    ~ThreadState() {
        for (size_t id = 0; id < devices.size(); id++) {
            DeviceState &s = devices[id];
            try {  // a destructor must not throw; at process exit CUDA may be gone already
                release_counted(int(id), s.scratch, s.scratch_bytes);
                if (s.handle) {
                    cublas::bind_workspace(s.handle, nullptr, 0);
                    (void)cublas::api().destroy(s.handle);
                }
                release_counted(int(id), s.workspace, s.workspace_bytes);
            } catch (...) {
            }
        }
    }
};

}  // namespace

namespace {

DeviceState &state_of(int device_id) {  // without a cuBLAS handle
    thread_local ThreadState ts;
    if (ts.devices.size() <= size_t(device_id)) ts.devices.resize(size_t(device_id) + 1);
    return ts.devices[size_t(device_id)];
}

}  // namespace

DeviceState &device_state(int device_id) {
    DeviceState &s = state_of(device_id);
    if (!s.handle) {
        const cublas::Api &api = cublas::api();
        if (!s.workspace) {  // cuBLAS's workspace comes from the allocator, so it is counted
            const size_t bytes = cublas_workspace_size(device_id);
            s.workspace =
                static_cast<std::byte *>(core::allocate(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, bytes));
            s.workspace_bytes = bytes;
            count(device_id, bytes, 0);
        }
        cublas::check(api.create(&s.handle), "cublasCreate");
        cublas::check(api.set_math_mode(s.handle, cublas::kDefaultMath), "cublasSetMathMode");
        cublas::bind_workspace(s.handle, s.workspace, s.workspace_bytes);
    }
    return s;
}

std::byte *scratch(DeviceState &s, int device_id, size_t bytes) {
    if (bytes <= s.scratch_bytes) return s.scratch;
    LLAISYS_CUDA_CHECK(cudaDeviceSynchronize());  // earlier launches may still read the old buffer
    release_counted(device_id, s.scratch, s.scratch_bytes);
    const size_t grown = bytes + bytes / 2;
    s.scratch = static_cast<std::byte *>(core::allocate(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, grown));
    s.scratch_bytes = grown;
    count(device_id, grown, 0);
    return s.scratch;
}

size_t scratch_bytes(int device_id) {
    Totals &t = totals();
    std::lock_guard<std::mutex> lock(t.mutex);
    return device_id >= 0 && size_t(device_id) < t.bytes.size() ? t.bytes[size_t(device_id)] : 0;
}

std::byte *thread_scratch(int device_id, size_t bytes) { return scratch(state_of(device_id), device_id, bytes); }

uint64_t scratch_epoch() { return g_scratch_epoch.load(std::memory_order_acquire); }

void scratch_released() { g_scratch_epoch.fetch_add(1, std::memory_order_acq_rel); }

void convert_dtype(void *dst, llaisysDataType_t ddt, const void *src, llaisysDataType_t sdt, size_t count,
                   cudaStream_t stream) {
    if (count == 0) return;
    dispatch_float(ddt, [&](auto dtag) {
        dispatch_float(sdt, [&](auto stag) {
            using TD = decltype(dtag);
            using TS = decltype(stag);
            convert_kernel<TD, TS><<<grid_for(count, kThreads), kThreads, 0, stream>>>(
                static_cast<TD *>(dst), static_cast<const TS *>(src), count);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
