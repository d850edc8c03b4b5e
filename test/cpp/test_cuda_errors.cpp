// The CUDA error classification (src/device/nvidia/cuda_errors.cpp), tested directly: it calls
// no CUDA function, so it runs on a machine without a GPU. A sticky error (the context is
// corrupted) must become DEVICE_LOST, which the engine treats as fatal; any other failure
// DEVICE_ERROR (recoverable by the caller), and an allocation failure OUT_OF_MEMORY.
#include "../../src/device/nvidia/cuda_check.hpp"
#include "unit.hpp"

using llaisys::device::nvidia::cuda_status;
using llaisys::device::nvidia::is_sticky;

int main() {
    const cudaError_t sticky[] = {cudaErrorIllegalAddress,      cudaErrorLaunchFailure,       cudaErrorMisalignedAddress,
                                  cudaErrorIllegalInstruction,  cudaErrorHardwareStackError,  cudaErrorAssert,
                                  cudaErrorECCUncorrectable,    cudaErrorInvalidPc,           cudaErrorInvalidAddressSpace,
                                  cudaErrorLaunchTimeout,       cudaErrorMpsClientTerminated, cudaErrorExternalDevice};
    for (cudaError_t e : sticky) {
        EXPECT(is_sticky(e), "a documented sticky error is sticky");
        EXPECT(cuda_status(e) == LLAISYS_STATUS_DEVICE_LOST, "a sticky error is DEVICE_LOST");
    }
    // errors after which the context still works: the call failed, nothing else did
    const cudaError_t recoverable[] = {cudaErrorInvalidValue,  cudaErrorInvalidDevice,        cudaErrorNoDevice,
                                       cudaErrorNotReady,      cudaErrorLaunchOutOfResources, cudaErrorInvalidConfiguration,
                                       cudaErrorNotSupported,  cudaErrorInsufficientDriver,   cudaErrorPeerAccessUnsupported};
    for (cudaError_t e : recoverable) {
        EXPECT(!is_sticky(e), "a per-call error is not sticky");
        EXPECT(cuda_status(e) == LLAISYS_STATUS_DEVICE_ERROR, "a per-call error is DEVICE_ERROR");
    }
    EXPECT(cuda_status(cudaErrorMemoryAllocation) == LLAISYS_STATUS_OUT_OF_MEMORY, "cudaMalloc failing is OUT_OF_MEMORY");
    EXPECT(!is_sticky(cudaErrorMemoryAllocation), "running out of memory is not sticky");
    EXPECT(cuda_status(cudaSuccess) == LLAISYS_STATUS_OK, "success is OK");
    EXPECT(!is_sticky(cudaSuccess), "success is not sticky");
    return finish();
}
