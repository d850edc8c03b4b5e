#include "cells.hpp"

#include "../../utils/error.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace llaisys::kv {
namespace {

bool in_range(int64_t p, int64_t p0, int64_t p1) { return p >= p0 && (p1 < 0 || p < p1); }

}  // namespace

UnifiedCells::UnifiedCells(size_t n_cells) : pos_(n_cells, -1), seqs_(n_cells) {}

bool UnifiedCells::find_free(size_t n, std::vector<int32_t> &out) const {
    out.clear();
    if (size() - used_ < n) return false;
    size_t cell = head_;
    for (size_t scanned = 0; scanned < size() && out.size() < n; scanned++, cell = (cell + 1) % size()) {
        if (empty(cell)) out.push_back(int32_t(cell));
    }
    head_ = cell;
    return out.size() == n;
}

void UnifiedCells::assign(size_t cell, int32_t seq, int64_t pos) {
    // invariant: callers pass cells from find_free
    if (empty(cell)) used_++;
    seqs_[cell].set(size_t(seq));
    pos_[cell] = pos;
}

void UnifiedCells::release_if_empty(size_t cell) {
    if (empty(cell) && pos_[cell] >= 0) {
        pos_[cell] = -1;
        used_--;
    }
}

void UnifiedCells::seq_rm(int32_t seq, int64_t p0, int64_t p1) {
    for (size_t c = 0; c < size(); c++) {
        if (pos_[c] < 0 || !in_range(pos_[c], p0, p1)) continue;
        if (seq < 0) seqs_[c].reset();
        else seqs_[c].reset(size_t(seq));
        release_if_empty(c);
    }
}

void UnifiedCells::seq_cp(int32_t src, int32_t dst, int64_t p0, int64_t p1) {
    if (src == dst) return;
    for (size_t c = 0; c < size(); c++) {
        if (seqs_[c].test(size_t(src)) && in_range(pos_[c], p0, p1)) seqs_[c].set(size_t(dst));
    }
}

void UnifiedCells::seq_keep(int32_t seq) {
    for (size_t c = 0; c < size(); c++) {
        if (pos_[c] < 0) continue;
        bool mine = seqs_[c].test(size_t(seq));
        seqs_[c].reset();
        if (mine) seqs_[c].set(size_t(seq));
        release_if_empty(c);
    }
}

void UnifiedCells::seq_add(int32_t seq, int64_t p0, int64_t p1, int64_t delta, std::vector<int32_t> &shifted) {
    shifted.clear();
    if (delta == 0) return;
    for (size_t c = 0; c < size(); c++) {
        if (!seqs_[c].test(size_t(seq)) || !in_range(pos_[c], p0, p1)) continue;
        LLAISYS_CHECK_ARG(seqs_[c].count() == 1, "seq_add: cell at position ", pos_[c], " of seq ", seq,
                          " is shared with another sequence; shift it with each owner alone (seq_rm/seq_cp first)");
        LLAISYS_CHECK_ARG(delta < 0 || pos_[c] <= INT64_MAX - delta, "seq_add: position ", pos_[c], " + delta ", delta,
                          " overflows int64");
    }
    for (size_t c = 0; c < size(); c++) {
        if (!seqs_[c].test(size_t(seq)) || !in_range(pos_[c], p0, p1)) continue;
        if (pos_[c] + delta < 0) {
            seqs_[c].reset(size_t(seq));
            release_if_empty(c);
        } else {
            pos_[c] += delta;
            shifted.push_back(int32_t(c));
        }
    }
}

int64_t UnifiedCells::seq_pos_max(int32_t seq) const {
    int64_t mx = -1;
    for (size_t c = 0; c < size(); c++) {
        if (seqs_[c].test(size_t(seq))) mx = std::max(mx, pos_[c]);
    }
    return mx;
}

void UnifiedCells::clear() {
    std::fill(pos_.begin(), pos_.end(), -1);
    for (auto &s : seqs_) s.reset();
    used_ = 0;
    head_ = 0;
}

void UnifiedCells::visible(int32_t seq, std::vector<int32_t> &cells, std::vector<int64_t> &positions) const {
    size_t first = cells.size();
    for (size_t c = 0; c < size(); c++) {
        if (seqs_[c].test(size_t(seq))) cells.push_back(int32_t(c));
    }
    std::sort(cells.begin() + ptrdiff_t(first), cells.end(), [&](int32_t a, int32_t b) { return pos_[a] < pos_[b]; });
    for (size_t i = first; i < cells.size(); i++) positions.push_back(pos_[size_t(cells[i])]);
}

}  // namespace llaisys::kv
