// C handles: every handle the library gives out (tensor, packed linear, stream, event, KV cache,
// model) is an entry in one registry of live objects, checked at every entry point, in every
// build.
//
// A handle's value is not an address but a serial number: (serial << 4) | kind, serials never
// reused. So a destroyed handle stays dead even when a new object lands at the same address,
// a handle of one kind passed as another is told apart by its kind, and a random pointer
// (8- or 16-byte aligned: low bits 0 or 8, never a kind) is not a handle. Each check is one
// hash lookup under a mutex.
//
// The registry holds a shared_ptr to each object, and an entry point holds its own copy for
// the length of the call: destroying a handle while another thread is still inside a call
// that uses it frees the object when that call returns, never under it. The registry itself
// is never destroyed, so handles still alive at exit are leaked, not destroyed after the
// statics they use.
#pragma once

#include "../utils/error.hpp"

#include <cstdint>
#include <memory>

namespace llaisys::capi {

enum class HandleKind : uintptr_t { Tensor = 1, PackedLinear = 2, Stream = 3, Event = 4, KVCache = 5, Model = 6 };

// Registers `object` and returns the new handle's value.
uintptr_t handle_add(HandleKind kind, std::shared_ptr<void> object);
// The object of a live handle of `kind`; INVALID_ARGUMENT naming `what` for NULL, destroyed,
// foreign or wrong-kind values.
std::shared_ptr<void> handle_get(uintptr_t handle, HandleKind kind, const char *what);
// handle_get, and the handle is dead from now on (the object lives while copies of it do).
std::shared_ptr<void> handle_take(uintptr_t handle, HandleKind kind, const char *what);

// C handle type -> its object type and kind; one specialization per handle type, beside the
// wrappers that use it (LLAISYS_HANDLE_TYPE).
template <class H>
struct HandleType;

#define LLAISYS_HANDLE_TYPE(H, T, KIND)                                     \
    template <>                                                             \
    struct llaisys::capi::HandleType<H> {                                   \
        using Object = T;                                                   \
        static constexpr llaisys::capi::HandleKind kind = KIND;             \
    }

template <class H>
using ObjectOf = typename HandleType<H>::Object;

// A new handle for `object`.
template <class H>
H make_handle(std::shared_ptr<ObjectOf<H>> object) {
    return reinterpret_cast<H>(handle_add(HandleType<H>::kind, std::move(object)));
}

// The object behind a live handle, kept alive by the returned pointer.
template <class H>
std::shared_ptr<ObjectOf<H>> live(H h, const char *what) {
    return std::static_pointer_cast<ObjectOf<H>>(handle_get(reinterpret_cast<uintptr_t>(h), HandleType<H>::kind, what));
}

// Ends a handle: the object goes with the last copy of the returned pointer.
template <class H>
std::shared_ptr<ObjectOf<H>> take(H h, const char *what) {
    return std::static_pointer_cast<ObjectOf<H>>(handle_take(reinterpret_cast<uintptr_t>(h), HandleType<H>::kind, what));
}

}  // namespace llaisys::capi
