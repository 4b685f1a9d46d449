#include "frontend/demo_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

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

struct Variant {
  const char* name;
  EmbeddingComposer composer;
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

void run_demo(const DemoOptions& o, std::ostream& out, const DemoProgress& progress) {
  const std::vector<int64_t> ids = ByteTokenizer::encode(o.text);
  const int64_t B = 1, T = static_cast<int64_t>(ids.size()), D = o.dim, L = o.max_context;

  const TokenEmbeddingOptions token_options{.vocab_size = o.vocab_size, .dim = D, .seed = o.seed};
  std::vector<Variant> variants;
  variants.push_back({"learned",
                      EmbeddingComposer(TokenEmbedding(token_options),
                                        std::make_unique<LearnedPositionalEmbedding>(LearnedPositionalOptions{
                                            .max_context = L, .dim = D, .seed = o.seed})),
                      {},
                      {},
                      {}});
  variants.push_back({"sinusoidal",
                      EmbeddingComposer(TokenEmbedding(token_options),
                                        std::make_unique<SinusoidalPositionalEmbedding>(
                                            SinusoidalOptions{.max_context = L, .dim = D, .base = o.base})),
                      {},
                      {},
                      {}});
  std::vector<float> output;
  std::vector<int64_t> fit_offsets;
  for (int64_t k : {int64_t{1}, std::min<int64_t>(8, L - 1)}) {
    if (k >= 1 && k < L && (fit_offsets.empty() || fit_offsets.back() != k)) fit_offsets.push_back(k);
  }
  const int total = static_cast<int>(variants.size() * (3 + fit_offsets.size()));
  int done = 0;
  auto step = [&](const std::string& label) {
    if (progress) progress(done, total, label);
    ++done;
  };
  for (auto& v : variants) {
    const std::string name = v.name;
    step(name + " forward");
    output = v.composer.forward(ids, B, T);  // checks ids < V and T <= L; throws with the values
    step(name + " adjacent cosine");
    v.adjacent = adjacent_cosine(v.composer.position().table(), L, D);
    step(name + " cosine by offset");
    v.by_offset = cosine_by_offset(v.composer.position().table(), L, D, std::min<int64_t>(L - 1, 64));
    for (int64_t k : fit_offsets) {
      step(name + " relative fit k = " + std::to_string(k));
      v.fits.push_back(relative_position_fit(v.composer.position().table(), L, D, k));
    }
  }
  if (progress) progress(total, total, {});
  const auto wavelengths = sinusoidal_wavelengths(D, o.base);
  const auto bands = wavelength_bands(wavelengths);
  const int64_t tok_params = variants[0].composer.token().num_parameters();

  if (o.json) {
    nlohmann::json j;
    j["config"] = {
        {"vocab_size", o.vocab_size}, {"dim", D}, {"max_context", L}, {"seed", o.seed}, {"base", o.base}};
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
    j["parameters"] = {{"token", tok_params},
                       {"learned_position", variants[0].composer.position().num_parameters()},
                       {"sinusoidal_position", variants[1].composer.position().num_parameters()},
                       {"total_learned", variants[0].composer.num_parameters()},
                       {"total_sinusoidal", variants[1].composer.num_parameters()}};
    for (const auto& v : variants) {
      const auto s = summarize(v.adjacent);
      j["adjacent_cosine"][v.name] = v.adjacent;
      j["adjacent_cosine_summary"][v.name] = {
          {"mean", s.mean}, {"std", s.stddev}, {"min", s.min}, {"max", s.max}};
      j["cosine_by_offset"][v.name] = v.by_offset;
    }
    for (const auto& v : variants) {
      for (const auto& fit : v.fits) {
        const int64_t k = fit.offset;
        j["relative_position_fit"][v.name].push_back(
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

  out << "tokpos demo: token ids -> token rows + position rows -> the (B, T, D) input to attention\n\n";
  out << "text     \"" << escape_text(o.text) << "\"  (" << T << " bytes)\n";
  out << "ids      " << list(ids, 24) << "   byte tokenizer: id = byte + 4\n";
  out << "shapes   ids (B, T) = (" << B << ", " << T << ")  ->  output (B, T, D) = (" << B << ", " << T
      << ", " << D << ")\n";
  if (T > 0) {
    out << "output   out[0, 0, :4] = token[" << ids[0] << "] + sinusoidal position[0] =";
    for (int64_t d = 0; d < std::min<int64_t>(4, D); ++d) out << fmt(" %+.4f", output[d]);
    out << "\n";
  }

  out << "\nparameters (V = " << o.vocab_size << ", D = " << D << ", L = " << L << ")\n";
  out << "                       token table   position table        total\n";
  for (const auto& v : variants) {
    const int64_t p = v.composer.position().num_parameters();
    char line[160];
    std::snprintf(line, sizeof line, "  %-22s %11s %16s %12s\n", (std::string(v.name) + " positions").c_str(),
                  grouped(tok_params).c_str(), grouped(p).c_str(), grouped(tok_params + p).c_str());
    out << line;
  }

  out << "\nadjacent-position cosine similarity cos(P[p], P[p+1]), all L-1 = " << L - 1 << " pairs\n";
  out << "               first values                                     mean     std     min     max\n";
  for (const auto& v : variants) {
    const auto s = summarize(v.adjacent);
    char line[256];
    std::snprintf(line, sizeof line, "  %-11s  %-48s %+.3f  %.3f  %+.3f  %+.3f\n", v.name,
                  first_values(v.adjacent, 8).c_str(), s.mean, s.stddev, s.min, s.max);
    out << line;
  }
  std::vector<int64_t> offsets;
  for (int64_t k : {1, 2, 4, 8, 16, 32}) {
    if (k < static_cast<int64_t>(variants[0].by_offset.size())) offsets.push_back(k);
  }
  out << "  cosine by offset k (mean over p), k = ";
  for (size_t i = 0; i < offsets.size(); ++i) out << (i ? ", " : "") << offsets[i];
  out << ":\n";
  for (const auto& v : variants) {
    char name[32];
    std::snprintf(name, sizeof name, "  %-13s", v.name);
    out << name;
    for (int64_t k : offsets) out << fmt(" %+.3f", v.by_offset[static_cast<size_t>(k)]);
    out << "\n";
  }

  if (L > 1) {
    const int64_t k = std::min<int64_t>(8, L - 1);
    out << "  relative-position fit PE(p+k) = R_k PE(p), R_k one 2x2 rotation per sin/cos pair (largest "
           "residual):\n";
    for (const auto& v : variants) {
      const auto& f1 = v.fits.front();
      const auto& fk = v.fits.back();
      char line[200];
      std::snprintf(line, sizeof line,
                    "  %-13s k = 1: %.2g (%.2g of the largest entry)   k = %lld: %.2g (%.2g)\n", v.name,
                    f1.max_residual, f1.relative, static_cast<long long>(k), fk.max_residual, fk.relative);
      out << line;
    }
  }

  const int64_t pairs = static_cast<int64_t>(wavelengths.size());
  out << "\nsinusoidal wavelength bands (D = " << D << ", base = " << fmt("%g", o.base) << ": " << pairs
      << " sin/cos pairs)\n";
  out << "  pair k repeats every 2*pi*base^(2k/D) positions; neighbouring pairs differ by x"
      << fmt("%.3f", std::pow(o.base, 2.0 / static_cast<double>(D))) << "\n";
  for (const auto& b : bands) {
    char line[200];
    std::snprintf(line, sizeof line, "  [%8s, %8s)  pairs %3lld..%-3lld %-34s %lld\n",
                  grouped(static_cast<int64_t>(b.lower)).c_str(),
                  grouped(static_cast<int64_t>(b.upper)).c_str(), static_cast<long long>(b.first_pair),
                  static_cast<long long>(b.last_pair),
                  std::string(static_cast<size_t>(std::min<int64_t>(b.pairs, 34)), '#').c_str(),
                  static_cast<long long>(b.pairs));
    out << line;
  }
  // base > 1: the wavelengths grow with the pair; base < 1: they shrink.
  const auto [shortest, longest] = std::minmax_element(wavelengths.begin(), wavelengths.end());
  out << "  shortest " << fmt("%.2f", *shortest) << ", longest " << fmt("%.0f", *longest) << " positions\n";

  out << "\nwhat to look at: the sinusoidal rows change smoothly (neighbours ~"
      << fmt("%.2f", summarize(variants[1].adjacent).mean)
      << ") while the fresh learned rows are near-random (~"
      << fmt("%.2f", summarize(variants[0].adjacent).mean) << "); rerun with --dim "
      << std::max<int64_t>(1, D / 2) << " to see fewer pairs spread over the same range of wavelengths.\n";
}

}  // namespace tokpos::frontend
