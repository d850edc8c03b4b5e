#include "host_alloc.hpp"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
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

constexpr size_t kSlab = size_t(64) << 20;  // 32 huge pages, reserved; only the ones written are backed

size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// The slabs of host_alloc_weight: base address -> buffers still in it; `open` is the one being
// filled (nullptr: none), `used` its bytes handed out.
struct Slabs {
    std::mutex mutex;
    std::map<uintptr_t, size_t> live;
    std::byte *open = nullptr;
    size_t used = 0;
};

Slabs &slabs() {
    static Slabs *s = new Slabs;  // never destroyed: weights may be freed by static destructors
    return *s;
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

void *host_alloc_weight(size_t bytes) {
#ifdef __SANITIZE_ADDRESS__
    return host_alloc(bytes);  // each buffer its own, inside AddressSanitizer's redzones
#endif
    if (!huge_pages_wanted()) return host_alloc(bytes);
    if (bytes > SIZE_MAX - kHuge) throw std::bad_alloc();  // (the rounding below would wrap)
    bytes = round_up(bytes ? bytes : 1, kLine);
    if (bytes > kSlab / 4) return host_alloc(round_up(bytes, kHuge));  // its own huge pages, the last one whole
    Slabs &s = slabs();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.open || s.used + bytes > kSlab) {
        s.open = static_cast<std::byte *>(host_alloc(kSlab));  // 2 MiB aligned, advised for huge pages
        s.used = 0;
    }
    std::byte *p = s.open + s.used;
    s.used += bytes;
    s.live[reinterpret_cast<uintptr_t>(s.open)]++;  // (a new slab's entry starts at 0)
    return p;
}

void host_free_weight(void *p) {
    if (!p) return;
    Slabs &s = slabs();
    std::unique_lock<std::mutex> lock(s.mutex);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = s.live.upper_bound(a);  // the slab holding p, if any, is the one before
    if (it == s.live.begin() || a >= std::prev(it)->first + kSlab) {
        lock.unlock();
        host_free(p);  // a buffer of its own
        return;
    }
    --it;
    if (--it->second > 0) return;
    auto *base = reinterpret_cast<std::byte *>(it->first);
    s.live.erase(it);
    if (base == s.open) s.open = nullptr;
    lock.unlock();
    host_free(base);
}

}  // namespace llaisys
