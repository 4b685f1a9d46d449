#include "rope_cmd.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "progress.h"

#include "tokpos/error.h"
#include "tokpos/files.h"
#include "tokpos/npy.h"
#include "tokpos/ops.h"
#include "tokpos/rope.h"

namespace tokpos::app {
namespace {

constexpr int64_t kMaxPosition = int64_t{1} << 31;  // positions lie in [0, 2^31), as apply_rope's
constexpr int64_t kMaxElements = int64_t{1} << 27;  // T * D per cache: 512 MiB of float32 each

[[noreturn]] void fail(const std::string& message) {
  throw Error(Status::kInvalidArgument, "tokpos rope: " + message);
}

// A decimal integer with nothing around it, or nullopt.
std::optional<int64_t> parse_int(std::string_view s) {
  if (s.empty() || s.find_first_not_of("0123456789-") != std::string_view::npos) return std::nullopt;
  const std::string copy(s);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(copy.c_str(), &end, 10);
  if (errno == ERANGE || end != copy.c_str() + copy.size()) return std::nullopt;
  return static_cast<int64_t>(v);
}

struct Range {
  int64_t begin, end;
};

Range parse_positions(const std::string& s) {
  const auto colon = s.find(':');
  const auto a = colon == std::string::npos ? std::nullopt : parse_int(std::string_view(s).substr(0, colon));
  const auto b = colon == std::string::npos ? std::nullopt : parse_int(std::string_view(s).substr(colon + 1));
  if (!a || !b) fail("--positions '" + s + "' is not A:B (two integers, the half-open range [A, B))");
  if (*a < 0) fail("--positions '" + s + "': A = " + std::to_string(*a) + " must be >= 0");
  if (*b <= *a) fail("--positions '" + s + "': B = " + std::to_string(*b) + " must be > A = " + std::to_string(*a));
  if (*b > kMaxPosition) {
    fail("--positions '" + s + "': B = " + std::to_string(*b) + " must be <= 2^31 = " + std::to_string(kMaxPosition));
  }
  return {*a, *b};
}

double number(const nlohmann::json& v, const std::string& key) {
  if (!v.is_number()) fail("--scaling: '" + key + "' = " + v.dump() + " must be a number");
  return v.get<double>();
}

int64_t integer(const nlohmann::json& v, const std::string& key) {
  const double d = number(v, key);
  if (!(d == std::floor(d)) || !(std::abs(d) < 9007199254740992.0)) {
    fail("--scaling: '" + key + "' = " + v.dump() + " must be an integer below 2^53");
  }
  return static_cast<int64_t>(d);
}

std::vector<double> numbers(const nlohmann::json& v, const std::string& key) {
  if (!v.is_array()) fail("--scaling: '" + key + "' must be an array of numbers, not " + v.dump());
  std::vector<double> out;
  for (const auto& x : v) out.push_back(number(x, key + "[" + std::to_string(out.size()) + "]"));
  return out;
}

// transformers' rope_scaling dict, as it appears in config.json.
RopeScaling parse_scaling(const std::string& text) {
  RopeScaling s;
  if (text.empty()) return s;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::out_of_range& e) {  // a number beyond double's range, e.g. 1e400
    fail("--scaling '" + text + "' has a number outside double's range (every number must be finite): " + e.what());
  } catch (const nlohmann::json::exception& e) {
    fail("--scaling '" + text + "' is not JSON: " + e.what());
  }
  if (j.is_null()) return s;  // rope_scaling: null is the default
  if (!j.is_object()) fail("--scaling '" + text + "' must be a JSON object, e.g. {\"rope_type\":\"linear\",\"factor\":2}");
  std::optional<std::string> rope_type, type;
  for (const auto& [key, v] : j.items()) {
    if (key == "rope_type" || key == "type") {  // "type" is the older spelling transformers still reads
      if (!v.is_string()) fail("--scaling: '" + key + "' = " + v.dump() + " must be a string");
      (key == "rope_type" ? rope_type : type) = v.get<std::string>();
    } else if (key == "factor") {
      s.factor = number(v, key);
    } else if (key == "original_max_position_embeddings") {
      s.original_max_position_embeddings = integer(v, key);
    } else if (key == "max_position_embeddings") {
      s.max_position_embeddings = integer(v, key);
    } else if (key == "low_freq_factor") {
      s.low_freq_factor = number(v, key);
    } else if (key == "high_freq_factor") {
      s.high_freq_factor = number(v, key);
    } else if (key == "beta_fast") {
      s.beta_fast = number(v, key);
    } else if (key == "beta_slow") {
      s.beta_slow = number(v, key);
    } else if (key == "mscale") {
      s.mscale = number(v, key);
    } else if (key == "mscale_all_dim") {
      s.mscale_all_dim = number(v, key);
    } else if (key == "attention_factor") {
      s.attention_factor = number(v, key);
    } else if (key == "truncate") {
      if (!v.is_boolean()) fail("--scaling: 'truncate' = " + v.dump() + " must be true or false");
      s.truncate = v.get<bool>();
    } else if (key == "short_factor") {
      s.short_factor = numbers(v, key);
    } else if (key == "long_factor") {
      s.long_factor = numbers(v, key);
    } else if (key == "partial_rotary_factor") {
      s.partial_rotary_factor = number(v, key);
    } else {
      fail("--scaling: unknown key '" + key +
           "' (rope_type, factor, original_max_position_embeddings, max_position_embeddings, low_freq_factor, "
           "high_freq_factor, beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor, truncate, "
           "short_factor, long_factor, partial_rotary_factor)");
    }
  }
  try {  // the rule every front end shares: rope_type, else type; the two disagreeing is refused
    s.type = rope_scaling_type(rope_type, type);
  } catch (const Error& e) {
    fail("--scaling '" + text + "': " + e.what() +
         (rope_type || type ? "" : " (one of default, linear, dynamic, yarn, longrope, llama3, proportional)"));
  }
  // Only proportional reads partial_rotary_factor (its --dim is the head
  // dimension); the other types take the rotary dimension as --dim, so the
  // key would be dropped without a sign.
  if (s.partial_rotary_factor && s.type != RopeType::kProportional) {
    fail("--scaling: 'partial_rotary_factor' is read by proportional only; for " +
         std::string(rope_type_name(s.type)) +
         " give the rotary dimension int(head_dim * partial_rotary_factor) as --dim");
  }
  // transformers' dynamic scaling reads the model's max_position_embeddings;
  // a rope_scaling dict carries original_max_position_embeddings instead.
  if (s.type == RopeType::kDynamic && !s.max_position_embeddings) {
    s.max_position_embeddings = s.original_max_position_embeddings;
  }
  return s;
}

}  // namespace

std::string rope_inv_freq_path(const std::string& out) {
  const std::string_view ext = ".npy";
  if (out.size() > ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0) {
    return out.substr(0, out.size() - ext.size()) + ".inv_freq.npy";
  }
  return out + ".inv_freq.npy";
}

void run_rope(const RopeCommand& c, std::ostream& log) {
  if (c.dim < 2 || c.dim % 2 != 0 || c.dim > (int64_t{1} << 20)) {
    fail("--dim " + std::to_string(c.dim) + " must be even and in [2, 2^20]");
  }
  if (!(c.base > 0) || !std::isfinite(c.base)) fail("--base " + std::to_string(c.base) + " must be > 0 and finite");
  RopeLayout layout;
  if (c.layout == "half") {
    layout = RopeLayout::kHalf;
  } else if (c.layout == "interleaved") {
    layout = RopeLayout::kInterleaved;
  } else {
    fail("--layout '" + c.layout + "' is not half or interleaved");
  }
  if (c.seq_len < -1) fail("--seq-len " + std::to_string(c.seq_len) + " must be >= 0");
  if (c.out.empty()) fail("--out is empty; it names the .npy file of cos and sin");
  const Range range = parse_positions(c.positions);
  const int64_t T = range.end - range.begin, D = c.dim;
  if (T > kMaxElements / D) {
    fail("--positions '" + c.positions + "' gives " + std::to_string(T) + " rows of --dim " + std::to_string(D) +
         ": " + std::to_string(T) + " x " + std::to_string(D) + " exceeds the limit of 2^27 = " +
         std::to_string(kMaxElements) + " values per cache");
  }
  const RopeScaling scaling = parse_scaling(c.scaling);
  RopeFrequencies f;
  try {
    f = rope_frequencies(D, c.base, scaling, c.seq_len >= 0 ? std::optional<int64_t>(c.seq_len) : std::nullopt);
  } catch (const Error& e) {
    fail(std::string("--scaling '") + c.scaling + "' with --dim " + std::to_string(D) + ": " + e.what());
  }

  // cos and sin are the library's own (ops::apply_rope's exactly reduced
  // angles, within 2^-24, times the attention factor): the pair (1, 0)
  // rotates into (cos, sin). Rows of `unit` are [1 .. 1, 0 .. 0] (half each).
  const size_t n = static_cast<size_t>(T) * static_cast<size_t>(D);
  const int64_t half = D / 2;
  std::vector<float> cache, unit, rotated;
  std::vector<int64_t> positions;
  try {
    cache.resize(2 * n);
    unit.assign(n, 0.0f);
    rotated.resize(n);
    positions.resize(static_cast<size_t>(T));
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory, "tokpos rope: cannot allocate the (2, " + std::to_string(T) + ", " +
                                          std::to_string(D) + ") float32 cache: " + std::to_string(16 * n) + " bytes");
  }
  for (int64_t t = 0; t < T; ++t) {
    positions[static_cast<size_t>(t)] = range.begin + t;
    std::fill_n(unit.begin() + t * D, half, 1.0f);
  }
  {
    const TensorView x(unit.data(), DType::kF32, {T, 1, D}), out(rotated.data(), DType::kF32, {T, 1, D});
    const TensorView pos(positions.data(), DType::kI64, {T});
    RopeApplyOptions o;
    o.attention_factor = f.attention_factor;
    o.where = "tokpos rope";
    ops::apply_rope(out, x, pos, f.inv_freq, o);
  }
  for (int64_t t = 0; t < T; ++t) {
    const float* r = rotated.data() + t * D;
    float* cos_row = cache.data() + static_cast<size_t>(t * D);
    float* sin_row = cos_row + n;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = layout == RopeLayout::kHalf ? i : 2 * i, b = layout == RopeLayout::kHalf ? i + half : 2 * i + 1;
      cos_row[a] = cos_row[b] = r[i];
      sin_row[a] = sin_row[b] = r[i + half];
    }
  }
  const std::string freq_path = rope_inv_freq_path(c.out);
  // Both paths are checked before either file is written: a path that cannot
  // be written (a directory, FIFO, device, dangling link, …) leaves both as they were.
  for (const std::string* path : {&c.out, &freq_path}) check_file_writable(*path, "tokpos rope");
  {
    plot::DeferSignals defer;  // an interrupt waits for the (atomic) writes: no temporary file is left
    write_npy(c.out, "<f4", {2, T, D}, cache.data(), cache.size() * sizeof(float));
    write_npy(freq_path, "<f8", {half}, f.inv_freq.data(), f.inv_freq.size() * sizeof(double));
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "wrote %s: (2, %lld, %lld) float32, [0] = cos and [1] = sin, %s layout, positions %lld..%lld\n",
                c.out.c_str(), static_cast<long long>(T), static_cast<long long>(D), c.layout.c_str(),
                static_cast<long long>(range.begin), static_cast<long long>(range.end - 1));
  log << line;
  std::snprintf(line, sizeof line, "wrote %s: (%lld,) float64 inv_freq\n", freq_path.c_str(),
                static_cast<long long>(half));
  log << line;
  std::snprintf(line, sizeof line, "  rope_type %s, base %g, attention factor %.17g (cos and sin include it)\n",
                rope_type_name(scaling.type), c.base, f.attention_factor);
  log << line;
}

}  // namespace tokpos::app
