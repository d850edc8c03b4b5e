#include "op.hpp"

#include "../check.hpp"
#include "cpu/embedding_cpu.hpp"

namespace llaisys::ops {

void embedding(Tensor &out, const Tensor &index, const Tensor &weight) {
    const char *op = "embedding";
    check_same_device(op, {&out, &index, &weight});
    check_float(op, out);
    check_float(op, weight);  // rows are converted to out's dtype
    check_dtype(op, "index", index, LLAISYS_DTYPE_I64);
    check_ndim(op, "index", index, 1);
    check_ndim(op, "weight", weight, 2);
    check_shape(op, "out", out, {index.shape()[0], weight.shape()[1]});
    check_contiguous(op, {&out, &index, &weight});
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::embedding(out.data(), out.dtype(), index.data_as<int64_t>(), weight.data(), weight.dtype(),
                   index.shape()[0], weight.shape()[0], weight.shape()[1]);
}

}  // namespace llaisys::ops
