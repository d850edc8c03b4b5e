#include "row_kernels.hpp"

#include "../../utils/cpu_isa.hpp"

namespace llaisys::ops::cpu::simd {

namespace scalar {
extern const RowKernels kRowKernels;
}
namespace avx2 {
extern const RowKernels kRowKernels;
}
namespace avx512 {
extern const RowKernels kRowKernels;
}

const RowKernels &row_kernels() {
    static const RowKernels &k = active_isa() >= Isa::Avx512 ? avx512::kRowKernels
                                 : active_isa() >= Isa::Avx2 ? avx2::kRowKernels
                                                             : scalar::kRowKernels;
    return k;
}

}  // namespace llaisys::ops::cpu::simd
