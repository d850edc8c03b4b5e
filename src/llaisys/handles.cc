// The registry of live C handles (handles.hpp).
#include "handles.hpp"

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace llaisys::capi {
namespace {

struct Entry {
    HandleKind kind;
    std::shared_ptr<void> object;
};

struct Registry {
    std::mutex mu;
    uintptr_t next_serial = 1;
    std::unordered_map<uintptr_t, Entry> live;  // handle value -> object
};

// Never destroyed: objects of handles still alive at exit must not be destroyed after the
// statics (the allocator's registry, the CUDA runtime) they release into.
Registry &registry() {
    static Registry *r = new Registry();
    return *r;
}

const char *kind_name(uintptr_t kind) {
    switch (kind) {
    case uintptr_t(HandleKind::Tensor): return "tensor";
    case uintptr_t(HandleKind::PackedLinear): return "packed-linear";
    case uintptr_t(HandleKind::Stream): return "stream";
    case uintptr_t(HandleKind::Event): return "event";
    case uintptr_t(HandleKind::KVCache): return "KV cache";
    case uintptr_t(HandleKind::Model): return "model";
    default: return nullptr;
    }
}

// "a" or "an" before a kind name ("an event", "a tensor").
const char *article(const char *noun) { return std::strchr("aeiou", noun[0]) ? "an" : "a"; }

constexpr uintptr_t kKindBits = 4;

// The entry of a live handle of `kind`, or throws. Caller holds r.mu.
std::unordered_map<uintptr_t, Entry>::iterator find(Registry &r, uintptr_t h, HandleKind kind, const char *what) {
    const char *want = kind_name(uintptr_t(kind));
    LLAISYS_CHECK_ARG(h != 0, what, " is NULL");
    auto it = r.live.find(h);
    if (it == r.live.end()) {
        const char *was = kind_name(h & ((uintptr_t(1) << kKindBits) - 1));
        if (was && h >> kKindBits < r.next_serial) {
            fail(LLAISYS_STATUS_INVALID_ARGUMENT, what, " is a destroyed ", was, " handle");
        }
        fail(LLAISYS_STATUS_INVALID_ARGUMENT, what, " is not ", article(want), " ", want, " handle of this library");
    }
    const char *is = kind_name(uintptr_t(it->second.kind));
    LLAISYS_CHECK_ARG(it->second.kind == kind, what, " is ", article(is), " ", is, " handle, not ", article(want), " ",
                      want, " handle");
    return it;
}

}  // namespace

uintptr_t handle_add(HandleKind kind, std::shared_ptr<void> object) {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    const uintptr_t h = r.next_serial++ << kKindBits | uintptr_t(kind);
    r.live.emplace(h, Entry{kind, std::move(object)});
    return h;
}

std::shared_ptr<void> handle_get(uintptr_t h, HandleKind kind, const char *what) {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    return find(r, h, kind, what)->second.object;
}

std::shared_ptr<void> handle_take(uintptr_t h, HandleKind kind, const char *what) {
    Registry &r = registry();
    std::shared_ptr<void> object;
    {
        std::lock_guard<std::mutex> lock(r.mu);
        auto it = find(r, h, kind, what);
        object = std::move(it->second.object);
        r.live.erase(it);
    }
    return object;  // destroyed by the caller, outside the lock
}

}  // namespace llaisys::capi
