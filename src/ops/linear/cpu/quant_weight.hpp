// A linear layer's weight kept in its GGUF block-quantized form (any format of
// src/quant/blocks.hpp), and the linear over it (linear_quant).
//
// Layout. W [n, k] (row j is output j) is held as row ranges ("segments") set one by one,
// each in one quant dtype: a fused q|k|v weight may hold Q4_K rows beside Q6_K rows. A
// segment of a format with an x16 layout (quant_x16.hpp: 16 rows interleaved, what the int8
// kernels read fastest) is repacked into it; any other is stored as GGUF stores it, row-major,
// k / block blocks a row:
//   storage [rows][k / block] blocks of the segment's dtype (64-byte aligned), or
//           [ceil(rows / 16)][k / block] x16 blocks.
// Either way decode reads every weight byte once per call, in order. Readers that want the
// file's blocks (the float path, the AMX tiles, row_f32) take them through file_blocks.
#pragma once

#include "../../../utils/host_alloc.hpp"
#include "llaisys.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace llaisys::ops::cpu {

// A row range of W in one quant dtype, borrowed: what the kernels read.
struct QuantRows {
    size_t row0, rows;       // rows [row0, row0 + rows) of W
    llaisysDataType_t dt;    // their quant dtype
    size_t row_bytes;        // k / block * block bytes (the file's row, also for x16)
    const std::byte *data;   // [rows][row_bytes] GGUF blocks, or x16 groups (quant_x16.hpp)
    bool x16 = false;        // data is [ceil(rows / 16)][k / block] x16 blocks
};

// The file's blocks [b0, b0 + nbk) of row r of s (r < s.rows): a pointer into s.data, or for an
// x16 segment into scratch (room for nbk blocks, unpacked there; NULL: a buffer of the calling
// thread's, valid until its next call).
const std::byte *file_blocks(const QuantRows &s, size_t r, size_t b0, size_t nbk, std::byte *scratch);

class QuantWeight {
public:
    // n output rows, k inputs (n, k > 0); set every row with set_rows before use.
    QuantWeight(size_t n, size_t k);

    // Rows [row0, row0 + rows) from GGUF row-major blocks [rows][k / block] of quant dtype dt.
    // Ranges may not overlap. Throws (INVALID_ARGUMENT, SHAPE_MISMATCH, DTYPE_MISMATCH) on a
    // dtype that is not block-quantized, k not a multiple of its block, a range outside [0, n),
    // an overlap or a null pointer.
    void set_rows(size_t row0, size_t rows, const void *blocks, llaisysDataType_t dt);
    bool complete() const { return rows_set_ == n_; }
    // dst [k] = W[j, :] dequantized (bit for bit as gguf-py): a tied lm_head's embedding lookup.
    void row_f32(size_t j, float *dst) const;

    size_t n() const { return n_; }
    size_t k() const { return k_; }
    size_t bytes() const { return bytes_; }  // bytes of quantized rows held (x16 groups as held)

    struct Free {
        void operator()(std::byte *p) const { host_free_weight(p); }
    };
    // The storage of one row range (its dtype and layout: the view of the same index).
    struct Segment {
        size_t row0, rows;
        std::unique_ptr<std::byte[], Free> data;  // [rows][row_bytes], or x16 groups
    };
    const std::vector<QuantRows> &views() const { return views_; }  // ordered by row0; views_[i] borrows segs_[i]

private:
    size_t n_, k_, rows_set_ = 0, bytes_ = 0;
    std::vector<Segment> segs_;
    std::vector<QuantRows> views_;
};

// out [m, n] f32 = x [m, k] f32 @ W^T (+ bias [n] of float dtype bias_dt when bias is not
// null). Activations are quantized to int8 per block (quant_kernels.hpp); the kernels of the
// active ISA run (AVX-512 VNNI, AVX2 or scalar). Throws when W is not complete.
void linear_quant(float *out, const float *x, const QuantWeight &w, const std::byte *bias,
                  llaisysDataType_t bias_dt, size_t m);
// The same over borrowed row ranges segs [n_segs] (ordered, together covering W [n, k]
// exactly once; each row_bytes consistent with k): the generic linear op's path, which does
// not copy the weight.
void linear_quant_rows(float *out, const float *x, const QuantRows *segs, size_t n_segs, size_t n, size_t k,
                       const std::byte *bias, llaisysDataType_t bias_dt, size_t m);

// A mixture of experts' decode: for each g < n_groups with rows[g] < rows[g + 1],
// out[rows[g] .. rows[g + 1]) = x[rows[g] .. rows[g + 1]) @ W_g^T, the W_g of one shape [n, k].
// One parallel loop over every group's row chunks (a linear_quant call per expert would end a
// loop, with its barrier, per expert). Returns false, having done nothing, when some group has
// enough rows that linear_quant would take its float path: the caller then runs linear_quant
// per group.
bool linear_quant_grouped(float *out, const float *x, const QuantWeight *const *w, const int32_t *rows,
                          size_t n_groups);

}  // namespace llaisys::ops::cpu
