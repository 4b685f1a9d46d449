// tokpos inspect FILE: what a safetensors or GGUF file holds (its metadata
// and its tensors' types, shapes and bytes), read and validated as the other
// commands read it, without loading any tensor's data.
#pragma once

#include <ostream>
#include <string>

namespace tokpos::app {

struct InspectCommand {
  std::string file;   // FILE.safetensors or FILE.gguf (told apart by the first bytes, else by the name)
  bool json = false;  // one JSON object instead of the table
};

// True when FILE's name ends in .gguf (any case), or when it is a regular
// file whose first four bytes are GGUF's magic (opened without blocking: a
// FIFO is not waited on).
bool is_gguf_file(const std::string& path);

// Throws tokpos::Error (a file that does not validate is Error(kCorruptFile)).
void run_inspect(const InspectCommand& command, std::ostream& out);

}  // namespace tokpos::app
