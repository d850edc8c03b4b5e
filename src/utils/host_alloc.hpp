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

}  // namespace llaisys
