// bench/peers.cc's entry points (libtokpos_peers.so): the plain llm.c-style
// loop, the gather-only line and tokpos's C functions, called and timed the
// same way. Used by bench/side_by_side.py (ctypes) and tokpos_bench.
#pragma once

#include <cstdint>

extern "C" {

// One call's buffers.
struct PeerArgs {
  float* out;          // (B, T, D)
  const int64_t* ids;  // (B, T)
  int64_t B, T, V, L, D;
  const float* wte;    // (V, D)
  const float* wpe;    // (L, D)
  float* d_wte;        // (V, D), accumulated into
  float* d_wpe;        // (L, D), accumulated into; may be null
  const float* d_out;  // (B, T, D)
  int threads;
};

enum PeerKind {
  kTokposForward = 0,
  kTokposBackward = 1,
  kLoopForward = 2,
  kLoopBackwardSerial = 3,
  kLoopBackwardSlices = 4,
  kGatherRowsNt = 5,
};

// One call of `kind`; 0 on success, else tokpos's status (-1: unknown kind).
// The loops take a->threads as num_threads; tokpos uses its own setting.
int peer_call(int kind, const PeerArgs* a);

// tokpos_set_num_threads(a->threads), one untimed call, then the median of
// `reps` timed calls in seconds; negative if a call fails.
double peer_median_seconds(int kind, const PeerArgs* a, int reps);
}
