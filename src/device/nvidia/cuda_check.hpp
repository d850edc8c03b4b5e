// CUDA error checking and device selection, shared by the NVIDIA runtime and the CUDA kernels
// under src/ops/<op>/nvidia/. Includable from .cpp (g++) and .cu (nvcc) files alike.
//
//   LLAISYS_CUDA_CHECK(cudaMemcpy(...));        // throws llaisys::Error on failure
//   LLAISYS_CUDA_CHECK(cudaGetLastError());     // after a kernel launch
//   nvidia::DeviceGuard guard(id);              // run on device `id`, restore the previous one
#pragma once

#include "../../utils/error.hpp"

#include <cuda_runtime_api.h>

namespace llaisys::device::nvidia {

// Whether `err` is sticky: the CUDA context is corrupted (an illegal address, a device-side
// assert, an uncorrectable ECC error...) and every later CUDA call in the process fails.
bool is_sticky(cudaError_t err);

// The status a CUDA error becomes: OK for cudaSuccess, OUT_OF_MEMORY for
// cudaErrorMemoryAllocation, DEVICE_LOST for a sticky error, DEVICE_ERROR otherwise.
llaisysStatus_t cuda_status(cudaError_t err);

// Throws llaisys::Error(cuda_status(err)) for a failed CUDA call, with the message
// "<call> failed: <cudaGetErrorString> (<cudaGetErrorName>) at <file>:<line>", and for a
// sticky error the note that the device is lost until the process restarts.
// Clears the runtime's (non-sticky) last error first, so it does not resurface later.
[[noreturn]] void cuda_fail(cudaError_t err, const char *call, const char *file, int line);

}  // namespace llaisys::device::nvidia

#define LLAISYS_CUDA_CHECK(call)                                                            \
    do {                                                                                    \
        cudaError_t llaisys_cuda_err_ = (call);                                             \
        if (llaisys_cuda_err_ != cudaSuccess)                                               \
            ::llaisys::device::nvidia::cuda_fail(llaisys_cuda_err_, #call, __FILE__, __LINE__); \
    } while (0)

namespace llaisys::device::nvidia {

// Makes `id` the calling thread's current CUDA device for the guard's lifetime and restores
// the previous one afterwards (only when it had to switch).
class DeviceGuard {
public:
    explicit DeviceGuard(int id) {
        LLAISYS_CUDA_CHECK(cudaGetDevice(&previous_));
        if (previous_ != id) {
            LLAISYS_CUDA_CHECK(cudaSetDevice(id));
            switched_ = true;
        }
    }
    ~DeviceGuard() {
        if (switched_) (void)cudaSetDevice(previous_);  // a destructor must not throw
    }
    DeviceGuard(const DeviceGuard &) = delete;
    DeviceGuard &operator=(const DeviceGuard &) = delete;

private:
    int previous_ = 0;
    bool switched_ = false;
};

}  // namespace llaisys::device::nvidia
