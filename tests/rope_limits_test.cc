// RoPE and ALiBi at their limits: sizes past the documented maxima, attention
// factors that are not finite float32 values, buffers that overlap or are
// misaligned, and DLTensors from a newer DLPack (device types 16 and 17, run
// under UBSan by make check-sanitize). Each refusal names the value and its
// limit, and writes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "expect_error.h"
#include "tokpos/error.h"
#include "tokpos/ops.h"
#include "tokpos/positions.h"
#include "tokpos/rope.h"
#include "tokpos/tokpos.h"

namespace {

using tokpos::DType;
using tokpos::RopeScaling;
using tokpos::RopeType;
using tokpos::Status;
using tokpos::TensorView;
using tokpos::testing::expect_error;

constexpr int64_t k2to62 = int64_t{1} << 62;
constexpr int64_t k2to40 = int64_t{1} << 40;

std::string last_error() { return tokpos_last_error(); }

// ---- Sizes ----------------------------------------------------------------------

TEST(RopeLimits, HugeDimIsRefusedByNameWithItsLimit) {
  for (int64_t dim : {k2to62, k2to40, (int64_t{1} << 20) + 2, std::numeric_limits<int64_t>::max() - 1}) {
    expect_error([&] { tokpos::rope_frequencies(dim, 10000.0); }, Status::kInvalidArgument,
                 {"rope_frequencies: dim = " + std::to_string(dim), "must be <= 2^20 = 1048576"});
    RopeScaling s;
    s.type = RopeType::kYarn;
    s.factor = 4.0;
    s.original_max_position_embeddings = 4096;
    expect_error([&] { tokpos::rope_frequencies(dim, 10000.0, s); }, Status::kInvalidArgument,
                 {"dim = " + std::to_string(dim), "2^20"});
  }
  // The limit itself is a valid rotary dimension.
  EXPECT_EQ(tokpos::rope_frequencies(tokpos::kRopeMaxDim, 10000.0).inv_freq.size(), size_t{1} << 19);
}

TEST(RopeLimits, HugeDimInTheCApiIsInvalidArgument) {
  double inv[4] = {7, 7, 7, 7}, factor = 7;
  EXPECT_EQ(tokpos_rope_frequencies(inv, &factor, k2to62, 10000.0, nullptr, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("dim = 4611686018427387904 must be <= 2^20"), std::string::npos) << last_error();
  EXPECT_EQ(inv[0], 7.0);
  EXPECT_EQ(factor, 7.0);
}

TEST(AlibiLimits, HugeHeadCountIsRefusedByNameWithItsLimit) {
  for (int64_t n : {k2to40, k2to62, (int64_t{1} << 20) + 1}) {
    expect_error([&] { tokpos::alibi_slopes(n, 8.0); }, Status::kInvalidArgument,
                 {"alibi_slopes: num_heads = " + std::to_string(n), "must be <= 2^20 = 1048576"});
  }
  EXPECT_EQ(tokpos::alibi_slopes(tokpos::kAlibiMaxHeads, 8.0).size(), size_t{1} << 20);
  // The C entry point writes into the caller's buffer: refused before any write.
  std::vector<double> out(4, 7.0);
  EXPECT_EQ(tokpos_alibi_slopes(out.data(), k2to40, 8.0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("num_heads = 1099511627776 must be <= 2^20"), std::string::npos) << last_error();
  EXPECT_EQ(out, std::vector<double>(4, 7.0));
}

// ---- The attention factor is used in float32 ----------------------------------

struct Rows {
  static constexpr int64_t T = 3, H = 2, D = 8;
  std::vector<float> x = std::vector<float>(T * H * D, 0.5f), out = std::vector<float>(T * H * D, -3.0f);
  std::vector<int64_t> pos = {0, 1, 2};
  std::vector<double> inv = tokpos::rope_frequencies(D, 10000.0).inv_freq;
  TensorView xv{x.data(), DType::kF32, {T, H, D}}, ov{out.data(), DType::kF32, {T, H, D}};
  TensorView pv{pos.data(), DType::kI64, {T}};
};

TEST(RopeLimits, AttentionFactorMustBeAFiniteNonzeroFloat32) {
  Rows r;
  for (double f : {1e39, 3.5e38, std::numeric_limits<double>::max(), 1e-50, 0x1p-150}) {
    tokpos::RopeApplyOptions o;
    o.attention_factor = f;
    expect_error([&] { tokpos::ops::apply_rope(r.ov, r.xv, r.pv, r.inv, o); }, Status::kInvalidArgument,
                 {"apply_rope: attention_factor = ", "in float32", "FLT_MAX = 3.4028234663852886e+38"});
    EXPECT_EQ(r.out, std::vector<float>(r.out.size(), -3.0f)) << "nothing is written for " << f;
  }
  // The ends of the float32 range are used as they are: finite cos and sin.
  for (double f : {0x1.fffffep127, 0x1p-149, 1.0}) {
    tokpos::RopeApplyOptions o;
    o.attention_factor = f;
    tokpos::ops::apply_rope(r.ov, r.xv, r.pv, r.inv, o);
    for (float v : r.out) EXPECT_TRUE(std::isfinite(v)) << "attention_factor " << f;
  }
  // And the C entry point.
  DLTensor x = r.xv, out = r.ov, pos = r.pv;
  std::fill(r.out.begin(), r.out.end(), -3.0f);
  EXPECT_EQ(tokpos_op_apply_rope(&out, &x, &pos, r.inv.data(), static_cast<int64_t>(r.inv.size()), TOKPOS_ROPE_HALF,
                                 -1, 1e39, 0),
            TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("attention_factor = 9.9999999999999994e+38 must be finite and > 0 in float32"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(r.out, std::vector<float>(r.out.size(), -3.0f));
}

TEST(RopeLimits, ScalingAttentionFactorsMustBeFiniteNonzeroFloat32s) {
  RopeScaling yarn;
  yarn.type = RopeType::kYarn;
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 4096;
  yarn.attention_factor = 1e39;
  expect_error([&] { tokpos::rope_frequencies(64, 10000.0, yarn); }, Status::kInvalidArgument,
               {"rope_frequencies: attention_factor = 9.9999999999999994e+38", "in float32", "FLT_MAX"});
  yarn.attention_factor = 1e-60;
  expect_error([&] { tokpos::rope_frequencies(64, 10000.0, yarn); }, Status::kInvalidArgument,
               {"attention_factor = 9.9999999999999997e-61", "2^-149"});
  // Computed: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
  // is finite in double but not in float32.
  yarn.attention_factor.reset();
  yarn.mscale = 1e300;
  yarn.mscale_all_dim = 1.0;
  expect_error([&] { tokpos::rope_frequencies(64, 10000.0, yarn); }, Status::kInvalidArgument,
               {"the attention factor get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) = ",
                "in float32"});
  RopeScaling longrope;
  longrope.type = RopeType::kLongrope;
  longrope.short_factor = longrope.long_factor = std::vector<double>(4, 1.0);
  longrope.original_max_position_embeddings = 64;
  longrope.attention_factor = 5e38;
  expect_error([&] { tokpos::rope_frequencies(8, 10000.0, longrope); }, Status::kInvalidArgument,
               {"attention_factor = 4.9999999999999997e+38", "in float32"});
  // The same value in the C API.
  tokpos_rope_scaling c;
  tokpos_rope_scaling_init(&c);
  c.type = TOKPOS_ROPE_YARN;
  c.factor = 4.0;
  c.original_max_position_embeddings = 4096;
  c.attention_factor = 1e39;
  double inv[32], factor = 0;
  EXPECT_EQ(tokpos_rope_frequencies(inv, &factor, 64, 10000.0, &c, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("attention_factor = 9.9999999999999994e+38"), std::string::npos) << last_error();
}

// ---- Overlap and alignment of the C API's double arrays -----------------------

TEST(RopeCApiChecks, OutOverInvFreqIsRefusedAsALiBisOutOverSlopesIs) {
  // out's float32 bytes lie over the frequencies: the call would overwrite
  // inv_freq while it reads it.
  constexpr int64_t T = 2, H = 1, D = 8;
  alignas(8) unsigned char arena[1024] = {};
  std::vector<float> x(T * H * D, 0.25f);
  std::vector<int64_t> pos = {0, 1};
  const std::vector<double> freqs = tokpos::rope_frequencies(D, 10000.0).inv_freq;
  double* inv = reinterpret_cast<double*>(arena);
  std::memcpy(inv, freqs.data(), freqs.size() * sizeof(double));
  const TensorView xv(x.data(), DType::kF32, {T, H, D}), pv(pos.data(), DType::kI64, {T});
  std::vector<unsigned char> before(arena, arena + sizeof arena);
  for (size_t shift : {size_t{0}, size_t{8}, size_t{28}}) {
    const TensorView ov(reinterpret_cast<float*>(arena + shift), DType::kF32, {T, H, D});
    DLTensor out = ov, xd = xv, pd = pv;
    EXPECT_EQ(tokpos_op_apply_rope(&out, &xd, &pd, inv, static_cast<int64_t>(freqs.size()), TOKPOS_ROPE_HALF, -1,
                                   1.0, 0),
              TOKPOS_INVALID_ARGUMENT)
        << shift;
    EXPECT_NE(last_error().find("tokpos_op_apply_rope: out overlaps inv_freq"), std::string::npos) << last_error();
    EXPECT_EQ(std::vector<unsigned char>(arena, arena + sizeof arena), before) << "nothing is written";
    tokpos::RopeApplyOptions o;
    expect_error([&] { tokpos::ops::apply_rope(ov, xv, pv, std::span<const double>(inv, freqs.size()), o); },
                 Status::kInvalidArgument, {"apply_rope: out overlaps inv_freq"});
  }
  // Right after the frequencies: accepted.
  const TensorView after(reinterpret_cast<float*>(arena + freqs.size() * sizeof(double)), DType::kF32, {T, H, D});
  DLTensor out = after, xd = xv, pd = pv;
  EXPECT_EQ(tokpos_op_apply_rope(&out, &xd, &pd, inv, static_cast<int64_t>(freqs.size()), TOKPOS_ROPE_HALF, -1, 1.0, 0),
            TOKPOS_OK)
      << last_error();
  // ALiBi's out over slopes goes through the same check.
  std::vector<int64_t> q = {0, 1};
  double* slopes = reinterpret_cast<double*>(arena + 512);
  slopes[0] = 0.5;
  const TensorView qv(q.data(), DType::kI64, {2}), bias(reinterpret_cast<float*>(arena + 512), DType::kF32, {1, 2, 2});
  DLTensor b = bias, qd = qv;
  EXPECT_EQ(tokpos_op_alibi_bias(&b, slopes, 1, &qd, &qd, TOKPOS_ALIBI_CAUSAL), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out overlaps slopes (bytes ["), std::string::npos) << last_error();
}

TEST(RopeCApiChecks, FrequenciesOutputsMayNotOverlapEachOther) {
  double inv[4] = {7, 7, 7, 7};
  EXPECT_EQ(tokpos_rope_frequencies(inv, &inv[2], 8, 10000.0, nullptr, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("attention_factor overlaps inv_freq"), std::string::npos) << last_error();
  EXPECT_EQ(inv[0], 7.0);
}

TEST(RopeCApiChecks, MisalignedDoublePointersAreRefusedAsALiBisAre) {
  alignas(8) unsigned char buf[256];
  std::memset(buf, 0x5a, sizeof buf);
  const std::vector<unsigned char> before(buf, buf + sizeof buf);
  auto* odd = reinterpret_cast<double*>(buf + 4);
  double* even = reinterpret_cast<double*>(buf + 128);
  double factor = 0;
  // inv_freq and attention_factor (outputs).
  EXPECT_EQ(tokpos_rope_frequencies(odd, &factor, 8, 10000.0, nullptr, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tokpos_rope_frequencies: inv_freq = "), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("is not aligned to 8 bytes"), std::string::npos) << last_error();
  EXPECT_EQ(tokpos_rope_frequencies(even, odd, 8, 10000.0, nullptr, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("attention_factor = "), std::string::npos) << last_error();
  EXPECT_EQ(std::vector<unsigned char>(buf, buf + sizeof buf), before) << "nothing is written";
  // The scaling's factor lists (inputs).
  double inv[4];
  tokpos_rope_scaling s;
  tokpos_rope_scaling_init(&s);
  s.type = TOKPOS_ROPE_LONGROPE;
  s.original_max_position_embeddings = 64;
  s.short_factor = odd;
  s.short_factor_len = 4;
  s.long_factor = even;
  s.long_factor_len = 4;
  EXPECT_EQ(tokpos_rope_frequencies(inv, &factor, 8, 10000.0, &s, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("short_factor = "), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("is not aligned to 8 bytes"), std::string::npos) << last_error();
  // apply_rope's inv_freq (an input).
  std::vector<float> x(16, 0.5f), out(16, -3.0f);
  std::vector<int64_t> pos = {0, 1};
  const TensorView xv(x.data(), DType::kF32, {2, 1, 8}), ov(out.data(), DType::kF32, {2, 1, 8});
  const TensorView pv(pos.data(), DType::kI64, {2});
  DLTensor xd = xv, od = ov, pd = pv;
  EXPECT_EQ(tokpos_op_apply_rope(&od, &xd, &pd, odd, 4, TOKPOS_ROPE_HALF, -1, 1.0, 0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tokpos_op_apply_rope: inv_freq = "), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("is not aligned to 8 bytes"), std::string::npos) << last_error();
  EXPECT_EQ(out, std::vector<float>(16, -3.0f));
  // ALiBi says the same.
  EXPECT_EQ(tokpos_alibi_slopes(odd, 4, 8.0), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tokpos_alibi_slopes: out = "), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("is not aligned to 8 bytes"), std::string::npos) << last_error();
}

// ---- DLTensors from a newer DLPack -------------------------------------------

// Sets device_type to an integer the way a caller built against DLPack 1.x
// does: the bytes, not a value of this header's enum.
void set_device_type(DLTensor& t, int32_t type) {
  static_assert(sizeof(t.device.device_type) == sizeof type);
  std::memcpy(&t.device.device_type, &type, sizeof type);
}

TEST(DLTensorChecks, DeviceTypesOfNewerDLPacksAreReadAsIntegersAndRefused) {
  std::vector<float> x(16, 0.5f), out(16, -3.0f);
  std::vector<int64_t> pos = {0, 1};
  const std::vector<double> inv = tokpos::rope_frequencies(8, 10000.0).inv_freq;
  const TensorView xv(x.data(), DType::kF32, {2, 1, 8}), ov(out.data(), DType::kF32, {2, 1, 8});
  const TensorView pv(pos.data(), DType::kI64, {2});
  struct Case {
    int32_t type;
    const char* name;
  };
  for (const Case c : {Case{14, "kDLOneAPI (14"}, Case{15, "kDLWebGPU (15"}, Case{16, "kDLHexagon (16"},
                       Case{17, "kDLMAIA (17"}, Case{18, "an unknown device type (18"},
                       Case{0x7fffffff, "an unknown device type (2147483647"}, Case{-1, "an unknown device type (-1"}}) {
    for (int which = 0; which < 3; ++which) {
      DLTensor xd = xv, od = ov, pd = pv;
      set_device_type(which == 0 ? xd : which == 1 ? od : pd, c.type);
      EXPECT_EQ(tokpos_op_apply_rope(&od, &xd, &pd, inv.data(), 4, TOKPOS_ROPE_HALF, -1, 1.0, 0),
                TOKPOS_UNIMPLEMENTED)
          << c.type;
      EXPECT_NE(last_error().find(std::string(" is on device ") + c.name), std::string::npos) << last_error();
      EXPECT_EQ(out, std::vector<float>(16, -3.0f));
    }
    // Every entry point checks tensors the same way: ALiBi's and position ids' too.
    std::vector<int64_t> q = {0, 1};
    std::vector<float> bias(4, -3.0f);
    const TensorView qv(q.data(), DType::kI64, {2}), bv(bias.data(), DType::kF32, {1, 2, 2});
    DLTensor qd = qv, bd = bv;
    set_device_type(qd, c.type);
    const double slope = 0.5;
    EXPECT_EQ(tokpos_op_alibi_bias(&bd, &slope, 1, &qd, &qd, TOKPOS_ALIBI_CAUSAL), TOKPOS_UNIMPLEMENTED);
    EXPECT_NE(last_error().find(c.name), std::string::npos) << last_error();
  }
}

}  // namespace
