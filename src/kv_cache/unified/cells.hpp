// SLOT layout metadata, kept apart from K/V storage (as llama.cpp's llama-kv-cells.h):
// for every cell its position and the set of sequences that own it.
#pragma once

#include "llaisys/kv_cache.h"

#include <bitset>
#include <cstdint>
#include <vector>

namespace llaisys::kv {

class UnifiedCells {
public:
    explicit UnifiedCells(size_t n_cells);

    size_t size() const { return pos_.size(); }
    size_t used() const { return used_; }
    bool empty(size_t cell) const { return seqs_[cell].none(); }
    int64_t pos(size_t cell) const { return pos_[cell]; }

    // n free cells into `out` (not necessarily adjacent); false, with nothing changed, if
    // fewer than n are free.
    bool find_free(size_t n, std::vector<int32_t> &out) const;
    // Give an empty cell to seq at pos.
    void assign(size_t cell, int32_t seq, int64_t pos);

    void seq_rm(int32_t seq, int64_t p0, int64_t p1);  // seq < 0: every seq
    void seq_cp(int32_t src, int32_t dst, int64_t p0, int64_t p1);
    void seq_keep(int32_t seq);
    // Shift positions of seq's cells in [p0, p1) by delta; cells that would go negative are
    // removed from seq. `shifted` receives the cells whose position changed. Throws if one
    // of them is shared with another seq.
    void seq_add(int32_t seq, int64_t p0, int64_t p1, int64_t delta, std::vector<int32_t> &shifted);
    int64_t seq_pos_max(int32_t seq) const;  // -1 when seq holds no cell
    void clear();

    // seq's cells ordered by position: the attention view of one row.
    void visible(int32_t seq, std::vector<int32_t> &cells, std::vector<int64_t> &positions) const;

private:
    void release_if_empty(size_t cell);

    std::vector<int64_t> pos_;                          // [n_cells] position, -1 when empty
    std::vector<std::bitset<LLAISYS_KV_MAX_SEQS>> seqs_;  // [n_cells] owners
    size_t used_ = 0;                                   // cells with at least one owner
    mutable size_t head_ = 0;                           // where the next free-cell search starts
};

}  // namespace llaisys::kv
