// Host memory for large, long-lived buffers: packed weights, tensors, the KV cache.
#pragma once

#include <cstddef>

namespace llaisys {

// 64-byte aligned (a cache line, an AVX-512 register); throws std::bad_alloc. Buffers of
// 2 MiB or more start on a 2 MiB boundary and are advised for transparent huge pages: decode
// streams every weight once per step, and with 4 KiB pages each page is a TLB miss (a
// two-level walk in a VM). Where THP is off the advice does nothing; where the kernel's
// setting is "madvise" (common) it is what turns them on. Free with host_free.
void *host_alloc(size_t bytes);
void host_free(void *p);

// The same for weights, which decode streams every step: all of each buffer in huge pages.
// host_alloc leaves the last, partial 2 MiB of a buffer in small pages and a buffer under
// 2 MiB (a 1.5B's q and o projections are 1.3 MiB) all in small pages, and there the hardware
// prefetchers stop at every 4 KiB page and each page is a TLB miss: on the 2-vCPU Xeon VM
// decode of the 0.5B Q4_K_M ran 10% slower so. Buffers up to 16 MiB are laid one after
// another into shared 64 MiB slabs of huge pages (at most the last huge page of a slab is
// partly unused); larger ones get huge pages of their own, the last one whole. A slab goes
// back to the system with its last buffer. Free with host_free_weight; both are thread-safe.
void *host_alloc_weight(size_t bytes);
void host_free_weight(void *p);

}  // namespace llaisys
