// PackedWeight: packing, row writes and row reads (layout in packed.hpp).
#include "packed.hpp"

#include "../../../utils/checked.hpp"
#include "../../../utils/error.hpp"
#include "../../../utils/host_alloc.hpp"
#include "../../../utils/types.hpp"
#include "gemm.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace llaisys::ops::cpu {

namespace {

// The ISA whose kernel will run a weight of this dtype: the bf16 dot products need bf16.
Isa packing_isa(llaisysDataType_t dtype) {
    Isa isa = active_isa();
    return isa == Isa::Avx512Bf16 && dtype != LLAISYS_DTYPE_BF16 ? Isa::Avx512 : isa;
}

}  // namespace

PackedWeight::PackedWeight(size_t n, size_t k, llaisysDataType_t dtype)
    : n_(n), k_(k), nr_(packing_isa(dtype) >= Isa::Avx512 ? kPackedNrAvx512 : kPackedNrAvx2), dtype_(dtype),
      isa_(packing_isa(dtype)) {
    LLAISYS_CHECK(is_float_dtype(dtype), LLAISYS_STATUS_DTYPE_MISMATCH, "packed weight: dtype must be f32, f16 or bf16, got ",
                  dtype_name(dtype));
    LLAISYS_CHECK_ARG(n > 0 && k > 0, "packed weight: shape [", n, ", ", k, "] is empty");
    checked_mul(k_, nr_, "packed weight: panel");  // so that k_padded() * nr_ fits too (nr_ is even)
    size_t elems = checked_mul(n_panels(), checked_mul(nr_, k_padded(), "packed weight: panel"), "packed weight: elements");
    bytes_ = checked_mul(elems, dtype_size(dtype), "packed weight: bytes");
    const size_t alloc = checked_round_up(bytes_, 64, "packed weight: bytes");
    data_.reset(static_cast<std::byte *>(host_alloc_weight(alloc)));
    // Only the tail panel is cleared (its padding columns must read as zero); every other
    // element is written by set_rows (pair panels' odd-k padding too), and touching 1 GB here
    // would only add to the load.
    const size_t panel_bytes = panel_elems() * dtype_size(dtype);
    std::memset(data_.get() + bytes_ - panel_bytes, 0, alloc - (bytes_ - panel_bytes));
}

PackedWeight PackedWeight::pack(const void *w, llaisysDataType_t dtype, size_t n, size_t k) {
    PackedWeight p(n, k, dtype);
    p.set_rows(0, n, w, dtype);
    return p;
}

void PackedWeight::set_rows(size_t row0, size_t rows, const void *src, llaisysDataType_t src_dt) {
    LLAISYS_CHECK_ARG(row0 <= n_ && rows <= n_ - row0, "packed weight: rows [", row0, ", ", row0 + rows,
                      ") outside [0, ", n_, ")");
    if (rows == 0) return;
    const size_t p0 = row0 / nr_, p1 = (row0 + rows - 1) / nr_ + 1;  // panels touched
    const size_t k = k_, nr = nr_, pe = panel_elems();
    dispatch_float(src_dt, [&](auto stag) {
        using TS = decltype(stag);
        dispatch_float(dtype_, [&](auto dtag) {
            using TD = decltype(dtag);
            const TS *s = static_cast<const TS *>(src);  // [rows, k]
            TD *d = reinterpret_cast<TD *>(data_.get());
#pragma omp parallel for schedule(static) if ((p1 - p0) * k * nr > 65536)
            for (ptrdiff_t pp = ptrdiff_t(p0); pp < ptrdiff_t(p1); pp++) {
                const size_t p = size_t(pp);
                const size_t j0 = std::max(row0, p * nr), j1 = std::min(row0 + rows, (p + 1) * nr);
                TD *panel = d + p * pe;  // [pe]: [k][nr] or [ceil(k/2)][nr][2]
                for (size_t j = j0; j < j1; j++) {
                    const TS *srow = s + (j - row0) * k;
                    const size_t c = j - p * nr;
                    for (size_t kk = 0; kk < k; kk++) {
                        if constexpr (std::is_same_v<TS, TD>) panel[offset(c, kk)] = srow[kk];
                        else panel[offset(c, kk)] = from_f32<TD>(to_f32(srow[kk]));
                    }
                    if (pairs() && k % 2) panel[offset(c, k)] = from_f32<TD>(0.0f);  // odd-k padding
                }
            }
        });
    });
}

void PackedWeight::row_f32(size_t j, float *dst) const {
    LLAISYS_CHECK(j < n_, LLAISYS_STATUS_OUT_OF_RANGE, "packed weight: row ", j, " outside [0, ", n_, ")");
    const size_t p = j / nr_, c = j % nr_;
    dispatch_float(dtype_, [&](auto tag) {
        using T = decltype(tag);
        const T *panel = reinterpret_cast<const T *>(data_.get()) + p * panel_elems();
        for (size_t kk = 0; kk < k_; kk++) dst[kk] = to_f32(panel[offset(c, kk)]);
    });
}

}  // namespace llaisys::ops::cpu
