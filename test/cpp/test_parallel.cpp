// parallel_for_stealing (src/utils/parallel.hpp), tested directly: every item runs exactly
// once whatever the team, a slow thread's share is finished by the others from its back, and a
// team smaller than the shares (no owner for some) still covers every item.
#include "../../src/utils/parallel.hpp"
#include "unit.hpp"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>


// Runs the loop over n items; counts[i] how often item i ran, ran_by[i] the thread that ran it.
static void run(size_t n, std::vector<int> &counts, std::vector<int> &ran_by, int slow_thread = -1) {
    std::vector<std::atomic<int>> c(n);
    ran_by.assign(n, -1);
    llaisys::parallel_for_stealing(n, [&](size_t i) {
        const int t = omp_get_thread_num();
        if (slow_thread >= 0)  // the slow thread 10 ms an item, the others 1 ms
            std::this_thread::sleep_for(std::chrono::milliseconds(t == slow_thread ? 10 : 1));
        c[i].fetch_add(1);
        ran_by[i] = t;
    });
    counts.assign(n, 0);
    for (size_t i = 0; i < n; i++) counts[i] = c[i].load();
}

static bool all_once(const std::vector<int> &counts) {
    for (int v : counts)
        if (v != 1) return false;
    return true;
}

int main() {
    std::vector<int> counts, by;
    for (int threads : {1, 2, 3, 4, 8, 20}) {  // 20: more shares than fit on the stack
        omp_set_num_threads(threads);
        for (size_t n : {0, 1, 2, 3, 7, 64, 1000, 4099}) {
            run(n, counts, by);
            EXPECT(all_once(counts), "every item exactly once");
        }
    }

    // Thread 0 is ten times slower than thread 1: thread 1 must finish thread 0's share [0, 20)
    // from its back, so within each share the owner's items are a prefix (its stream stays
    // whole) and the thief's the rest.
    omp_set_num_threads(2);
    run(40, counts, by, 0);
    EXPECT(all_once(counts), "every item exactly once with a slow thread");
    EXPECT(by[0] == 0, "the slow thread starts on its own share");
    EXPECT(by[19] == 1, "the other thread takes the slow share's last item");
    for (size_t share = 0; share < 2; share++) {
        const int owner = int(share);
        size_t i = 20 * share;
        while (i < 20 * (share + 1) && by[i] == owner) i++;
        while (i < 20 * (share + 1) && by[i] != owner) i++;
        EXPECT(i == 20 * (share + 1), "within a share the owner's items come first, the thief's after");
    }

    // A nested region gets a team of one: that thread owns share 0 and takes the rest whole.
    omp_set_num_threads(4);
    omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
    {
        std::vector<int> c, b;
        run(100, c, b);
#pragma omp critical
        EXPECT(all_once(c), "every item exactly once from inside a parallel region");
    }
    return finish();
}
