#include "frontend/demo_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "frontend/lang.h"
#include "frontend/messages.h"
#include "frontend/trained.h"
#include "tokpos/composer.h"
#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/tokenizer.h"

namespace tokpos::frontend {
namespace {

// printf into a string; the compiler checks the format against the arguments.
__attribute__((format(printf, 1, 2))) std::string fmt(const char* format, ...) {
  char buf[96];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

// 16640 -> "16,640"
std::string grouped(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string s = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

// A band's bound: a grouped whole number from 1 up ("10,000"), below 1 in %g
// ("0.001", "1e-05"), so no band of a base below 1 reads [0, 0).
std::string band_bound(double v) { return v >= 1 ? grouped(static_cast<int64_t>(v)) : fmt("%g", v); }

std::string list(const std::vector<int64_t>& v, size_t max_items) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < std::min(v.size(), max_items); ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > max_items) os << ", ... (" << v.size() - max_items << " more)";
  os << "]";
  return os.str();
}

std::string first_values(const std::vector<double>& v, size_t n) {
  std::string s;
  for (size_t i = 0; i < std::min(n, v.size()); ++i) s += fmt("%+.3f ", v[i]);
  return s;
}

// One position table of the report: a fresh learned or a sinusoidal one
// (with its composer, which runs the forward), or the file's trained table.
struct Variant {
  std::string key;  // "learned", "sinusoidal", "trained": the JSON key; the catalogue's name.<key>
  std::optional<EmbeddingComposer> composer;
  const std::vector<float>* trained = nullptr;
  std::span<const float> table() const {
    return composer ? composer->position().table() : std::span<const float>(*trained);
  }
  int64_t position_parameters() const {
    return composer ? composer->position().num_parameters() : static_cast<int64_t>(trained->size());
  }
  std::vector<double> adjacent;
  std::vector<double> by_offset;
  std::vector<RelativeFit> fits;  // k = 1, then k = min(8, L - 1) when that differs
};

std::string hex_bytes(const std::string& text) {
  std::string s;
  for (unsigned char c : text) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(c));
    s += hex;
  }
  return s;
}

std::string escape_text(const std::string& text) {
  std::string s;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') s += '\\';
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
      s += hex;
      continue;
    }
    s += static_cast<char>(c);
  }
  return s;
}

}  // namespace

namespace {

// The options that need or exclude --weights, checked before any work, with
// the flags named as both front ends spell them.
void check_weights_options(const DemoOptions& o) {
  const std::string who = "tokpos demo: ";
  if (o.weights.empty()) {
    if (!o.preset.empty()) {
      throw Error(Status::kInvalidArgument,
                  who + "--preset " + o.preset + " needs --weights FILE (the checkpoint whose position table to read)");
    }
    if (!o.map.empty()) {
      throw Error(Status::kInvalidArgument, who + "--map " + o.map.front() + " needs --weights FILE and --preset");
    }
    return;
  }
  if (o.preset.empty()) {
    throw Error(Status::kInvalidArgument, who + "--weights " + o.weights + " needs --preset gpt2|bert");
  }
  for (const auto& [given, flag, value] : {std::tuple{o.dim_given, "--dim", o.dim},
                                           std::tuple{o.context_given, "--context", o.max_context}}) {
    if (given) {
      throw Error(Status::kInvalidArgument,
                  who + flag + " " + std::to_string(value) +
                      " cannot be given with --weights: the file's position table fixes L and D; leave " + flag +
                      " out");
    }
  }
}

// The paragraph on the trained table: its numbers against the fresh learned
// and the sinusoidal table's, and which sentence each comparison picks.
void trained_summary(Lang lang, const std::string& file, const Variant& learned, const Variant& sinusoidal,
                     const Variant& trained, const std::vector<int64_t>& offsets, std::ostream& out) {
  const auto st = summarize(trained.adjacent), sl = summarize(learned.adjacent), ss = summarize(sinusoidal.adjacent);
  const bool smooth = st.mean > 0.5;
  out << "\n" << tr(lang, "trained.title", {file}) << "\n";
  if (trained.adjacent.empty()) {
    out << "  " << tr(lang, "trained.single") << "\n";
    return;
  }
  const auto lowest = std::min_element(trained.adjacent.begin(), trained.adjacent.end()) - trained.adjacent.begin();
  out << "  "
      << tr(lang, "trained.adjacent",
            {fmt("%+.3f", st.mean), fmt("%+.3f", sl.mean), fmt("%+.3f", ss.mean), std::to_string(lowest),
             std::to_string(lowest + 1), fmt("%+.3f", st.min)})
      << "\n    " << tr(lang, smooth ? "trained.adjacent.smooth" : "trained.adjacent.rough") << "\n";
  const auto& bt = trained.by_offset;
  const auto& bs = sinusoidal.by_offset;
  const int64_t max_offset = static_cast<int64_t>(bt.size()) - 1;
  if (!offsets.empty() && max_offset >= 2) {
    int64_t below = 0, rises = 0;
    for (int64_t k : offsets) below += bt[static_cast<size_t>(k)] < bs[static_cast<size_t>(k)] ? 1 : 0;
    for (int64_t k = 1; k < max_offset; ++k) rises += bt[static_cast<size_t>(k + 1)] > bt[static_cast<size_t>(k)] ? 1 : 0;
    const bool faster = 2 * below > static_cast<int64_t>(offsets.size());
    const char* verdict = faster ? (rises > 0 ? "trained.offset.faster.wavy" : "trained.offset.faster.monotone")
                                 : (rises > 0 ? "trained.offset.slower.wavy" : "trained.offset.slower.monotone");
    out << "  "
        << tr(lang, "trained.offset",
              {std::to_string(below), std::to_string(offsets.size()), std::to_string(rises),
               std::to_string(max_offset - 1), std::to_string(max_offset)})
        << "\n    " << tr(lang, verdict) << "\n";
  }
  if (trained.fits.front().pairs == 0) {
    out << "  " << tr(lang, "trained.fit.nopairs") << "\n";
    out << "  " << tr(lang, smooth ? "trained.claim.smooth.only" : "trained.claim.rough") << "\n";
    return;
  }
  // The k = 1 fit: one position to the next.
  const double rel = trained.fits.front().relative;
  out << "  "
      << tr(lang, "trained.fit",
            {std::to_string(trained.fits.front().offset), fmt("%.2g", rel),
             fmt("%.2g", sinusoidal.fits.front().relative), fmt("%.2g", learned.fits.front().relative)})
      << "\n    " << tr(lang, rel > 0.1 ? "trained.fit.none" : rel > 1e-3 ? "trained.fit.some" : "trained.fit.all")
      << "\n";
  out << "  "
      << tr(lang, !smooth ? "trained.claim.rough" : rel > 1e-3 ? "trained.claim.smooth" : "trained.claim.sinusoidal")
      << "\n";
}

}  // namespace

void run_demo(const DemoOptions& o, std::ostream& out, const DemoProgress& progress) {
  const Lang lang = o.lang.empty() ? default_lang() : parse_lang(o.lang);
  check_weights_options(o);
  const std::vector<int64_t> ids = ByteTokenizer::encode(o.text);
  const bool with_weights = !o.weights.empty();
  std::optional<TrainedPositions> file;
  if (with_weights) file = load_trained_positions(o.weights, o.preset, parse_name_map("tokpos demo", o.preset, o.map));
  const int64_t B = 1, T = static_cast<int64_t>(ids.size());
  const int64_t D = file ? file->dim : o.dim, L = file ? file->max_context : o.max_context;

  const TokenEmbeddingOptions token_options{.vocab_size = o.vocab_size, .dim = D, .seed = o.seed};
  std::vector<Variant> variants(file ? 3 : 2);
  variants[0].key = "learned";
  variants[0].composer.emplace(TokenEmbedding(token_options),
                               std::make_unique<LearnedPositionalEmbedding>(
                                   LearnedPositionalOptions{.max_context = L, .dim = D, .seed = o.seed}));
  variants[1].key = "sinusoidal";
  variants[1].composer.emplace(TokenEmbedding(token_options),
                               std::make_unique<SinusoidalPositionalEmbedding>(
                                   SinusoidalOptions{.max_context = L, .dim = D, .base = o.base}));
  if (file) {
    variants[2].key = "trained";
    variants[2].trained = &file->table;
  }
  std::vector<float> output;
  std::vector<int64_t> fit_offsets;
  for (int64_t k : {int64_t{1}, std::min<int64_t>(8, L - 1)}) {
    if (k >= 1 && k < L && (fit_offsets.empty() || fit_offsets.back() != k)) fit_offsets.push_back(k);
  }
  int total = 0;
  for (const auto& v : variants) total += static_cast<int>((v.composer ? 3 : 2) + fit_offsets.size());
  int done = 0;
  auto step = [&](const std::string& label) {
    if (progress) progress(done, total, label);
    ++done;
  };
  for (auto& v : variants) {
    const std::string name = tr(lang, "name." + v.key);
    if (v.composer) {
      step(tr(lang, "step.forward", {name}));
      output = v.composer->forward(ids, B, T);  // checks ids < V and T <= L; throws with the values
    }
    step(tr(lang, "step.adjacent", {name}));
    v.adjacent = adjacent_cosine(v.table(), L, D);
    step(tr(lang, "step.offset", {name}));
    v.by_offset = cosine_by_offset(v.table(), L, D, std::min<int64_t>(L - 1, 64));
    for (int64_t k : fit_offsets) {
      step(tr(lang, "step.fit", {name, std::to_string(k)}));
      v.fits.push_back(relative_position_fit(v.table(), L, D, k));
    }
  }
  if (progress) progress(total, total, {});
  const auto wavelengths = sinusoidal_wavelengths(D, o.base);
  const auto bands = wavelength_bands(wavelengths);
  const int64_t tok_params = variants[0].composer->token().num_parameters();

  if (o.json) {
    nlohmann::json j;
    j["config"] = {
        {"vocab_size", o.vocab_size}, {"dim", D}, {"max_context", L}, {"seed", o.seed}, {"base", o.base}};
    if (file) {
      j["weights"] = {
          {"file", file->file_name}, {"preset", file->preset}, {"max_context", file->max_context}, {"dim", file->dim}};
    }
    // JSON strings are UTF-8: a text that is not is shown with U+FFFD for each
    // bad byte, and its exact bytes are given in hex (and, as always, in ids).
    bool utf8 = true;
    try {
      (void)nlohmann::json(o.text).dump();
    } catch (const nlohmann::json::type_error&) {
      utf8 = false;
    }
    j["text_is_utf8"] = utf8;
    if (utf8) {
      j["text"] = o.text;
    } else {
      j["text"] = nlohmann::json::parse(
                      nlohmann::json(o.text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
                      .get<std::string>();
      j["text_bytes_hex"] = hex_bytes(o.text);
      j["text_note"] =
          "the text is not valid UTF-8: in \"text\" each invalid byte is replaced by U+FFFD; "
          "\"text_bytes_hex\" has the exact bytes, and ids are byte + 4";
    }
    j["ids"] = ids;
    j["shapes"] = {{"ids", {B, T}}, {"output", {B, T, D}}};
    j["parameters"] = {{"token", tok_params}};
    for (const auto& v : variants) {
      j["parameters"][v.key + "_position"] = v.position_parameters();
      j["parameters"]["total_" + v.key] = tok_params + v.position_parameters();
    }
    for (const auto& v : variants) {
      const auto s = summarize(v.adjacent);
      j["adjacent_cosine"][v.key] = v.adjacent;
      j["adjacent_cosine_summary"][v.key] = {{"mean", s.mean}, {"std", s.stddev}, {"min", s.min}, {"max", s.max}};
      j["cosine_by_offset"][v.key] = v.by_offset;
    }
    for (const auto& v : variants) {
      for (const auto& fit : v.fits) {
        const int64_t k = fit.offset;
        j["relative_position_fit"][v.key].push_back(
            {{"k", k}, {"max_residual", fit.max_residual}, {"relative", fit.relative}, {"pairs", fit.pairs}});
      }
    }
    j["wavelengths"] = wavelengths;
    for (const auto& b : bands) {
      j["wavelength_bands"].push_back({{"lower", b.lower},
                                       {"upper", b.upper},
                                       {"pairs", b.pairs},
                                       {"first_pair", b.first_pair},
                                       {"last_pair", b.last_pair}});
    }
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }

  auto label = [&](const char* key) { return pad_right(tr(lang, key), 9); };
  out << tr(lang, "title") << "\n\n";
  if (file) {
    out << label("label.weights")
        << tr(lang, "weights",
              {file->file_name, file->preset, std::to_string(file->max_context), std::to_string(file->dim)})
        << "\n";
  }
  out << label("label.text") << "\"" << escape_text(o.text) << "\"  " << tr(lang, "text.bytes", {std::to_string(T)})
      << "\n";
  out << label("label.ids") << list(ids, 24) << "   " << tr(lang, "ids.note") << "\n";
  out << label("label.shapes")
      << tr(lang, "shapes",
            {std::to_string(B), std::to_string(T), std::to_string(B), std::to_string(T), std::to_string(D)})
      << "\n";
  if (T > 0) {
    out << label("label.output") << tr(lang, "output", {std::to_string(ids[0])});
    for (int64_t d = 0; d < std::min<int64_t>(4, D); ++d) out << fmt(" %+.4f", output[d]);
    out << "\n";
  }

  out << "\n"
      << tr(lang, "params.title", {std::to_string(o.vocab_size), std::to_string(D), std::to_string(L)}) << "\n";
  out << tr(lang, "params.header") << "\n";
  for (const auto& v : variants) {
    const int64_t p = v.position_parameters();
    char line[160];
    std::snprintf(line, sizeof line, " %11s %16s %12s\n", grouped(tok_params).c_str(), grouped(p).c_str(),
                  grouped(tok_params + p).c_str());
    out << "  " << pad_right(tr(lang, ("row." + v.key).c_str()), 22) << line;
  }

  out << "\n" << tr(lang, "adjacent.title", {std::to_string(L - 1)}) << "\n";
  out << tr(lang, "adjacent.header") << "\n";
  for (const auto& v : variants) {
    const auto s = summarize(v.adjacent);
    char line[256];
    std::snprintf(line, sizeof line, "  %-48s %+.3f  %.3f  %+.3f  %+.3f\n", first_values(v.adjacent, 8).c_str(),
                  s.mean, s.stddev, s.min, s.max);
    out << "  " << pad_right(tr(lang, ("name." + v.key).c_str()), 11) << line;
  }
  std::vector<int64_t> offsets;
  for (int64_t k : {1, 2, 4, 8, 16, 32}) {
    if (k < static_cast<int64_t>(variants[0].by_offset.size())) offsets.push_back(k);
  }
  std::string offset_list;
  for (size_t i = 0; i < offsets.size(); ++i) offset_list += (i ? ", " : "") + std::to_string(offsets[i]);
  out << "  " << tr(lang, "offset.title", {offset_list}) << "\n";
  for (const auto& v : variants) {
    out << "  " << pad_right(tr(lang, ("name." + v.key).c_str()), 13);
    for (int64_t k : offsets) out << fmt(" %+.3f", v.by_offset[static_cast<size_t>(k)]);
    out << "\n";
  }

  if (L > 1) {
    const int64_t k = std::min<int64_t>(8, L - 1);
    out << "  " << tr(lang, "fit.title") << "\n";
    for (const auto& v : variants) {
      const auto& f1 = v.fits.front();
      const auto& fk = v.fits.back();
      out << "  " << pad_right(tr(lang, ("name." + v.key).c_str()), 13) << " "
          << tr(lang, "fit.line",
                {fmt("%.2g", f1.max_residual), fmt("%.2g", f1.relative), std::to_string(k),
                 fmt("%.2g", fk.max_residual), fmt("%.2g", fk.relative)})
          << "\n";
    }
  }

  const int64_t pairs = static_cast<int64_t>(wavelengths.size());
  out << "\n"
      << tr(lang, "bands.title", {std::to_string(D), fmt("%g", o.base), std::to_string(pairs)}) << "\n";
  out << "  " << tr(lang, "bands.formula", {fmt("%.3f", std::pow(o.base, 2.0 / static_cast<double>(D)))}) << "\n";
  const std::string pairs_word = pad_right(tr(lang, "bands.pairs"), 5);
  for (const auto& b : bands) {
    char line[200];
    std::snprintf(line, sizeof line, " %3lld..%-3lld %-34s %lld\n", static_cast<long long>(b.first_pair),
                  static_cast<long long>(b.last_pair),
                  std::string(static_cast<size_t>(std::min<int64_t>(b.pairs, 34)), '#').c_str(),
                  static_cast<long long>(b.pairs));
    char range[64];
    std::snprintf(range, sizeof range, "  [%8s, %8s)  ", band_bound(b.lower).c_str(), band_bound(b.upper).c_str());
    out << range << pairs_word << line;
  }
  // base > 1: the wavelengths grow with the pair; base < 1: they shrink.
  const auto [shortest, longest] = std::minmax_element(wavelengths.begin(), wavelengths.end());
  out << "  "
      << tr(lang, "bands.range",
            {*shortest >= 0.01 ? fmt("%.2f", *shortest) : fmt("%.3g", *shortest),
             *longest >= 1 ? fmt("%.0f", *longest) : fmt("%.3g", *longest)})
      << "\n";
  if (o.base < 1) out << "  " << tr(lang, "bands.below_one") << "\n";
  if (o.base == 1) out << "  " << tr(lang, "bands.one") << "\n";

  if (file) {
    trained_summary(lang, file->file_name, variants[0], variants[1], variants[2], offsets, out);
    return;
  }
  out << "\n"
      << tr(lang, "look",
            {fmt("%.2f", summarize(variants[1].adjacent).mean), fmt("%.2f", summarize(variants[0].adjacent).mean),
             std::to_string(std::max<int64_t>(1, D / 2))})
      << "\n";
}

}  // namespace tokpos::frontend
