// frontend/params.h: the parameters of the front ends, each one's rule
// defined once. The CLI's flags (--dim), python -m tokpos's options (--dim)
// and tokpos serve's query parameters (dim=) take a value as text and check
// it here, so the same bad value gets the same message everywhere:
//   dim = '0' is outside [1, 1048576]
//   dim = 'abc' is not an integer in [1, 1048576]
//   seed = '-1' is not an integer in [0, 2^64 - 1 = 18446744073709551615]
//   base = '0' must be finite and > 0
//   layout = 'foo' is not one of interleaved, halves, fairseq, t2t, ggml
// The bounds are the library's where it has one (base, the rotary dim);
// the others bound the work one command may ask for.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokpos/dtype.h"
#include "tokpos/error.h"
#include "tokpos/position_table.h"
#include "tokpos/rope.h"

namespace tokpos::frontend {

// An integer in [min, max], in decimal ("-" allowed, no "+", no spaces).
struct IntParam {
  const char* name;
  int64_t min;
  int64_t max;
};

// A real number, finite and > 0 (a sinusoidal base, a timescale, rope_theta).
struct PositiveParam {
  const char* name;
};

inline constexpr IntParam kDim{"dim", 1, int64_t{1} << 20};          // D of a table
inline constexpr IntParam kContext{"context", 1, int64_t{1} << 26};  // L, the rows of a table
inline constexpr IntParam kVocab{"vocab", 1, int64_t{1} << 24};      // V, the rows of a token table
inline constexpr IntParam kStart{"start", 0, int64_t{1} << 52};      // a table's first position
inline constexpr IntParam kPaddingIdx{"padding-idx", -1, int64_t{1} << 52};  // -1: none
inline constexpr IntParam kRelative{"relative", 0, int64_t{1} << 26};         // an offset k < L
inline constexpr IntParam kRotaryDim{"dim", 2, kRopeMaxDim};                  // RoPE's rotary dim
inline constexpr IntParam kSeqLen{"seq-len", 0, int64_t{1} << 52};
inline constexpr IntParam kPast{"past", 0, int64_t{1} << 40};
inline constexpr IntParam kPort{"port", 0, 65535};
inline constexpr IntParam kThreads{"threads", 1, 256};
// tokpos plot draws its pictures for these only.
inline constexpr IntParam kPlotDim{"dim", 2, 4096};
inline constexpr IntParam kPlotContext{"context", 2, 2048};
inline constexpr PositiveParam kBase{"base"};
inline constexpr PositiveParam kMinTimescale{"min-timescale"};
inline constexpr const char* kSeed = "seed";  // an integer in [0, 2^64)

// A bad value: Error(kInvalidArgument) whose message is the parameter's one
// message, with the parameter's name beside it.
class ParamError : public Error {
 public:
  ParamError(std::string parameter, const std::string& message)
      : Error(Status::kInvalidArgument, message), parameter_(std::move(parameter)) {}
  const std::string& parameter() const { return parameter_; }

 private:
  std::string parameter_;
};

// Each parse returns the value or throws ParamError. `name` overrides the
// rule's name in the message (a front end's spelling of the same rule).
int64_t parse(const IntParam& p, std::string_view text);
double parse(const PositiveParam& p, std::string_view text);
uint64_t parse_seed(std::string_view text, const char* name = kSeed);
Layout parse_layout_param(std::string_view text, const char* name = "layout");
DType parse_float_dtype(std::string_view text, const char* name = "dtype");
// A name from a list of choices ("sinusoidal", "learned"); returns its index.
size_t parse_choice(std::string_view text, const char* name, const std::vector<std::string>& choices);

// The message for a value already parsed (a library default, a computed
// value): the same words as parse's.
std::string out_of_range(const IntParam& p, std::string_view text);

// What each rule accepts, for help texts: "an integer in [1, 1048576]",
// "finite and > 0", "one of interleaved, halves, fairseq, t2t, ggml".
std::string describe(const IntParam& p);
std::string describe(const PositiveParam& p);
std::string describe_seed();

// The names the lists are made of, in order: layout_name over all_layouts(),
// and the float dtypes' dtype_name.
std::vector<std::string> layout_names();
std::vector<std::string> float_dtype_names();
// "a, b, c"; with sep "|": "a|b|c".
std::string join(const std::vector<std::string>& names, const char* sep = ", ");

}  // namespace tokpos::frontend
