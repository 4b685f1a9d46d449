// tokpos serve: the JSON API. Every number comes from the library; this file
// only checks the parameters, calls it, and writes the answer.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <nlohmann/json.hpp>

#include "serve/server.h"
#include "tokpos/composer.h"
#include "tokpos/diagnostics.h"
#include "tokpos/position_table.h"
#include "tokpos/positional.h"
#include "tokpos/token_embedding.h"
#include "tokpos/tokenizer.h"

namespace tokpos::serve {
namespace {

using json = nlohmann::json;
// JSON whose floating-point numbers are float: each table value is written
// with the fewest digits that read back as exactly that float.
using float_json = nlohmann::basic_json<std::map, std::vector, std::string, bool, std::int64_t, std::uint64_t, float>;

// Bad input, answered with 400 and {"error": message, "parameter": name}.
struct BadInput {
  std::string parameter;
  std::string message;
};

[[noreturn]] void bad(std::string parameter, std::string message) {
  throw BadInput{std::move(parameter), std::move(message)};
}

// A value as it appears in a message: at most 64 bytes, then "...".
std::string shown(const std::string& s) {
  return "'" + (s.size() > 64 ? s.substr(0, 64) + "..." : s) + "'";
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The value of a parameter given at most once, or nullptr when absent.
const std::string* find(const Params& params, const char* name) {
  const auto [lo, hi] = params.equal_range(name);
  if (lo == hi) return nullptr;
  const auto count = std::distance(lo, hi);
  if (count > 1) {
    bad(name, std::string(name) + " is given " + std::to_string(count) + " times; give it once");
  }
  return &lo->second;
}

int64_t get_int(const Params& params, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const std::string* s = find(params, name);
  if (!s) return fallback;
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  int64_t v = 0;
  const char* end = s->data() + s->size();
  const auto [ptr, ec] = std::from_chars(s->data(), end, v);
  if (s->empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    bad(name, std::string(name) + " = " + shown(*s) + " is not an integer in " + range);
  }
  if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
    bad(name, std::string(name) + " = " + shown(*s) + " is outside " + range);
  }
  return v;
}

uint64_t get_seed(const Params& params) {
  const std::string* s = find(params, "seed");
  if (!s) return 0;
  uint64_t v = 0;
  const char* end = s->data() + s->size();
  const auto [ptr, ec] = std::from_chars(s->data(), end, v);
  if (s->empty() || ptr != end || ec != std::errc()) {
    bad("seed", "seed = " + shown(*s) + " is not an integer in [0, 2^64 - 1 = 18446744073709551615]");
  }
  return v;
}

double get_base(const Params& params) {
  const std::string* s = find(params, "base");
  if (!s) return 10000.0;
  double v = 0;
  const char* end = s->data() + s->size();
  const auto [ptr, ec] = std::from_chars(s->data(), end, v);
  if (s->empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    bad("base", "base = " + shown(*s) + " is not a number (it must be finite and > 1)");
  }
  if (ec == std::errc::result_out_of_range || !std::isfinite(v) || !(v > 1.0)) {
    bad("base", "base = " + shown(*s) + " must be finite and > 1");
  }
  return v;
}

Layout get_layout(const Params& params) {
  const std::string* s = find(params, "layout");
  if (!s) return Layout::kInterleaved;
  const auto layout = parse_layout(*s);
  if (!layout) bad("layout", "layout = " + shown(*s) + " is not one of interleaved, halves, fairseq, t2t, ggml");
  return *layout;
}

// true: learned positions; false: sinusoidal.
bool get_learned(const Params& params) {
  const std::string* s = find(params, "positions");
  if (!s || *s == "sinusoidal") return false;
  if (*s == "learned") return true;
  bad("positions", "positions = " + shown(*s) + " is not one of sinusoidal, learned");
}

// a*b <= cap, or 400 naming the product, its factors and the cap.
void check_cap(const char* parameter, const char* what, int64_t a, int64_t b, int64_t cap) {
  if (a > cap / b) {
    const std::string named = std::string(what).find(parameter) == std::string::npos ? std::string(parameter) + ": " : "";
    bad(parameter, named + what + " = " + std::to_string(a) + "*" + std::to_string(b) + " = " +
                       std::to_string(a * b) + " exceeds the cap of " + std::to_string(cap) + " values");
  }
}

// The parameters every table endpoint shares.
struct TableParams {
  int64_t dim = 64;
  int64_t context = 128;
  double base = 10000.0;
  Layout layout = Layout::kInterleaved;
  bool learned = false;
  uint64_t seed = 0;
};

TableParams get_table_params(const Params& params) {
  TableParams t;
  t.dim = get_int(params, "dim", 64, kMinDim, kMaxDim);
  t.context = get_int(params, "context", 128, kMinContext, kMaxContext);
  t.base = get_base(params);
  t.layout = get_layout(params);
  t.learned = get_learned(params);
  t.seed = get_seed(params);
  check_cap("context", "context*dim", t.context, t.dim, kMaxTableValues);
  return t;
}

json config_json(const TableParams& t) {
  return {{"dim", t.dim},           {"context", t.context},
          {"base", t.base},         {"layout", layout_name(t.layout)},
          {"positions", t.learned ? "learned" : "sinusoidal"}, {"seed", t.seed}};
}

std::unique_ptr<PositionalEmbedding> make_positions(const TableParams& t) {
  if (t.learned) {
    return std::make_unique<LearnedPositionalEmbedding>(
        LearnedPositionalOptions{.max_context = t.context, .dim = t.dim, .seed = t.seed});
  }
  return std::make_unique<SinusoidalPositionalEmbedding>(
      SinusoidalOptions{.max_context = t.context, .dim = t.dim, .base = t.base, .layout = t.layout});
}

// (T, D) values as T arrays of D floats.
float_json rows(const std::vector<float>& values, int64_t T, int64_t D) {
  float_json out = float_json::array();
  for (int64_t t = 0; t < T; ++t) {
    const auto first = values.begin() + t * D;
    out.push_back(float_json(std::vector<float>(first, first + D)));
  }
  return out;
}

// Two JSON objects with distinct keys as one object's text.
std::string merged(const json& a, const float_json& b) {
  std::string x = dump(a);
  const std::string y = b.dump(-1, ' ', false, float_json::error_handler_t::replace);
  if (x.size() <= 2) return y;
  if (y.size() <= 2) return x;
  x.pop_back();  // '}'
  return x + "," + y.substr(1);
}

template <class Fn>
ApiAnswer answer(Fn&& fn) {
  try {
    return {200, fn()};
  } catch (const BadInput& e) {
    return {400, dump({{"error", e.message}, {"parameter", e.parameter}})};
  }
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

ApiAnswer api_embed(const Params& params) {
  return answer([&] {
    const std::string* text = find(params, "text");
    if (!text) bad("text", "text is missing: the text to embed, up to 4096 bytes");
    if (text->size() > kMaxTextBytes) {
      bad("text", "text is " + std::to_string(text->size()) + " bytes, over the limit of " +
                      std::to_string(kMaxTextBytes) + " bytes");
    }
    const TableParams t = get_table_params(params);
    const int64_t V = get_int(params, "vocab", ByteTokenizer::kVocabSize, kMinVocab, kMaxVocab);
    check_cap("vocab", "vocab*dim", V, t.dim, kMaxTableValues);

    const std::vector<int64_t> ids = ByteTokenizer::encode(*text);
    const auto T = static_cast<int64_t>(ids.size());
    if (T > t.context) {
      bad("text", "text has " + std::to_string(T) + " tokens (one per byte), more than context = " +
                      std::to_string(t.context));
    }
    if (T > 0) check_cap("text", "tokens*dim", T, t.dim, kMaxRowValues);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= V) {
        char byte[8];
        std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>((*text)[i])));
        bad("vocab", "token id " + std::to_string(ids[i]) + " (byte " + byte + " at index " + std::to_string(i) +
                         " of text) is outside [0, vocab = " + std::to_string(V) + ")");
      }
    }

    EmbeddingComposer composer(TokenEmbedding({.vocab_size = V, .dim = t.dim, .seed = t.seed}), make_positions(t));
    const std::vector<float> token_rows = composer.token().forward(ids, 1, T);
    const std::vector<float> position_rows = composer.position().forward(T, 0);
    const std::vector<float> sum = composer.forward(ids, 1, T);

    json meta = {{"ids", ids},
                 {"shape", {1, T, t.dim}},
                 {"parameters",
                  {{"token", composer.token().num_parameters()}, {"position", composer.position().num_parameters()}}},
                 {"config", config_json(t)}};
    meta["config"]["vocab"] = V;
    float_json tables = {{"token_rows", rows(token_rows, T, t.dim)},
                         {"position_rows", rows(position_rows, T, t.dim)},
                         {"sum", rows(sum, T, t.dim)}};
    return merged(meta, tables);
  });
}

ApiAnswer api_similarity(const Params& params) {
  return answer([&] {
    const TableParams t = get_table_params(params);
    const int64_t L = t.context, D = t.dim;
    const int64_t work_limit = std::max<int64_t>(kMaxOffsetWork / (L * D) - 1, 0);  // L*D <= cap: >= 31
    const int64_t max_offset = get_int(params, "max_offset", std::min({L - 1, kDefaultMaxOffset, work_limit}), 0, L - 1);
    if (max_offset > work_limit) {
      bad("max_offset", "max_offset = " + std::to_string(max_offset) + " needs (max_offset+1)*context*dim = " +
                            std::to_string((max_offset + 1) * L * D) + ", over the cap of " +
                            std::to_string(kMaxOffsetWork) + "; the largest allowed here is " +
                            std::to_string(work_limit));
    }

    std::vector<float> table;
    if (t.learned) {
      const LearnedPositionalEmbedding learned({.max_context = L, .dim = D, .seed = t.seed});
      table.assign(learned.table().begin(), learned.table().end());
    } else {
      table = position_table(L, D, 0, TableOptions{.layout = t.layout, .base = t.base});
    }

    const std::vector<double> by_offset = cosine_by_offset(table, L, D, max_offset);
    std::vector<int64_t> offsets(by_offset.size());
    for (size_t k = 0; k < offsets.size(); ++k) offsets[k] = static_cast<int64_t>(k);

    json out = {{"config", config_json(t)},
                {"adjacent", adjacent_cosine(table, L, D)},
                {"by_offset", {{"offsets", offsets}, {"mean_cosine", by_offset}}}};
    if (L <= kMaxMatrixContext && L * L * D <= kMaxMatrixWork) {
      const std::vector<double> m = cosine_matrix(table, L, D);
      json matrix = json::array();
      for (int64_t p = 0; p < L; ++p) {
        const auto first = m.begin() + p * L;
        matrix.push_back(std::vector<double>(first, first + L));
      }
      out["matrix"] = std::move(matrix);
      out["matrix_omitted"] = nullptr;
    } else {
      out["matrix"] = nullptr;
      out["matrix_omitted"] =
          L > kMaxMatrixContext
              ? "context = " + std::to_string(L) + " is over " + std::to_string(kMaxMatrixContext) +
                    ": the L x L matrix is sent for context <= " + std::to_string(kMaxMatrixContext) + " only"
              : "context*context*dim = " + std::to_string(L) + "*" + std::to_string(L) + "*" + std::to_string(D) +
                    " = " + std::to_string(L * L * D) + " is over the cap of " + std::to_string(kMaxMatrixWork) +
                    " for the L x L matrix";
    }
    return dump(out);
  });
}

ApiAnswer api_wavelengths(const Params& params) {
  return answer([&] {
    const int64_t D = get_int(params, "dim", 64, kMinDim, kMaxDim);
    const double base = get_base(params);
    const std::vector<double> w = sinusoidal_wavelengths(D, base);
    json bands = json::array();
    for (const WavelengthBand& b : wavelength_bands(w)) {
      bands.push_back({{"lower", b.lower},
                       {"upper", b.upper},
                       {"pairs", b.pairs},
                       {"first_pair", b.first_pair},
                       {"last_pair", b.last_pair}});
    }
    return dump({{"config", {{"dim", D}, {"base", base}}}, {"wavelengths", w}, {"bands", bands}});
  });
}

}  // namespace tokpos::serve
