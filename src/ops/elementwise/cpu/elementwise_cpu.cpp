#include "elementwise_cpu.hpp"

#include "../../../utils/types.hpp"

namespace llaisys::ops::cpu {
namespace {

template <class T, class F>
void apply(T *out, const T *a, const T *b, size_t n, F f) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (ptrdiff_t i = 0; i < ptrdiff_t(n); i++) out[i] = from_f32<T>(f(to_f32(a[i]), to_f32(b[i])));
}

}  // namespace

void binary(BinaryOp op, std::byte *out, const std::byte *a, const std::byte *b, llaisysDataType_t dtype,
            size_t n) {
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        auto *o = reinterpret_cast<T *>(out);
        auto *x = reinterpret_cast<const T *>(a);
        auto *y = reinterpret_cast<const T *>(b);
        if (op == BinaryOp::Add) apply(o, x, y, n, [](float p, float q) { return p + q; });
        else apply(o, x, y, n, [](float p, float q) { return p * q; });
    });
}

}  // namespace llaisys::ops::cpu
