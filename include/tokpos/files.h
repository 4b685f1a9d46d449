// tokpos/files.h: replacing a file atomically, as the .npy and .safetensors
// writers do, for programs that write their own files next to tokpos's.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "tokpos/export.h"

namespace tokpos {

// Writes `bytes` to a temporary file beside `path`, fsyncs it and renames it
// over `path`, so readers see either the old file or the whole new one. On any
// failure the temporary file is removed, `path` is untouched, and
// Error(kIoError) names the path and the OS error (errno's text), prefixed by
// `where` (the caller, for the message).
TOKPOS_API void write_file_atomically(const std::string& path, std::span<const std::byte> bytes,
                                      const char* where = "tokpos::write_file_atomically");

}  // namespace tokpos
