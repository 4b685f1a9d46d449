#include "table.h"

#include <cstdio>
#include <cstring>
#include <new>
#include <span>
#include <vector>

#include "frontend/params.h"
#include "progress.h"

#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/npy.h"
#include "tokpos/position_table.h"

namespace tokpos::app {

void run_table(const TableCommand& c, std::ostream& log) {
  // The flags' rules (the command line has checked them already).
  const Layout layout = frontend::parse_layout_param(c.layout);
  const DType dtype = frontend::parse_float_dtype(c.dtype);
  if (layout != Layout::kFairseq && c.padding_idx >= 0) {
    throw Error(Status::kInvalidArgument,
                "tokpos table: --padding-idx belongs to the fairseq layout, not " + c.layout);
  }
  const TableOptions options{
      .layout = layout,
      .base = c.base,
      .min_timescale = c.min_timescale,
      .padding_idx = c.padding_idx >= 0 ? std::optional<int64_t>(c.padding_idx) : std::nullopt};
  const int64_t L = c.context, D = c.dim;
  // Everything is checked and computed before the file is written: a failed
  // command leaves the previous file as it was.
  if (c.relative > 0 && dtype != DType::kF32) {
    throw Error(Status::kInvalidArgument,
                "tokpos table: --relative reports the fit of the f32 table; it needs --dtype f32, not " + c.dtype);
  }
  if (c.relative >= L) {
    throw Error(Status::kInvalidArgument, "tokpos table: --relative " + std::to_string(c.relative) +
                                              " must be < --context " + std::to_string(L) +
                                              " (the fit pairs rows p and p + K)");
  }
  const size_t n_bytes = static_cast<size_t>(L) * static_cast<size_t>(D) * dtype_size(dtype);
  std::vector<float> storage;  // float elements, so the f32 table is read as floats without a copy
  try {
    storage.resize((n_bytes + sizeof(float) - 1) / sizeof(float));
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory, "tokpos table: cannot allocate the (" + std::to_string(L) + ", " +
                                          std::to_string(D) + ") " + c.dtype + " table: " +
                                          std::to_string(n_bytes) + " bytes");
  }
  void* bytes = storage.data();
  position_table(bytes, dtype, L, D, c.start, options);  // validates L, D, start, base
  std::optional<RelativeFit> fit;
  if (c.relative > 0) fit = relative_position_fit(std::span<const float>(storage.data(), storage.size()), L, D, c.relative, layout);
  const char* descr = dtype == DType::kF32 ? "<f4" : dtype == DType::kF16 ? "<f2" : "<u2";
  {
    plot::DeferSignals defer;  // an interrupt waits for the (atomic) write: no temporary file is left
    write_npy(c.out, descr, {L, D}, bytes, n_bytes);
  }

  char line[256];
  std::snprintf(line, sizeof line, "wrote %s: (%lld, %lld) %s, %s layout, positions %lld..%lld, base %g\n",
                c.out.c_str(), static_cast<long long>(L), static_cast<long long>(D), c.dtype.c_str(),
                layout_name(layout), static_cast<long long>(c.start),
                static_cast<long long>(c.start + L - 1), c.base);
  log << line;
  if (dtype == DType::kBF16) log << "  bf16 is stored as its uint16 bits (numpy has no bfloat16)\n";
  if (dtype == DType::kF32) {
    log << "  row 0 (position " << c.start << "):";
    for (int64_t i = 0; i < std::min<int64_t>(D, 6); ++i) {
      std::snprintf(line, sizeof line, " %+.8f", static_cast<double>(storage[static_cast<size_t>(i)]));
      log << line;
    }
    log << (D > 6 ? " ...\n" : "\n");
    if (fit) {
      std::snprintf(
          line, sizeof line,
          "  relative-position fit PE(p+%lld) = R PE(p) over %lld pairs: max residual %.3g (%.3g of the "
          "largest entry)\n",
          static_cast<long long>(c.relative), static_cast<long long>(fit->pairs), fit->max_residual,
          fit->relative);
      log << line;
    }
  }
}

}  // namespace tokpos::app
