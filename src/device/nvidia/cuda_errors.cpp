// Which llaisys status a CUDA error becomes (cuda_check.hpp). Plain C++ over the error enum:
// no CUDA call, so the classification is testable on a machine without a GPU
// (test/cpp/test_cuda_errors.cpp).
#include "cuda_check.hpp"

namespace llaisys::device::nvidia {

bool is_sticky(cudaError_t err) {
    // The errors the CUDA runtime documents as leaving "the process in an inconsistent state":
    // the context is corrupted and every later call returns the same error until the process
    // exits. Numbers for the two that older toolkits do not name.
    switch (static_cast<int>(err)) {
    case cudaErrorECCUncorrectable:     // 214: uncorrectable ECC error during execution
    case 226:                           // cudaErrorContained: an error contained by the hardware
    case cudaErrorIllegalAddress:       // 700: a kernel read or wrote an invalid address
    case cudaErrorLaunchTimeout:        // 702: a kernel ran past the watchdog
    case cudaErrorAssert:               // 710: a device-side assert
    case cudaErrorHardwareStackError:   // 714
    case cudaErrorIllegalInstruction:   // 715
    case cudaErrorMisalignedAddress:    // 716
    case cudaErrorInvalidAddressSpace:  // 717
    case cudaErrorInvalidPc:            // 718
    case cudaErrorLaunchFailure:        // 719: an unspecified exception in a kernel
    case 721:                           // cudaErrorTensorMemoryLeak
    case cudaErrorMpsClientTerminated:  // 810: the MPS server ended this client
    case cudaErrorExternalDevice:       // 911: an error on an external device the kernel used
        return true;
    default:
        return false;
    }
}

llaisysStatus_t cuda_status(cudaError_t err) {
    if (err == cudaSuccess) return LLAISYS_STATUS_OK;
    if (err == cudaErrorMemoryAllocation) return LLAISYS_STATUS_OUT_OF_MEMORY;
    return is_sticky(err) ? LLAISYS_STATUS_DEVICE_LOST : LLAISYS_STATUS_DEVICE_ERROR;
}

}  // namespace llaisys::device::nvidia
