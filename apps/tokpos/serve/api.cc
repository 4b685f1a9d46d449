// tokpos serve: the JSON API. Every number comes from the library; this file
// only checks the parameters, calls it, and writes the answer.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <memory>
#include <numbers>
#include <stdexcept>
#include <string>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <nlohmann/json.hpp>

#include "frontend/demo_report.h"
#include "frontend/params.h"
#include "frontend/trained.h"
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

// An answer's JSON text, written straight into one string. No tree of JSON
// values is built: a tree's destructor allocates (nlohmann flattens it onto
// a heap stack), so one that unwinds after an allocation failure would throw
// again and end the process. Here an allocation failure unwinds through
// strings and vectors only, and the request gets a 500.
class JsonText {
 public:
  JsonText& open_object() { return open('{'); }
  JsonText& close_object() { return close('}'); }
  JsonText& open_array() { return open('['); }
  JsonText& close_array() { return close(']'); }

  JsonText& key(std::string_view name) {
    string(name);
    out_ += ':';
    comma_ = false;
    return *this;
  }
  // Text as a JSON string; invalid UTF-8 becomes U+FFFD. A string value holds
  // no children, so its destructor does not allocate.
  JsonText& string(std::string_view s) {
    separate();
    out_ += json(s).dump(-1, ' ', false, json::error_handler_t::replace);
    return *this;
  }
  JsonText& integer(int64_t v) { return chars(v); }
  JsonText& integer(uint64_t v) { return chars(v); }
  JsonText& null() {
    separate();
    out_ += "null";
    return *this;
  }
  // The fewest digits that read back as exactly v (float: as that float).
  // An answer never holds a non-finite number: that is an internal error.
  template <class F>
  JsonText& number(F v) {
    if (!std::isfinite(v)) throw std::domain_error("a non-finite number in an answer");
    const size_t at = out_.size();
    chars(v);
    if (out_.find_first_of(".e", at) == std::string::npos) out_ += ".0";  // 1.0, not 1: still a real
    return *this;
  }
  template <class F>
  JsonText& numbers(std::span<const F> values) {
    open_array();
    for (const F v : values) number(v);
    return close_array();
  }
  JsonText& integers(std::span<const int64_t> values) {
    open_array();
    for (const int64_t v : values) integer(v);
    return close_array();
  }

  // JSON text made elsewhere (nlohmann's dump of a value read at start-up), as a value.
  JsonText& raw(std::string_view text) {
    separate();
    out_ += text;
    return *this;
  }

  std::string take() { return std::move(out_); }

 private:
  void separate() {
    if (comma_) out_ += ',';
    comma_ = true;
  }
  JsonText& open(char c) {
    separate();
    out_ += c;
    comma_ = false;
    return *this;
  }
  JsonText& close(char c) {
    out_ += c;
    comma_ = true;
    return *this;
  }
  template <class T>
  JsonText& chars(T v) {
    separate();
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
    return *this;
  }

  std::string out_;
  bool comma_ = false;
};

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

// A parameter checked by its rule (frontend/params.h), or the fallback when
// absent; a bad value is a 400 with the rule's message.
template <class Parse>
auto get(const Params& params, const char* name, Parse parse, decltype(parse(std::string())) fallback) {
  const std::string* s = find(params, name);
  if (!s) return fallback;
  try {
    return parse(*s);
  } catch (const frontend::ParamError& e) {
    bad(e.parameter(), e.what());
  }
}

int64_t get_int(const Params& params, const frontend::IntParam& p, int64_t fallback) {
  return get(params, p.name, [&p](const std::string& s) { return frontend::parse(p, s); }, fallback);
}

double get_base(const Params& params) {
  return get(params, "base", [](const std::string& s) { return frontend::parse(frontend::kBase, s); },
             frontend::DemoOptions{}.base);
}

uint64_t get_seed(const Params& params) {
  return get(params, "seed", [](const std::string& s) { return frontend::parse_seed(s); }, uint64_t{0});
}

Layout get_layout(const Params& params) {
  return get(params, "layout", [](const std::string& s) { return frontend::parse_layout_param(s); },
             Layout::kInterleaved);
}

enum class Positions { kSinusoidal, kLearned, kTrained };

Positions get_positions(const Params& params) {
  static const std::vector<std::string> kPositions = {"sinusoidal", "learned", "trained"};
  return get(params, "positions",
             [](const std::string& s) { return static_cast<Positions>(frontend::parse_choice(s, "positions", kPositions)); },
             Positions::kSinusoidal);
}

const char* positions_name(Positions p) {
  switch (p) {
    case Positions::kLearned: return "learned";
    case Positions::kTrained: return "trained";
    case Positions::kSinusoidal: break;
  }
  return "sinusoidal";
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
  int64_t dim = 0;
  int64_t context = 0;
  double base = 0;
  Layout layout = Layout::kInterleaved;
  Positions positions = Positions::kSinusoidal;
  uint64_t seed = 0;
  const frontend::TrainedPositions* trained = nullptr;  // set for positions=trained
  int64_t step = -1;  // a training run's step shown (positions=trained with a run), else -1
};

// step=N: the index of N in run->steps (absent: the last step). Without a
// run, or beside positions other than trained, step is a 400 naming it.
size_t get_step_index(const Params& params, const frontend::TrainingRun* run, bool trained_positions) {
  const std::string* given = find(params, "step");
  if (!given) return run ? run->steps.size() - 1 : 0;
  if (!run) {
    bad("step", "step = " + shown(*given) + " needs a training run: start tokpos serve with --weights RUN.safetensors");
  }
  if (!trained_positions) bad("step", "step is a step of the training run: give it with positions = 'trained' only");
  const int64_t step = get_int(params, frontend::IntParam{"step", 0, run->steps.back()}, 0);
  const auto it = std::lower_bound(run->steps.begin(), run->steps.end(), step);
  if (it == run->steps.end() || *it != step) {
    std::string list;
    const size_t S = run->steps.size();
    for (size_t i = 0; i < S; ++i) {
      if (S > 8 && i == 4) {
        list += ", ...";
        i = S - 2;
        continue;
      }
      list += (i ? ", " : "") + std::to_string(run->steps[i]);
    }
    bad("step", "step = " + std::to_string(step) + " is not a step of the training run " + run->file_name +
                    ": its " + std::to_string(S) + " snapshots are at steps " + list);
  }
  return static_cast<size_t>(it - run->steps.begin());
}

// positions=trained: the table's own L and D. dim or context given with it
// must be the table's (a mismatch is a 400 naming both).
void check_trained_shape(const Params& params, const frontend::IntParam& p, int64_t value, const char* what,
                         const frontend::TrainedPositions& trained) {
  if (!find(params, p.name)) return;
  const int64_t given = get_int(params, p, value);
  if (given != value) {
    bad(p.name, std::string(p.name) + " = " + std::to_string(given) + " does not match the trained table's " + what +
                    " = " + std::to_string(value) + " (" + trained.file_name + ", " + std::to_string(trained.max_context) +
                    " x " + std::to_string(trained.dim) + "); leave " + p.name + " out or give " +
                    std::to_string(value));
  }
}

TableParams get_table_params(const Params& params, const frontend::TrainedPositions* trained,
                             const frontend::TrainingRun* run) {
  TableParams t;
  const frontend::DemoOptions defaults;  // the page's defaults are the demo's
  t.positions = get_positions(params);
  const size_t step_index = get_step_index(params, run, t.positions == Positions::kTrained);
  if (run && t.positions == Positions::kTrained) {
    trained = &run->snapshots[step_index];
    t.step = run->steps[step_index];
  }
  if (t.positions == Positions::kTrained) {
    if (!trained) {
      bad("positions", "positions = 'trained' needs a trained table: start tokpos serve with --weights FILE "
                       "--preset gpt2|bert");
    }
    check_trained_shape(params, frontend::kDim, trained->dim, "D", *trained);
    check_trained_shape(params, frontend::kContext, trained->max_context, "L", *trained);
    t.dim = trained->dim;
    t.context = trained->max_context;
    t.trained = trained;
  } else {
    t.dim = get_int(params, frontend::kDim, defaults.dim);
    t.context = get_int(params, frontend::kContext, defaults.max_context);
  }
  t.base = get_base(params);
  t.layout = get_layout(params);
  t.seed = get_seed(params);
  return t;
}

// The "config" member: the parameters used, defaults filled in (keys sorted).
void write_config(JsonText& j, const TableParams& t, const int64_t* vocab = nullptr) {
  j.key("config").open_object();
  j.key("base").number(t.base);
  j.key("context").integer(t.context);
  j.key("dim").integer(t.dim);
  j.key("layout").string(layout_name(t.layout));
  j.key("positions").string(positions_name(t.positions));
  j.key("seed").integer(t.seed);
  if (t.step >= 0) j.key("step").integer(t.step);
  if (vocab) j.key("vocab").integer(*vocab);
  if (t.trained) j.key("weights").string(t.trained->file_name);
  j.close_object();
}

// A sinusoidal table of the parameters. Every other parameter is in bounds,
// so an invalid argument is the base: the library refuses one whose angles it
// cannot compute exactly (a base far below 1 at a long context), and that is
// a 400 naming base, with the library's message.
template <class Fn>
auto sinusoidal(Fn&& make) {
  try {
    return make();
  } catch (const Error& e) {
    if (e.status() == Status::kInvalidArgument) bad("base", e.what());
    throw;
  }
}

TableOptions table_options(const TableParams& t) { return TableOptions{.layout = t.layout, .base = t.base}; }

// The base is checked for the whole (L, D) table the parameters describe,
// whatever rows are built: the library's check at the last position, L - 1,
// on one row of D values (the angles of a row grow with its position).
void check_sinusoidal_base(const TableParams& t) {
  sinusoidal([&] { return position_table(1, t.dim, t.context - 1, table_options(t)); });
}

// Rows 0 .. rows-1 of the (L, D) position table the parameters describe,
// without building the other L - rows: a sinusoidal row depends only on its
// position; a learned table is one stream of N(0, 0.02^2) values
// (fill_normal), so its first rows*D values are its first rows; a trained
// table is in memory already.
std::unique_ptr<PositionalEmbedding> first_position_rows(const TableParams& t, int64_t rows) {
  switch (t.positions) {
    case Positions::kLearned:
      return std::make_unique<LearnedPositionalEmbedding>(
          LearnedPositionalOptions{.max_context = rows, .dim = t.dim, .seed = t.seed});
    case Positions::kTrained:
      return std::make_unique<LearnedPositionalEmbedding>(LearnedPositionalEmbedding::borrow(
          std::span<const float>(t.trained->table).first(static_cast<size_t>(rows * t.dim)),
          LearnedPositionalOptions{.max_context = rows, .dim = t.dim}));
    case Positions::kSinusoidal: break;
  }
  check_sinusoidal_base(t);
  return sinusoidal([&]() -> std::unique_ptr<PositionalEmbedding> {
    return std::make_unique<SinusoidalPositionalEmbedding>(
        SinusoidalOptions{.max_context = rows, .dim = t.dim, .base = t.base, .layout = t.layout});
  });
}

// The number of parameters of the whole (L, D) position table: L*D when
// learned or trained, 0 when sinusoidal.
int64_t position_parameters(const TableParams& t) {
  return t.positions == Positions::kSinusoidal ? 0 : t.context * t.dim;
}

// (T, D) values as T arrays of D numbers.
template <class F>
void write_rows(JsonText& j, std::span<const F> values, int64_t T, int64_t D) {
  j.open_array();
  for (int64_t t = 0; t < T; ++t) j.numbers(values.subspan(static_cast<size_t>(t * D), static_cast<size_t>(D)));
  j.close_array();
}

template <class Fn>
ApiAnswer answer(Fn&& fn) {
  try {
    return {200, fn()};
  } catch (const BadInput& e) {
    JsonText j;
    j.open_object().key("error").string(e.message).key("parameter").string(e.parameter).close_object();
    return {400, j.take()};
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

ApiAnswer api_embed(const Params& params, const frontend::TrainedPositions* trained, const frontend::TrainingRun* run) {
  return answer([&] {
    const std::string* text = find(params, "text");
    if (!text) bad("text", "text is missing: the text to embed, up to 4096 bytes");
    if (text->size() > kMaxTextBytes) {
      bad("text", "text is " + std::to_string(text->size()) + " bytes, over the limit of " +
                      std::to_string(kMaxTextBytes) + " bytes");
    }
    // No context*dim cap here: only the T position rows the answer holds are
    // computed, so the work grows with T*dim (capped below), not with L*D.
    const TableParams t = get_table_params(params, trained, run);
    const int64_t V = get_int(params, frontend::kVocab, ByteTokenizer::kVocabSize);
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

    // The tables are freed before the answer is written.
    std::vector<float> token_rows, position_rows, sum;
    int64_t token_parameters = 0;
    {
      // Positions 0 .. T-1 only (one row for an empty text: a module has at least one).
      EmbeddingComposer composer(TokenEmbedding({.vocab_size = V, .dim = t.dim, .seed = t.seed}),
                                 first_position_rows(t, std::max<int64_t>(T, 1)));
      token_rows = composer.token().forward(ids, 1, T);
      position_rows = composer.position().forward(T, 0);
      sum = composer.forward(ids, 1, T);
      token_parameters = static_cast<int64_t>(composer.token().num_parameters());
    }

    JsonText j;
    j.open_object();
    write_config(j, t, &V);
    j.key("ids").integers(ids);
    j.key("parameters").open_object();
    j.key("position").integer(position_parameters(t));
    j.key("token").integer(token_parameters);
    j.close_object();
    j.key("position_rows");
    write_rows<float>(j, position_rows, T, t.dim);
    j.key("shape").open_array().integer(int64_t{1}).integer(T).integer(t.dim).close_array();
    j.key("sum");
    write_rows<float>(j, sum, T, t.dim);
    j.key("token_rows");
    write_rows<float>(j, token_rows, T, t.dim);
    j.close_object();
    return j.take();
  });
}

ApiAnswer api_similarity(const Params& params, const frontend::TrainedPositions* trained,
                         const frontend::TrainingRun* run) {
  return answer([&] {
    const TableParams t = get_table_params(params, trained, run);
    const int64_t L = t.context, D = t.dim;
    // The diagnostics need whole rows of the table: rows 0 .. R-1, with R*D
    // within the cap (R = L unless L*D is over it; rows_omitted says so).
    const int64_t R = std::min(L, std::max<int64_t>(kMaxTableValues / D, 1));
    const std::string rows_name = R == L ? "context" : "rows";
    const int64_t work_limit = std::max<int64_t>(kMaxOffsetWork / (R * D) - 1, 0);  // R*D <= cap: >= 31
    const int64_t max_offset =
        get_int(params, frontend::IntParam{"max_offset", 0, R - 1}, std::min({R - 1, kDefaultMaxOffset, work_limit}));
    if (max_offset > work_limit) {
      bad("max_offset", "max_offset = " + std::to_string(max_offset) + " needs (max_offset+1)*" + rows_name + "*dim = " +
                            std::to_string((max_offset + 1) * R * D) + ", over the cap of " +
                            std::to_string(kMaxOffsetWork) + "; the largest allowed here is " +
                            std::to_string(work_limit));
    }

    std::vector<float> table;
    switch (t.positions) {
      case Positions::kLearned: {
        const LearnedPositionalEmbedding learned({.max_context = R, .dim = D, .seed = t.seed});
        table.assign(learned.table().begin(), learned.table().end());
        break;
      }
      case Positions::kTrained:
        table.assign(t.trained->table.begin(), t.trained->table.begin() + static_cast<std::ptrdiff_t>(R * D));
        break;
      case Positions::kSinusoidal:
        check_sinusoidal_base(t);
        table = sinusoidal([&] { return position_table(R, D, 0, table_options(t)); });
        break;
    }

    const std::vector<double> by_offset = cosine_by_offset(table, R, D, max_offset);
    std::vector<int64_t> offsets(by_offset.size());
    for (size_t k = 0; k < offsets.size(); ++k) offsets[k] = static_cast<int64_t>(k);

    const std::vector<double> adjacent = adjacent_cosine(table, R, D);
    JsonText j;
    j.open_object();
    j.key("adjacent").numbers<double>(adjacent);
    j.key("by_offset").open_object();
    j.key("mean_cosine").numbers<double>(by_offset);
    j.key("offsets").integers(offsets);
    j.close_object();
    write_config(j, t);
    // The matrix's rows are the rows used ("context" when they are all of them).
    if (R <= kMaxMatrixContext && R * R * D <= kMaxMatrixWork) {
      const std::vector<double> m = cosine_matrix(table, R, D);
      j.key("matrix");
      write_rows<double>(j, m, R, R);
      j.key("matrix_omitted").null();
    } else {
      j.key("matrix").null();
      j.key("matrix_omitted").string(
          R > kMaxMatrixContext
              ? rows_name + " = " + std::to_string(R) + " is over " + std::to_string(kMaxMatrixContext) +
                    ": the L x L matrix is sent for context <= " + std::to_string(kMaxMatrixContext) + " only"
              : rows_name + "*" + rows_name + "*dim = " + std::to_string(R) + "*" + std::to_string(R) + "*" +
                    std::to_string(D) + " = " + std::to_string(R * R * D) + " is over the cap of " +
                    std::to_string(kMaxMatrixWork) + " for the L x L matrix");
    }
    j.key("rows").integer(R);
    if (R == L) {
      j.key("rows_omitted").null();
    } else {
      j.key("rows_omitted").string("context*dim = " + std::to_string(L) + "*" + std::to_string(D) + " = " +
                                   std::to_string(L * D) + " is over the cap of " + std::to_string(kMaxTableValues) +
                                   " values: adjacent, by_offset and matrix are computed on rows 0 .. " +
                                   std::to_string(R - 1) + " of the table only");
    }
    j.close_object();
    return j.take();
  });
}

ApiAnswer api_wavelengths(const Params& params) {
  return answer([&] {
    const int64_t D = get_int(params, frontend::kDim, frontend::DemoOptions{}.dim);
    if ((D + 1) / 2 > kMaxRowValues) {
      bad("dim", "dim = " + std::to_string(D) + " has " + std::to_string((D + 1) / 2) +
                     " wavelengths, over the cap of " + std::to_string(kMaxRowValues) + " values");
    }
    const double base = get_base(params);
    const std::vector<double> w = sinusoidal_wavelengths(D, base);
    const std::vector<WavelengthBand> bands = wavelength_bands(w);
    // The longest wavelength, 2*pi*base^(2K/D) with K = ceil(D/2) - 1, and
    // the decade above it must be finite doubles: a large base with a large
    // dim overflows them (no other endpoint has a quantity that grows with base).
    const bool finite = std::all_of(w.begin(), w.end(), [](double x) { return std::isfinite(x); }) &&
                        std::all_of(bands.begin(), bands.end(), [](const WavelengthBand& b) {
                          return std::isfinite(b.lower) && std::isfinite(b.upper);
                        });
    if (!finite) {
      const int64_t K = static_cast<int64_t>(w.size()) - 1;  // >= 1 here: for K = 0 the wavelength is 2*pi
      const double limit = std::pow(1e308 / (2.0 * std::numbers::pi), static_cast<double>(D) / static_cast<double>(2 * K));
      char shown_limit[32];
      std::snprintf(shown_limit, sizeof shown_limit, "%.6g", limit);
      const std::string* given = find(params, "base");
      bad("base", "base = " + (given ? shown(*given) : std::string("10000")) + " makes the wavelength of pair " + std::to_string(K) +
                      ", 2*pi*base^(2*" + std::to_string(K) + "/" + std::to_string(D) +
                      "), or its decade's upper bound overflow a double: with dim = " + std::to_string(D) +
                      " base must be finite and at most about " + shown_limit);
    }
    JsonText j;
    j.open_object();
    j.key("bands").open_array();
    for (const WavelengthBand& b : bands) {
      j.open_object();
      j.key("first_pair").integer(b.first_pair);
      j.key("last_pair").integer(b.last_pair);
      j.key("lower").number(b.lower);
      j.key("pairs").integer(b.pairs);
      j.key("upper").number(b.upper);
      j.close_object();
    }
    j.close_array();
    j.key("config").open_object().key("base").number(base).key("dim").integer(D).close_object();
    j.key("wavelengths").numbers<double>(w);
    j.close_object();
    return j.take();
  });
}

ApiAnswer api_trained(const frontend::TrainedPositions* trained) {
  JsonText j;
  j.open_object().key("trained");
  if (trained) {
    j.open_object();
    j.key("context").integer(trained->max_context);
    j.key("dim").integer(trained->dim);
    j.key("file").string(trained->file_name);
    j.key("preset").string(trained->preset);
    j.close_object();
  } else {
    j.null();
  }
  j.close_object();
  return {200, j.take()};
}

ApiAnswer api_run(const frontend::TrainingRun* run) {
  JsonText j;
  j.open_object().key("run");
  if (!run) {
    j.null().close_object();
    return {200, j.take()};
  }
  const int64_t L = run->max_context, D = run->dim;
  std::vector<double> adjacent_mean;
  for (const auto& snap : run->snapshots) adjacent_mean.push_back(summarize(adjacent_cosine(snap.table, L, D)).mean);
  j.open_object();
  j.key("adjacent_mean").numbers<double>(adjacent_mean);
  j.key("beyond").raw(run->beyond_json);
  j.key("config").raw(run->config_json);
  j.key("context").integer(L);
  j.key("dim").integer(D);
  j.key("file").string(run->file_name);
  j.key("losses").open_object();
  j.key("heldout_learned").numbers<float>(run->loss_heldout_learned);
  j.key("heldout_sinusoidal").numbers<float>(run->loss_heldout_sinusoidal);
  j.key("train_learned").numbers<float>(run->loss_train_learned);
  j.key("train_sinusoidal").numbers<float>(run->loss_train_sinusoidal);
  j.close_object();
  j.key("sinusoidal_adjacent_mean").number(summarize(adjacent_cosine(run->sinusoidal, L, D)).mean);
  j.key("steps").integers(run->steps);
  j.close_object().close_object();
  return {200, j.take()};
}

ApiAnswer api_run_table(const Params& params, const frontend::TrainingRun* run) {
  return answer([&] {
    if (!run) bad("step", "/api/run/table needs a training run: start tokpos serve with --weights RUN.safetensors");
    const size_t i = get_step_index(params, run, true);
    const int64_t L = run->max_context, D = run->dim;
    const int64_t R = std::min(L, std::max<int64_t>(kMaxTableValues / D, 1));
    const std::span<const float> rows = std::span<const float>(run->snapshots[i].table).first(static_cast<size_t>(R * D));
    const std::vector<double> adjacent = adjacent_cosine(rows, R, D);
    JsonText j;
    j.open_object();
    j.key("adjacent").numbers<double>(adjacent);
    j.key("adjacent_mean").number(summarize(adjacent).mean);
    j.key("context").integer(L);
    j.key("dim").integer(D);
    j.key("file").string(run->file_name);
    j.key("rows").integer(R);
    if (R == L) {
      j.key("rows_omitted").null();
    } else {
      j.key("rows_omitted").string("context*dim = " + std::to_string(L) + "*" + std::to_string(D) + " = " +
                                   std::to_string(L * D) + " is over the cap of " + std::to_string(kMaxTableValues) +
                                   " values: table and adjacent hold rows 0 .. " + std::to_string(R - 1) + " only");
    }
    j.key("step").integer(run->steps[i]);
    j.key("table");
    write_rows<float>(j, rows, R, D);
    j.close_object();
    return j.take();
  });
}

}  // namespace tokpos::serve
