// tokpos rope: RoPE's inverse frequencies and cos/sin caches as NumPy .npy files.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace tokpos::app {

struct RopeCommand {
  int64_t dim = 0;              // rotary dimension D (even)
  double base = 10000.0;        // rope_theta
  std::string scaling;          // transformers' rope_scaling JSON; empty: default
  std::string positions;        // "A:B", the half-open range [A, B)
  int64_t seq_len = -1;         // dynamic and longrope: the current sequence length; -1: none
  std::string layout = "half";  // half|interleaved
  std::string out;              // X.npy: cos and sin; X.inv_freq.npy: inv_freq
};

// The inv_freq file that goes with --out: X.npy -> X.inv_freq.npy (any other
// name gets ".inv_freq.npy" appended).
std::string rope_inv_freq_path(const std::string& out);

// Throws tokpos::Error naming the flag, its value and the limit; prints what
// it wrote to `log`. Nothing is written unless every argument is valid.
void run_rope(const RopeCommand& command, std::ostream& log);

}  // namespace tokpos::app
