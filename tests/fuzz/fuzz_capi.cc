// Random calls into the C API with random sizes, ids and NULLs. Buffers are
// always as large as the sizes claim (claiming more than you pass is a caller
// bug no library can catch), or NULL, or the sizes overflow. On any failure
// the output must be untouched; any crash, leak or UB is a finding.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tokpos/tokpos.h"

namespace {

constexpr float kSentinel = -12345.0f;

int64_t size_in(FuzzedDataProvider& f, int64_t max) {
  switch (f.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: return -f.ConsumeIntegralInRange<int64_t>(1, 5);       // negative
    case 1: return 0;
    case 2: return int64_t{1} << f.ConsumeIntegralInRange<int>(40, 62);  // overflows in a product
    default: return f.ConsumeIntegralInRange<int64_t>(1, max);
  }
}

bool fits(int64_t a, int64_t b, int64_t limit) { return a > 0 && b > 0 && a <= limit / b; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider f(data, size);
  const int64_t B = size_in(f, 4), T = size_in(f, 16), V = size_in(f, 64), L = size_in(f, 32), D = size_in(f, 24);
  const bool null_ids = f.ConsumeBool(), null_out = f.ConsumeBool(), null_tables = f.ConsumeProbability<float>() < 0.1f;
  // Real buffers only when every claimed size is small and positive.
  const bool real = fits(B, T, 1 << 10) && fits(V, D, 1 << 12) && fits(L, D, 1 << 12) && fits(B * T, D, 1 << 14);
  std::vector<int64_t> ids(real ? static_cast<size_t>(B * T) : 1);
  for (auto& id : ids) id = f.ConsumeIntegralInRange<int64_t>(-3, real ? V + 3 : 3);
  std::vector<float> tok(real ? static_cast<size_t>(V * D) : 1, 0.5f), pos(real ? static_cast<size_t>(L * D) : 1, 0.25f);
  std::vector<float> out(real ? static_cast<size_t>(B * T * D) : 1, kSentinel);
  std::vector<float> g_tok(tok.size(), kSentinel), g_pos(pos.size(), kSentinel);
  const int64_t* ids_p = null_ids ? nullptr : ids.data();
  float* out_p = null_out ? nullptr : out.data();
  const float* tok_p = null_tables ? nullptr : tok.data();
  // Without real buffers, only NULL pointers may be passed with large sizes.
  if (!real && (ids_p || out_p)) {
    ids_p = nullptr;
    out_p = nullptr;
  }
  auto untouched = [](const std::vector<float>& v) {
    for (float x : v)
      if (x != kSentinel) return false;
    return true;
  };
  tokpos_status st = TOKPOS_OK;
  switch (f.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      st = tokpos_compose_forward(out_p, ids_p, B, T, real ? tok_p : nullptr, V, real ? pos.data() : nullptr, L, D);
      if (st != TOKPOS_OK && !untouched(out)) __builtin_trap();
      break;
    case 1:
      st = tokpos_compose_backward(real ? g_tok.data() : nullptr, real && f.ConsumeBool() ? g_pos.data() : nullptr,
                                   real ? out.data() : nullptr, ids_p, B, T, V, L, D);
      if (st != TOKPOS_OK && (!untouched(g_tok) || !untouched(g_pos))) __builtin_trap();
      break;
    case 2: {
      const int64_t n = real ? B * T : 0;
      st = tokpos_embedding_forward(ids_p, n, real ? tok_p : nullptr, V, D, f.ConsumeIntegralInRange<int64_t>(-2, 70),
                                    out_p);
      if (st != TOKPOS_OK && !untouched(out)) __builtin_trap();
      break;
    }
    case 3:
      st = tokpos_sinusoidal_table(real ? out.data() : nullptr, real ? B * T : L, real ? D : D,
                                   f.ConsumeFloatingPoint<double>());
      if (st != TOKPOS_OK && !untouched(out)) __builtin_trap();
      break;
    case 4: {
      (void)tokpos_pe_sinusoidal(f.ConsumeIntegral<int64_t>(), f.ConsumeIntegral<int64_t>(), f.ConsumeIntegral<int64_t>());
      break;
    }
    default: {
      tokpos_composer_options o = tokpos_composer_default_options(V, D, L);
      o.position = static_cast<tokpos_position_kind>(f.ConsumeIntegralInRange<int>(0, 2));
      o.id_policy = static_cast<tokpos_id_policy>(f.ConsumeIntegralInRange<int>(0, 2));
      o.unk_id = f.ConsumeIntegralInRange<int64_t>(-1, 70);
      o.padding_idx = f.ConsumeIntegralInRange<int64_t>(-2, 70);
      tokpos_composer* c = nullptr;
      if (real && tokpos_composer_create(&c, &o) == TOKPOS_OK) {
        st = tokpos_composer_forward(c, ids_p, B, T, f.ConsumeIntegralInRange<int64_t>(-1, 40), nullptr, out_p);
        if (st != TOKPOS_OK && !untouched(out)) __builtin_trap();
        int64_t touched = 0;
        (void)tokpos_composer_backward(c, out.data(), ids_p, B, T, 0, nullptr, &touched);
        tokpos_composer_free(c);
      }
      break;
    }
  }
  if (st != TOKPOS_OK && tokpos_last_error()[0] == '\0') __builtin_trap();  // every failure explains itself
  return 0;
}
