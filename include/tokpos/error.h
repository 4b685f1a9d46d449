// tokpos/error.h: the one error type of the C++ API.
//
// Every recoverable failure (a bad id, a position past the table, a size that
// overflows, a NULL where data was needed) is thrown as tokpos::Error. Its
// status() maps one to one onto the C API's tokpos_status, and its message
// names the function, the offending value and the limit, for example
//   EmbeddingComposer::forward: token id 50300 at (b=1, t=17) is outside [0, 50257)
// A call that throws leaves its outputs and gradients exactly as they were.
#pragma once

#include <stdexcept>
#include <string>

#include "tokpos/export.h"

namespace tokpos {

// Keep in step with tokpos_status in tokpos.h (same values).
enum class Status : int {
  kOk = 0,
  kInvalidArgument = 1,     // a size, option or argument outside its allowed range
  kNullPointer = 2,         // a required pointer was NULL
  kIdOutOfRange = 3,        // a token id outside [0, V) under the error policy
  kPositionOutOfRange = 4,  // a position past the table: T > L, or start + T > L
  kShapeMismatch = 5,       // two modules or buffers disagree on a dimension
  kSizeOverflow = 6,        // a product of sizes overflows int64 or size_t
  kOutOfMemory = 7,         // an allocation failed
  kInternal = 8,            // a bug in tokpos; please report it
  kUnimplemented = 9,       // a valid request tokpos does not support (yet): a device, a dtype
  kIoError = 10,            // open, read, write, fsync or rename failed; the message has errno's text
  kCorruptFile = 11,        // a safetensors or .npy file that is malformed
};

// Short stable name, e.g. "TOKPOS_ID_OUT_OF_RANGE".
TOKPOS_API const char* status_name(Status s) noexcept;

class TOKPOS_API Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

}  // namespace tokpos
