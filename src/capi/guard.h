// Private to the C API: how every entry point turns an exception into a
// status and the thread-local message that tokpos_last_error() returns. Every
// file of src/capi reports through the one message.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "tokpos/error.h"
#include "tokpos/tokpos.h"

namespace tokpos::capi {

inline thread_local std::string g_last_error;

// Stores "fn: what" (or what, when it already starts with fn) as this
// thread's last error and returns status as a tokpos_status.
inline tokpos_status record(const char* fn, Status status, const char* what) noexcept {
  try {
    const std::string msg(what);
    // Module messages already start with their C++ name; add the C entry point.
    g_last_error = msg.rfind(fn, 0) == 0 ? msg : std::string(fn) + ": " + msg;
  } catch (...) {
    g_last_error.clear();  // out of memory while formatting: the status still tells
  }
  return static_cast<tokpos_status>(status);
}

// Runs body: TOKPOS_OK, or the status of what it threw, recorded.
template <typename F>
tokpos_status guard(const char* fn, F&& body) noexcept {
  try {
    body();
    return TOKPOS_OK;
  } catch (const Error& e) {
    return record(fn, e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return record(fn, Status::kOutOfMemory, "out of memory");
  } catch (const std::exception& e) {
    return record(fn, Status::kInternal, e.what());
  } catch (...) {
    return record(fn, Status::kInternal, "unknown exception");
  }
}

}  // namespace tokpos::capi
