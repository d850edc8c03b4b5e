// A linear layer's weight packed once for the CPU GEMM (linear_packed in linear_cpu.hpp).
//
// Layout. The HF weight W [n, k] (row j is output column j) is cut into n_panels =
// ceil(n / nr) column panels of nr output columns; the last one is zero-padded. Each panel is
// contiguous (decode streams it) and is walked in blocks of kPackedKc steps of k, each block
// one contiguous run read front to back. The ISA is recorded and linear_packed runs the
// kernel of that ISA; nr is 32 when packed for AVX-512 and 16 otherwise (AVX2, scalar).
//
// Row panels (f32, f16 on every ISA; bf16 except under Avx512Bf16): k rows of nr elements,
// row kk holding W[p*nr + c, kk] for c in [0, nr):
//   storage [n_panels][k][nr], in the weight's own dtype (bf16 stays bf16).
// bf16 rows are interleaved: column c sits at element 2c for c < nr/2 and 2(c - nr/2) + 1
// otherwise, so each 32-bit lane holds columns c and c + nr/2 and widening to f32 is a shift
// and a mask instead of a shuffle. f16 and f32 rows are in column order.
//
// Pair panels (bf16 packed under Avx512Bf16, nr = 32): the k steps are taken two at a time,
// as vdpbf16ps multiplies them: ceil(k / 2) rows of nr 32-bit lanes, lane c of row kp
// holding {W[p*nr + c, 2kp], W[p*nr + c, 2kp + 1]} (low half first; for odd k the last
// row's high halves are zero):
//   storage [n_panels][ceil(k / 2)][nr][2] bf16, columns in order.
#pragma once

#include "../../../utils/checked.hpp"
#include "../../../utils/cpu_isa.hpp"
#include "../../../utils/host_alloc.hpp"
#include "llaisys.h"

#include <cstddef>
#include <memory>

namespace llaisys::ops::cpu {

class PackedWeight {
public:
    // n x k, dtype f32/f16/bf16, packed for active_isa() (Avx512 instead of Avx512Bf16
    // unless the dtype is bf16: the dot products take bf16 only); fill every row with set_rows
    // (rows not yet set hold unspecified values; the tail panel's padding is zero).
    PackedWeight(size_t n, size_t k, llaisysDataType_t dtype);
    // Pack a whole weight w [n, k] of dtype `dtype`.
    static PackedWeight pack(const void *w, llaisysDataType_t dtype, size_t n, size_t k);

    // Rows [row0, row0 + rows) of W from src [rows, k] of dtype src_dt (converted, rounding
    // to nearest even, when it differs from dtype()).
    void set_rows(size_t row0, size_t rows, const void *src, llaisysDataType_t src_dt);
    // dst [k] = W[j, :] widened to f32 (the embedding lookup of a tied lm_head reads this).
    void row_f32(size_t j, float *dst) const;

    size_t n() const { return n_; }
    size_t k() const { return k_; }
    size_t nr() const { return nr_; }
    size_t n_panels() const { return ceil_div(n_, nr_); }
    llaisysDataType_t dtype() const { return dtype_; }
    Isa isa() const { return isa_; }
    const std::byte *data() const { return data_.get(); }  // [n_panels][panel_elems()]
    size_t bytes() const { return bytes_; }
    // Row panels only: where column c (< nr) of a panel row is stored within that row.
    size_t lane(size_t c) const {
        if (dtype_ != LLAISYS_DTYPE_BF16 || pairs()) return c;
        return c < nr_ / 2 ? 2 * c : 2 * (c - nr_ / 2) + 1;
    }
    // Whether the panels are pair panels (bf16 under Avx512Bf16).
    bool pairs() const { return isa_ == Isa::Avx512Bf16; }
    // Elements per panel: k * nr (row panels) or 2 * ceil(k / 2) * nr (pair panels).
    size_t panel_elems() const { return k_padded() * nr_; }
    // Element of W[p*nr + c, kk] within its panel, for either layout.
    size_t offset(size_t c, size_t kk) const {
        return pairs() ? (kk >> 1) * 2 * nr_ + 2 * c + (kk & 1) : kk * nr_ + lane(c);
    }

private:
    size_t k_padded() const { return pairs() ? ceil_div(k_, 2) * 2 : k_; }  // k_ <= SIZE_MAX / nr_ (checked)
    struct Free {
        void operator()(std::byte *p) const { host_free_weight(p); }
    };
    size_t n_, k_, nr_;
    llaisysDataType_t dtype_;
    Isa isa_;
    size_t bytes_;
    std::unique_ptr<std::byte[], Free> data_;
};

}  // namespace llaisys::ops::cpu
