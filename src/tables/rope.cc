// RoPE inverse frequencies: transformers' ROPE_INIT_FUNCTIONS in double.
#include "tokpos/rope.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numbers>
#include <string>

#include "common/check.h"
#include "common/rope_angle.h"
#include "tokpos/error.h"

namespace tokpos {
namespace {

using detail::fail;

constexpr const char* kWhere = "rope_frequencies";
constexpr const char* kNames[] = {"default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"};
constexpr int kTypes = static_cast<int>(std::size(kNames));

[[noreturn]] void bad(const std::string& what) { fail(Status::kInvalidArgument, kWhere, what); }

// A real value that must be finite and > 0.
double positive(const char* name, double v) {
  if (!(v > 0.0) || !std::isfinite(v)) bad(detail::cat(name, " = ", v, " must be finite and > 0"));
  return v;
}

// The attention factor, given or computed: apply_rope multiplies its float32
// cos and sin by it, so it must be a nonzero finite float32.
double attention(const char* what, double v) {
  if (!detail::rope_attention_factor_ok(v)) bad(detail::cat(what, " = ", v, detail::kRopeAttentionFactorRange));
  return v;
}

template <typename T>
T need(RopeType type, const char* name, const std::optional<T>& v) {
  if (!v) bad(detail::cat(rope_type_name(type), " scaling needs '", name, "'"));
  return *v;
}

double need_positive(RopeType type, const char* name, const std::optional<double>& v) {
  return positive(name, need(type, name, v));
}

int64_t need_count(RopeType type, const char* name, const std::optional<int64_t>& v, int64_t lo = 1) {
  const int64_t n = need(type, name, v);
  if (n < lo) bad(detail::cat(name, " = ", n, " must be >= ", lo));
  return n;
}

// base^(-2i/dim), i < dim/2: the default frequencies.
std::vector<double> default_inv_freq(int64_t dim, double base) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    f[static_cast<size_t>(i)] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  return f;
}

// YaRN's get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

void check_factors(const char* name, const std::vector<double>& v, int64_t half) {
  if (static_cast<int64_t>(v.size()) != half) {
    bad(detail::cat(name, " has ", v.size(), " entries; dim / 2 = ", half, " are needed"));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] > 0.0) || !std::isfinite(v[i])) {
      bad(detail::cat(name, "[", i, "] = ", v[i], " must be finite and > 0"));
    }
  }
}

// The pretraining length: original_max_position_embeddings, or
// max_position_embeddings when the scaling lacks it (as transformers'
// standardize_rope_params fills it in).
int64_t pretrained_length(RopeType t, const RopeScaling& s) {
  if (s.original_max_position_embeddings) {
    return need_count(t, "original_max_position_embeddings", s.original_max_position_embeddings);
  }
  return need_count(t, "max_position_embeddings", s.max_position_embeddings);
}

// factor, or without it max_position_embeddings / original_max_position_embeddings
// (DeepSeek-V3's and Phi-3's configs give the two lengths).
double factor_or_ratio(RopeType t, const RopeScaling& s, int64_t original) {
  if (s.factor) return positive("factor", *s.factor);
  if (!s.max_position_embeddings || !s.original_max_position_embeddings) {
    bad(detail::cat(rope_type_name(t), " scaling needs 'factor' (or both 'max_position_embeddings' and "
                    "'original_max_position_embeddings', whose ratio it then is)"));
  }
  const int64_t extended = need_count(t, "max_position_embeddings", s.max_position_embeddings);
  return static_cast<double>(extended) / static_cast<double>(original);
}

RopeFrequencies yarn(int64_t dim, double base, const RopeScaling& s) {
  const RopeType t = RopeType::kYarn;
  const int64_t original = pretrained_length(t, s);
  const double factor = factor_or_ratio(t, s, original);
  if (base == 1.0) bad("yarn scaling needs base != 1 (its correction range divides by log(base))");
  RopeFrequencies r;
  if (s.attention_factor) {
    r.attention_factor = attention("attention_factor", *s.attention_factor);
  } else if (s.mscale.value_or(0.0) != 0.0 && s.mscale_all_dim.value_or(0.0) != 0.0) {
    r.attention_factor = attention("the attention factor get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)",
                                   yarn_mscale(factor, *s.mscale) / yarn_mscale(factor, *s.mscale_all_dim));
  } else {
    r.attention_factor = attention("the attention factor get_mscale(factor)", yarn_mscale(factor, 1.0));
  }
  // "or" semantics: 0 stands for the default, as in transformers.
  const double beta_fast = s.beta_fast.value_or(0.0) != 0.0 ? positive("beta_fast", *s.beta_fast) : 32.0;
  const double beta_slow = s.beta_slow.value_or(0.0) != 0.0 ? positive("beta_slow", *s.beta_slow) : 1.0;
  if (!(beta_fast > beta_slow)) {
    bad(detail::cat("beta_fast = ", beta_fast, " must be > beta_slow = ", beta_slow));
  }
  const double d = static_cast<double>(dim);
  auto correction_dim = [&](double rotations) {
    return d * std::log(static_cast<double>(original) / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1.0);
  if (low == high) high += 0.001;  // as transformers: no division by zero
  r.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = std::pow(base, static_cast<double>(2 * i) / d);
    const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    r.inv_freq[static_cast<size_t>(i)] =
        interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return r;
}

RopeFrequencies longrope(int64_t dim, double base, const RopeScaling& s, std::optional<int64_t> seq_len) {
  const RopeType t = RopeType::kLongrope;
  const int64_t half = dim / 2;
  if (s.short_factor.empty()) bad("longrope scaling needs 'short_factor'");
  if (s.long_factor.empty()) bad("longrope scaling needs 'long_factor'");
  check_factors("short_factor", s.short_factor, half);
  check_factors("long_factor", s.long_factor, half);
  const int64_t original = pretrained_length(t, s);
  RopeFrequencies r;
  if (s.attention_factor) {
    r.attention_factor = attention("attention_factor", *s.attention_factor);
  } else {
    const double f = factor_or_ratio(t, s, original);
    if (f > 1.0 && original < 2) {
      bad(detail::cat("original_max_position_embeddings = ", original,
                      " must be >= 2 (the attention factor divides by its log)"));
    }
    r.attention_factor = attention("the attention factor sqrt(1 + ln(factor) / ln(original_max_position_embeddings))",
                                   f <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(f) / std::log(static_cast<double>(original))));
  }
  const std::vector<double>& ext = seq_len && *seq_len > original ? s.long_factor : s.short_factor;
  r.inv_freq.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double shape = static_cast<double>(2 * i) / static_cast<double>(dim);
    r.inv_freq[static_cast<size_t>(i)] = 1.0 / (ext[static_cast<size_t>(i)] * std::pow(base, shape));
  }
  return r;
}

RopeFrequencies llama3(int64_t dim, double base, const RopeScaling& s) {
  const RopeType t = RopeType::kLlama3;
  const double factor = need_positive(t, "factor", s.factor);
  const double low_freq_factor = need_positive(t, "low_freq_factor", s.low_freq_factor);
  const double high_freq_factor = need_positive(t, "high_freq_factor", s.high_freq_factor);
  const double old_context =
      static_cast<double>(need_count(t, "original_max_position_embeddings", s.original_max_position_embeddings));
  if (!(low_freq_factor < high_freq_factor)) {
    bad(detail::cat("low_freq_factor = ", low_freq_factor, " must be < high_freq_factor = ", high_freq_factor));
  }
  const double low_freq_wavelen = old_context / low_freq_factor;
  const double high_freq_wavelen = old_context / high_freq_factor;
  RopeFrequencies r;
  r.inv_freq = default_inv_freq(dim, base);
  for (double& f : r.inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
    } else if (!(wavelen < high_freq_wavelen)) {
      const double smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = (1.0 - smooth) * f / factor + smooth * f;
    }
  }
  return r;
}

// transformers 5.x's proportional RoPE (_compute_proportional_rope_parameters):
// dim is the head dimension; its default frequencies base^(-2i/dim), the
// first int(partial_rotary_factor * dim // 2) of them divided by factor and
// the rest 0 (no rotation). The count is transformers' float64 arithmetic:
// floor(fl(partial_rotary_factor * dim) / 2).
RopeFrequencies proportional(int64_t dim, double base, const RopeScaling& s) {
  const double factor = s.factor ? positive("factor", *s.factor) : 1.0;
  double partial = 1.0;
  if (s.partial_rotary_factor) {
    partial = *s.partial_rotary_factor;
    if (!(partial > 0.0 && partial <= 1.0)) bad(detail::cat("partial_rotary_factor = ", partial, " must be in (0, 1]"));
  }
  const auto rotated = static_cast<size_t>(std::floor(partial * static_cast<double>(dim) / 2.0));
  RopeFrequencies r;
  r.inv_freq = default_inv_freq(dim, base);
  for (size_t i = 0; i < r.inv_freq.size(); ++i) r.inv_freq[i] = i < rotated ? r.inv_freq[i] / factor : 0.0;
  return r;
}

}  // namespace

const char* rope_type_name(RopeType type) noexcept {
  const int i = static_cast<int>(type);
  return i >= 0 && i < kTypes ? kNames[i] : "unknown";
}

RopeType rope_type_from_name(std::string_view name) {
  for (int i = 0; i < kTypes; ++i) {
    if (name == kNames[i]) return static_cast<RopeType>(i);
  }
  bad(detail::cat("rope type '", name,
                  "' is not one of default, linear, dynamic, yarn, longrope, llama3, proportional"));
}

RopeType rope_scaling_type(std::optional<std::string_view> rope_type, std::optional<std::string_view> type) {
  if (rope_type && type && *rope_type != *type) {
    bad(detail::cat("the scaling's 'rope_type' = '", *rope_type, "' and 'type' = '", *type,
                    "' disagree; give 'rope_type' alone (or the same type in both)"));
  }
  if (!rope_type && !type) bad("the scaling has no 'rope_type' (or 'type') key");
  return rope_type_from_name(rope_type ? *rope_type : *type);
}

RopeFrequencies rope_frequencies(int64_t dim, double base, const RopeScaling& s, std::optional<int64_t> seq_len) {
  if (dim < 2 || dim % 2 != 0) bad(detail::cat("dim = ", dim, " must be even and >= 2"));
  if (dim > kRopeMaxDim) {
    bad(detail::cat("dim = ", dim, " must be <= 2^20 = ", kRopeMaxDim, " (the largest rotary dimension)"));
  }
  positive("base", base);
  if (seq_len && *seq_len < 0) bad(detail::cat("seq_len = ", *seq_len, " must be >= 0"));
  RopeFrequencies r;
  switch (s.type) {
    case RopeType::kDefault: r.inv_freq = default_inv_freq(dim, base); break;
    case RopeType::kLinear: {
      const double factor = need_positive(s.type, "factor", s.factor);
      r.inv_freq = default_inv_freq(dim, base);
      for (double& f : r.inv_freq) f /= factor;
      break;
    }
    case RopeType::kDynamic: {
      const double factor = need_positive(s.type, "factor", s.factor);
      const int64_t max_pos = need_count(s.type, "max_position_embeddings", s.max_position_embeddings);
      if (dim < 4) bad(detail::cat("dynamic scaling needs dim >= 4 (its exponent is dim / (dim - 2)); dim = ", dim));
      const double len = static_cast<double>(seq_len && *seq_len > max_pos ? *seq_len : max_pos);
      const double d = static_cast<double>(dim);
      const double scaled =
          base * std::pow(factor * len / static_cast<double>(max_pos) - (factor - 1.0), d / (d - 2.0));
      positive("the dynamic base", scaled);
      r.inv_freq = default_inv_freq(dim, scaled);
      break;
    }
    case RopeType::kYarn: r = yarn(dim, base, s); break;
    case RopeType::kLongrope: r = longrope(dim, base, s, seq_len); break;
    case RopeType::kLlama3: r = llama3(dim, base, s); break;
    case RopeType::kProportional: r = proportional(dim, base, s); break;
    default: bad(detail::cat("rope type ", static_cast<int>(s.type), " is not one of 0..", kTypes - 1));
  }
  return r;
}

}  // namespace tokpos
