// Errors inside the library: throw llaisys::Error(status, message); the C ABI guard in
// src/llaisys/guard.hpp turns it into a status code and a thread-local message.
#pragma once

#include "llaisys.h"

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace llaisys {

class Error : public std::runtime_error {
public:
    Error(llaisysStatus_t status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    llaisysStatus_t status() const { return status_; }

private:
    llaisysStatus_t status_;
};

// Concatenate any streamable values into one message.
template <class... Args>
std::string str_cat(const Args &...args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

template <class... Args>
[[noreturn]] void fail(llaisysStatus_t status, const Args &...args) {
    throw Error(status, str_cat(args...));
}

}  // namespace llaisys

// User-input check: throws Error(status, message...) when `cond` is false.
#define LLAISYS_CHECK(cond, status, ...)                                                    \
    do {                                                                                    \
        if (!(cond)) ::llaisys::fail((status), __VA_ARGS__);                                \
    } while (0)

#define LLAISYS_CHECK_ARG(cond, ...) LLAISYS_CHECK(cond, LLAISYS_STATUS_INVALID_ARGUMENT, __VA_ARGS__)
