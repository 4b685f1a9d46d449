// Quantized token tables: every type, the cpu kernel against the reference
// dequantizer (written independently from ggml's block layouts), any thread
// count, streamed or not, positions and outputs of every dtype; the errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/convert.h"
#include "tokpos/error.h"
#include "tokpos/ggml_type.h"
#include "tokpos/ops.h"

namespace {

using tokpos::DType;
using tokpos::GgmlType;

// Random block bytes whose fp16 (or Q8_K's f32) scales are finite.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t V, int64_t D, std::mt19937& rng) {
  const auto& tr = *tokpos::ggml_type_traits(static_cast<int>(t));
  const size_t row = *tokpos::ggml_row_bytes(tr, D);
  std::vector<uint8_t> b(row * V);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  auto half = [&](uint8_t* p) {
    const uint16_t h = tokpos::fp::to_f16(u(rng)).bits;
    std::memcpy(p, &h, 2);
  };
  for (size_t blk = 0; blk < b.size() / tr.type_size; ++blk) {
    uint8_t* p = b.data() + blk * tr.type_size;
    switch (t) {
      case GgmlType::kQ8_0: case GgmlType::kQ4_0: case GgmlType::kQ5_0: half(p); break;
      case GgmlType::kQ4_1: case GgmlType::kQ5_1: case GgmlType::kQ4_K: case GgmlType::kQ5_K: half(p); half(p + 2); break;
      case GgmlType::kQ2_K: half(p + 80); half(p + 82); break;
      case GgmlType::kQ3_K: half(p + 108); break;
      case GgmlType::kQ6_K: half(p + 208); break;
      case GgmlType::kQ8_K: { const float d = u(rng); std::memcpy(p, &d, 4); break; }
      default: break;
    }
  }
  return b;
}

const GgmlType kTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                           GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                           GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K};

TEST(QuantParity, EveryTypeCpuEqualsReference) {
  std::mt19937 rng(7);
  for (GgmlType t : kTypes) {
    const auto& tr = *tokpos::ggml_type_traits(static_cast<int>(t));
    const int64_t V = 7, D = 2 * tr.block_size, B = 3, T = 11, L = 16;
    auto blocks = random_blocks(t, V, D, rng);
    const int64_t rb = static_cast<int64_t>(*tokpos::ggml_row_bytes(tr, D));
    tokpos::TensorView bl(blocks.data(), DType::kI32, {V, rb});  // dtype replaced below
    DLTensor bt = bl;
    bt.dtype = {kDLUInt, 8, 1};
    std::vector<int64_t> ids(B * T);
    for (auto& x : ids) x = static_cast<int64_t>(rng() % V);
    std::vector<float> pos(L * D);
    for (auto& x : pos) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    tokpos::TensorView iv(ids.data(), DType::kI64, {B, T});
    tokpos::TensorView pv(pos.data(), DType::kF32, {L, D});
    const tokpos::ops::QuantizedTable q{&bt, static_cast<int>(t), D};
    for (bool with_pos : {false, true}) {
      std::vector<float> ref(B * T * D), got(B * T * D);
      tokpos::TensorView rv(ref.data(), DType::kF32, {B, T, D});
      tokpos::Context rc;
      rc.set_backend("reference");
      tokpos::ops::compose_forward(rv, iv, q, with_pos ? pv.get() : nullptr, nullptr, 2, {}, &rc);
      for (int threads : {1, 2})
        for (int64_t stream : {int64_t{0}, INT64_MAX}) {
          std::fill(got.begin(), got.end(), -7.0f);
          tokpos::TensorView gv(got.data(), DType::kF32, {B, T, D});
          tokpos::Context c;
          c.set_num_threads(threads).set_stream_min_bytes(stream);
          tokpos::ops::compose_forward(gv, iv, q, with_pos ? pv.get() : nullptr, nullptr, 2, {}, &c);
          ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * 4)) << tr.name << " threads " << threads;
        }
    }
  }
}

// The 16-bit outputs and position tables: each element rounded once to out's
// dtype from the same float sum, on the fused and the streamed paths alike.
TEST(QuantParity, SixteenBitOutputsAndPositionsCpuEqualsReference) {
  std::mt19937 rng(11);
  for (GgmlType t : kTypes) {
    const auto& tr = *tokpos::ggml_type_traits(static_cast<int>(t));
    const int64_t V = 5, D = 2 * tr.block_size, B = 2, T = 13, L = 16;
    auto blocks = random_blocks(t, V, D, rng);
    const int64_t rb = static_cast<int64_t>(*tokpos::ggml_row_bytes(tr, D));
    tokpos::TensorView bl(blocks.data(), DType::kI32, {V, rb});
    DLTensor bt = bl;
    bt.dtype = {kDLUInt, 8, 1};
    std::vector<int64_t> ids(B * T);
    for (auto& x : ids) x = static_cast<int64_t>(rng() % V);
    std::vector<uint16_t> pos(L * D);
    for (auto& x : pos) x = tokpos::fp::to_f16(std::uniform_real_distribution<float>(-1, 1)(rng)).bits;
    tokpos::TensorView iv(ids.data(), DType::kI64, {B, T});
    tokpos::TensorView pv(pos.data(), DType::kF16, {L, D});
    const tokpos::ops::QuantizedTable q{&bt, static_cast<int>(t), D};
    for (DType out_type : {DType::kBF16, DType::kF16})
      for (bool with_pos : {false, true}) {
        std::vector<uint16_t> ref(B * T * D), got(B * T * D);
        tokpos::TensorView rv(ref.data(), out_type, {B, T, D});
        tokpos::Context rc;
        rc.set_backend("reference");
        tokpos::ops::compose_forward(rv, iv, q, with_pos ? pv.get() : nullptr, nullptr, 1, {}, &rc);
        for (int64_t stream : {int64_t{0}, INT64_MAX}) {
          std::fill(got.begin(), got.end(), uint16_t{0x7777});
          tokpos::TensorView gv(got.data(), out_type, {B, T, D});
          tokpos::Context c;
          c.set_num_threads(2).set_stream_min_bytes(stream);
          tokpos::ops::compose_forward(gv, iv, q, with_pos ? pv.get() : nullptr, nullptr, 1, {}, &c);
          ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * 2))
              << tr.name << (out_type == DType::kBF16 ? " bf16" : " f16") << " out, positions " << with_pos
              << ", stream threshold " << stream;
        }
      }
  }
}

TEST(QuantErrors, RowNotWholeBlocksNamesTypeAndBlockSize) {
  std::vector<uint8_t> blocks(34 * 2);
  std::vector<float> out(40);
  std::vector<int64_t> ids{0};
  DLTensor bt = tokpos::TensorView(blocks.data(), DType::kI32, {2, 34});
  int64_t shape[2] = {2, 34};
  bt.shape = shape;
  bt.strides = nullptr;
  bt.dtype = {kDLUInt, 8, 1};
  tokpos::TensorView ov(out.data(), DType::kF32, {1, 40});
  tokpos::TensorView iv(ids.data(), DType::kI64, {1});
  try {
    tokpos::ops::compose_forward(ov, iv, tokpos::ops::QuantizedTable{&bt, 8, 40});
    FAIL() << "no error";
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_0 blocks (block size 32"), std::string::npos) << e.what();
  }
}

}  // namespace
