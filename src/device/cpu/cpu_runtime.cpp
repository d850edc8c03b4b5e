// CPU backend of the device runtime. Streams execute in order on the calling thread, so a
// queued copy completes before memcpy_async returns; events record the host steady clock.
#include "../runtime_api.hpp"

#include "../../utils/checked.hpp"
#include "../../utils/error.hpp"
#include "../../utils/host_alloc.hpp"

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

namespace llaisys::device::cpu {
namespace {

constexpr size_t kAlignment = 64;  // one cache line, and an AVX-512 register

struct Stream {
    int unused = 0;
};

struct Event {
    bool recorded = false;
    std::chrono::steady_clock::time_point when;
};

class CpuRuntime final : public Runtime {
public:
    int device_count() override { return 1; }
    void set_device(int) override {}
    void synchronize(int) override {}

    void mem_info(int, size_t *free, size_t *total) override {
        // /proc/meminfo is in KiB; MemAvailable counts reclaimable page cache as free
        size_t avail_kib = 0, total_kib = 0;
        std::ifstream in("/proc/meminfo");
        std::string key;
        size_t value = 0;
        std::string unit;
        while (in >> key >> value) {
            if (key == "MemTotal:") total_kib = value;
            if (key == "MemAvailable:") avail_kib = value;
            std::getline(in, unit);
        }
        LLAISYS_CHECK(total_kib > 0, LLAISYS_STATUS_DEVICE_ERROR, "cannot read MemTotal from /proc/meminfo");
        *free = avail_kib * 1024;
        *total = total_kib * 1024;
    }

    void *malloc(int, llaisysMemoryKind_t, size_t size) override {
        return host_alloc(checked_round_up(size, kAlignment, "allocation size", LLAISYS_STATUS_OUT_OF_MEMORY));
    }
    void free(int, llaisysMemoryKind_t, void *ptr) override { host_free(ptr); }

    void memcpy(int, void *dst, const void *src, size_t size, llaisysMemcpyKind_t) override {
        if (size) std::memcpy(dst, src, size);
    }
    void memcpy_async(int id, void *dst, const void *src, size_t size, llaisysMemcpyKind_t kind,
                      void *) override {
        memcpy(id, dst, src, size, kind);
    }

    void *stream_create(int) override { return new Stream(); }
    void stream_destroy(int, void *stream) override { delete static_cast<Stream *>(stream); }
    void stream_synchronize(int, void *) override {}

    void *event_create(int) override { return new Event(); }
    void event_destroy(int, void *event) override { delete static_cast<Event *>(event); }
    void event_record(int, void *event, void *) override {
        auto *e = static_cast<Event *>(event);
        e->recorded = true;
        e->when = std::chrono::steady_clock::now();
    }
    bool event_query(int, void *event) override {
        LLAISYS_CHECK_ARG(static_cast<Event *>(event)->recorded, "event was never recorded");
        return true;
    }
    void event_synchronize(int id, void *event) override { event_query(id, event); }
    float event_elapsed_ms(int, void *start, void *end) override {
        auto *a = static_cast<Event *>(start);
        auto *b = static_cast<Event *>(end);
        LLAISYS_CHECK_ARG(a->recorded && b->recorded, "both events must be recorded before timing them");
        return std::chrono::duration<float, std::milli>(b->when - a->when).count();
    }
};

}  // namespace

Runtime &runtime() {
    static CpuRuntime rt;
    return rt;
}

}  // namespace llaisys::device::cpu
