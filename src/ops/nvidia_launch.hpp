// How the ops of the Tensor API (src/ops/<op>/op.cpp) run a CUDA launcher. Only in builds
// with the NVIDIA backend (LLAISYS_ENABLE_NVIDIA); the model calls the launchers directly.
#pragma once

#ifdef LLAISYS_ENABLE_NVIDIA

#include "../device/nvidia/cuda_check.hpp"
#include "../tensor/tensor.hpp"

#include <vector>

namespace llaisys::ops {

// Runs launch(stream) with device `id` current, on the legacy default stream, and waits for
// it: the Tensor-level op is the test and reference path, so a kernel's failure is reported
// by the op that caused it.
template <class F>
void run_nvidia(int id, F &&launch) {
    device::nvidia::DeviceGuard guard(id);
    launch(cudaStream_t(nullptr));
    LLAISYS_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

// A host copy of a small tensor's elements (index arrays the host validates before a launch).
template <class T>
std::vector<T> host_copy(const Tensor &t) {
    std::vector<T> v(t.numel());
    t.read(v.data(), v.size() * sizeof(T));
    return v;
}

}  // namespace llaisys::ops

#endif
