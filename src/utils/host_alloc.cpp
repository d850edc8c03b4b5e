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
}  // namespace

void *host_alloc(size_t bytes) {
    const size_t align = bytes >= kHuge ? kHuge : kLine;
    void *p = nullptr;
    if (posix_memalign(&p, align, bytes ? bytes : 1) != 0) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Only whole 4 KiB pages of the buffer; the last, partial 2 MiB stays in small pages.
    if (align == kHuge) madvise(p, bytes / 4096 * 4096, MADV_HUGEPAGE);  // advice: failure is harmless
#endif
    return p;
}

void host_free(void *p) { std::free(p); }

}  // namespace llaisys
