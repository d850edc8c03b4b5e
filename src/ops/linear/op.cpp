#include "op.hpp"

#include "../check.hpp"
#include "cpu/linear_cpu.hpp"

namespace llaisys::ops {

void linear(Tensor &out, const Tensor &in, const Tensor &weight, const Tensor *bias) {
    const char *op = "linear";
    check_same_device(op, {&out, &in, &weight});
    check_same_dtype(op, {&out, &in});
    check_float(op, out);
    check_float(op, weight);  // may differ from the activations' dtype
    check_ndim(op, "in", in, 2);
    check_ndim(op, "weight", weight, 2);
    size_t m = in.shape()[0], k = in.shape()[1], n = weight.shape()[0];
    LLAISYS_CHECK(weight.shape()[1] == k, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": in ", in.describe(),
                  " and weight ", weight.describe(), " disagree on the inner dimension");
    check_shape(op, "out", out, {m, n});
    check_contiguous(op, {&out, &in, &weight});
    if (bias) {
        check_same_device(op, {&out, bias});
        check_same_dtype(op, {&weight, bias});
        check_shape(op, "bias", *bias, {n});
        check_contiguous(op, {bias});
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::linear(out.data(), in.data(), out.dtype(), weight.data(), bias ? bias->data() : nullptr, weight.dtype(), m,
                n, k);
}

}  // namespace llaisys::ops
