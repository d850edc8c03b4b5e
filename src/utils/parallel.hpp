// parallel_for_stealing: a parallel loop for memory-bound work items of equal size whose
// threads should each read one long sequential stream, and none of which should wait for a
// slower one at the end.
//
// schedule(static) gives each thread one contiguous share, which is the stream the hardware
// prefetchers and the kernels' own prefetches follow best; but every parallel loop then ends
// when its slowest thread does, and on a shared host one core often streams slower than the
// other for a while (on the 2-vCPU Xeon VM, decode of a quantized 1.5B spent ~8% of its thread
// time in the OpenMP barrier at the ends of its ~110 loops a step). schedule(dynamic) balances
// but interleaves the threads' items, so no thread reads a long stream. Here each thread starts
// on the share static would give it, front to back; a thread whose share is done takes items
// one at a time from the back of another's. The streams stay whole until the last few items,
// and the loop ends within one item of the last thread's work.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace llaisys {

namespace detail {

// One thread's share [front, back) of the items, in one word so that the owner (taking the
// front) and a thief (taking the back) can never take the same item.
struct alignas(64) Share {
    std::atomic<uint64_t> span{0};

    static uint64_t pack(uint32_t front, uint32_t back) { return uint64_t(back) << 32 | front; }
    void set(size_t front, size_t back) { span.store(pack(uint32_t(front), uint32_t(back)), std::memory_order_relaxed); }

    // The next item from the front (owner) or the back (thief); false once the share is empty.
    bool take(bool from_back, size_t &item) {
        uint64_t s = span.load(std::memory_order_relaxed);
        for (;;) {
            const uint32_t front = uint32_t(s), back = uint32_t(s >> 32);
            if (front >= back) return false;
            const uint64_t next = from_back ? pack(front, back - 1) : pack(front + 1, back);
            if (span.compare_exchange_weak(s, next, std::memory_order_relaxed)) {
                item = from_back ? back - 1 : front;
                return true;
            }
        }
    }
};

}  // namespace detail

// fn(i) for every i in [0, n), each exactly once, on the OpenMP team (n < 2^32; fn must not
// throw). Within one call a thread runs its own share in order; which items it steals depends
// on timing, so fn(i) may only write what item i owns.
template <class Fn>
void parallel_for_stealing(size_t n, Fn &&fn) {
    if (n == 0) return;
    const size_t shares = std::min<size_t>(size_t(omp_get_max_threads()), n);
    if (shares <= 1 || n > UINT32_MAX) {
        for (size_t i = 0; i < n; i++) fn(i);
        return;
    }
    // on the stack for the usual teams (decode runs ~110 of these loops a step), else the heap
    constexpr size_t kOnStack = 16;
    detail::Share on_stack[kOnStack];
    std::unique_ptr<detail::Share[]> on_heap(shares > kOnStack ? new detail::Share[shares] : nullptr);
    detail::Share *share = on_heap ? on_heap.get() : on_stack;
    for (size_t t = 0; t < shares; t++) share[t].set(n * t / shares, n * (t + 1) / shares);
    // A team smaller than `shares` (omp_set_dynamic, a nested region) leaves some shares without
    // an owner: the thieves take them whole.
#pragma omp parallel num_threads(int(shares))
    {
        const size_t self = size_t(omp_get_thread_num());
        size_t i;
        while (share[self].take(false, i)) fn(i);
        for (size_t v = 1; v < shares; v++) {
            detail::Share &other = share[(self + v) % shares];
            while (other.take(true, i)) fn(i);
        }
    }
}

}  // namespace llaisys
