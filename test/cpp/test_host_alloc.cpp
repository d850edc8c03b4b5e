// host_alloc_weight / host_free_weight (src/utils/host_alloc.*), tested directly: buffers of
// every size are 64-byte aligned, never overlap, keep what was written while others come and
// go, and freeing in any order (from several threads) neither crashes nor frees a slab early.
#include "../../src/utils/host_alloc.hpp"
#include "unit.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <thread>
#include <vector>


struct Buf {
    unsigned char *p;
    size_t bytes;
    unsigned char tag;
};

static bool intact(const Buf &b) {
    for (size_t i = 0; i < b.bytes; i += 4093)
        if (b.p[i] != b.tag) return false;
    return b.p[b.bytes - 1] == b.tag;
}

int main() {
    std::mt19937 rng(7);
    const size_t sizes[] = {1, 63, 64, 4096, 200000, 1 << 20, (1 << 21) - 1, 1 << 21, 5 << 20, 16 << 20, (16 << 20) + 1,
                            40 << 20};
    std::vector<Buf> live;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 60; i++) {
            const size_t n = sizes[rng() % (sizeof sizes / sizeof *sizes)];
            auto *p = static_cast<unsigned char *>(llaisys::host_alloc_weight(n));
            EXPECT(reinterpret_cast<uintptr_t>(p) % 64 == 0, "64-byte aligned");
            const unsigned char tag = static_cast<unsigned char>(rng());
            std::memset(p, tag, n);
            live.push_back({p, n, tag});
        }
        std::vector<Buf> sorted = live;
        std::sort(sorted.begin(), sorted.end(), [](const Buf &a, const Buf &b) { return a.p < b.p; });
        bool disjoint = true;
        for (size_t i = 1; i < sorted.size(); i++) disjoint &= sorted[i - 1].p + sorted[i - 1].bytes <= sorted[i].p;
        EXPECT(disjoint, "no two live buffers overlap");
        bool all = true;
        for (const Buf &b : live) all &= intact(b);
        EXPECT(all, "every live buffer keeps its bytes");
        std::shuffle(live.begin(), live.end(), rng);  // free half, in random order
        for (size_t i = 0; i < live.size() / 2; i++) llaisys::host_free_weight(live[i].p);
        live.erase(live.begin(), live.begin() + live.size() / 2);
        all = true;
        for (const Buf &b : live) all &= intact(b);
        EXPECT(all, "freeing others leaves a buffer's bytes alone");
    }
    // The rest freed from four threads at once, with allocations between.
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            for (size_t i = t; i < live.size(); i += 4) {
                llaisys::host_free_weight(live[i].p);
                void *q = llaisys::host_alloc_weight(100000);
                std::memset(q, 1, 100000);
                llaisys::host_free_weight(q);
            }
        });
    }
    for (auto &th : threads) th.join();
    llaisys::host_free_weight(nullptr);
    bool threw = false;
    try {
        llaisys::host_alloc_weight(SIZE_MAX - 100);
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    EXPECT(threw, "a size that rounding would wrap is refused, not allocated small");
    return finish();
}
