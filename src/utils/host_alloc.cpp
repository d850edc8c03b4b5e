#include "host_alloc.hpp"

#include <cstdlib>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace llaisys {

namespace {
constexpr size_t kLine = 64;
constexpr size_t kHuge = size_t(2) << 20;

// LLAISYS_HUGE_PAGES=0 leaves buffers in small pages, as most programs get them (benchmarks
// use it to compare with peers that do not ask for huge pages); read once per process.
bool huge_pages_wanted() {
    static const bool wanted = [] {
        const char *env = std::getenv("LLAISYS_HUGE_PAGES");
        return !(env && env[0] == '0' && env[1] == '\0');
    }();
    return wanted;
}
}  // namespace

void *host_alloc(size_t bytes) {
    const size_t align = bytes >= kHuge ? kHuge : kLine;
    void *p = nullptr;
    if (posix_memalign(&p, align, bytes ? bytes : 1) != 0) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Only whole 4 KiB pages of the buffer; the last, partial 2 MiB stays in small pages.
    if (align == kHuge && huge_pages_wanted()) madvise(p, bytes / 4096 * 4096, MADV_HUGEPAGE);  // advice: failure is harmless
#endif
    return p;
}

void host_free(void *p) { std::free(p); }

}  // namespace llaisys
