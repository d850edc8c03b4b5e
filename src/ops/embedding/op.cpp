#include "op.hpp"

#include "../check.hpp"
#include "cpu/embedding_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/embedding_nvidia.hpp"
#endif

namespace llaisys::ops {

void embedding(Tensor &out, const Tensor &index, const Tensor &weight) {
    const char *op = "embedding";
    check_same_device(op, {&out, &index, &weight});
    check_float(op, out);
    if (!weight.is_quantized()) check_float(op, weight);  // rows are converted (or dequantized) to out's dtype
    check_dtype(op, "index", index, LLAISYS_DTYPE_I64);
    check_ndim(op, "index", index, 1);
    check_ndim(op, "weight", weight, 2);
    check_shape(op, "out", out, {index.shape()[0], weight.shape()[1]});
    check_contiguous(op, {&out, &index, &weight});
    LLAISYS_CHECK(!weight.is_quantized() || out.device() == LLAISYS_DEVICE_CPU, LLAISYS_STATUS_UNSUPPORTED, op,
                  ": a quantized table is looked up on the CPU only, got ", weight.describe());
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        const size_t n = index.shape()[0], vocab = weight.shape()[0];
        const std::vector<int64_t> ids = host_copy<int64_t>(index);  // checked before anything is written
        for (size_t i = 0; i < n; i++) {
            LLAISYS_CHECK(ids[i] >= 0 && uint64_t(ids[i]) < vocab, LLAISYS_STATUS_OUT_OF_RANGE, "embedding: index[", i,
                          "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")");
        }
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::embedding(out.data(), out.dtype(), index.data_as<int64_t>(), weight.data(), weight.dtype(), n, vocab,
                              weight.shape()[1], s);
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::embedding(out.data(), out.dtype(), index.data_as<int64_t>(), weight.data(), weight.dtype(),
                   index.shape()[0], weight.shape()[0], weight.shape()[1]);
}

}  // namespace llaisys::ops
