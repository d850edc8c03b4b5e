#include "op.hpp"

#include "../check.hpp"
#include "cpu/quantize_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../../quant/nvidia/dequant_nvidia.hpp"
#include "../nvidia_launch.hpp"
#endif

namespace llaisys::ops {

namespace {

inline void check_quant(const char *op, const char *name, const Tensor &t) {
    LLAISYS_CHECK(t.is_quantized(), LLAISYS_STATUS_DTYPE_MISMATCH, op, ": ", name,
                  " must be a block-quantized dtype (", kQuantDtypeNames, "), got ", t.describe());
}

// The checks both directions share; returns (rows, k). Only the CPU, and for dequantize an
// NVIDIA GPU (nvidia_ok), have kernels.
std::pair<size_t, size_t> check_pair(const char *op, const Tensor &out, const Tensor &in, bool nvidia_ok) {
    check_same_device(op, {&out, &in});
    check_shape(op, "out", out, in.shape());
    check_contiguous(op, {&out, &in});
    if (out.device() != LLAISYS_DEVICE_CPU && !(nvidia_ok && out.device() == LLAISYS_DEVICE_NVIDIA)) no_kernel(op, out);
    const size_t k = in.shape().back();  // quantized tensors have at least one dim
    return {k == 0 ? 0 : in.numel() / k, k};
}

}  // namespace

void dequantize(Tensor &out, const Tensor &in) {
    const char *op = "dequantize";
    check_quant(op, "in", in);
    check_float(op, out);
    auto [rows, k] = check_pair(op, out, in, true);
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&, rows = rows, k = k](cudaStream_t s) {
            quant::nvidia::dequantize_rows(out.data(), out.dtype(), in.data(), in.dtype(), rows, k, nullptr, 0, s);
        });
        return;
#else
        no_kernel(op, out);
#endif
    }
    cpu::dequantize(out.data(), out.dtype(), in.data(), in.dtype(), rows, k);
}

void quantize(Tensor &out, const Tensor &in) {
    const char *op = "quantize";
    check_quant(op, "out", out);
    check_float(op, in);
    auto [rows, k] = check_pair(op, out, in, false);
    cpu::quantize(out.data(), out.dtype(), in.data(), in.dtype(), rows, k);
}

}  // namespace llaisys::ops
