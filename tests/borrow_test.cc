// Borrowed tables: modules that wrap memory they do not own (a caller's
// buffer, a mapped .safetensors tensor) with no copy; copy and move semantics
// of owning and borrowing modules; keep_alive; the presets borrowing F32
// tensors from the mapped file; checkpoints on borrowed tables.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "tokpos/checkpoint.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"
#include "tokpos/positional.h"
#include "tokpos/presets.h"
#include "tokpos/safetensors.h"
#include "tokpos/token_embedding.h"
#include "expect_error.h"

namespace {

using tokpos::testing::bitwise_equal;
using tokpos::testing::ids_mod;
using tokpos::testing::noise;

constexpr int64_t kV = 11, kD = 6, kL = 9;

std::string scratch(const std::string& name) {
  return ::testing::TempDir() + name;
}

std::vector<float> as_vector(std::span<const float> s) {
  return {s.begin(), s.end()};
}

bool same_bytes(const std::vector<float>& a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using tokpos::testing::expect_error;

TEST(Borrow, TokenTableIsTheCallersBufferAndForwardMatchesFromPretrained) {
  const auto buffer = noise(kV * kD, 1);
  const tokpos::TokenEmbeddingOptions options{.vocab_size = kV, .dim = kD};
  const auto borrowed = tokpos::TokenEmbedding::borrow(buffer, options);
  const auto owned = tokpos::TokenEmbedding::from_pretrained(buffer, options);
  EXPECT_TRUE(borrowed.borrowed());
  EXPECT_FALSE(owned.borrowed());
  EXPECT_EQ(borrowed.table().data(), buffer.data());  // no copy
  EXPECT_EQ(borrowed.table().size(), buffer.size());
  EXPECT_NE(owned.table().data(), buffer.data());  // from_pretrained still copies
  EXPECT_TRUE(borrowed.frozen());
  const int64_t B = 3, T = 7;
  const auto ids = ids_mod(B * T, kV, 2);
  EXPECT_TRUE(bitwise_equal(borrowed.forward(ids, B, T), owned.forward(ids, B, T)));
  const auto h = noise(4 * kD, 3);
  EXPECT_TRUE(bitwise_equal(borrowed.logits(h, 4), owned.logits(h, 4)));
  // The options are checked as for from_pretrained.
  expect_error([&] { tokpos::TokenEmbedding::borrow(std::span(buffer).first(kD), options); },
               tokpos::Status::kShapeMismatch, {"TokenEmbedding::borrow", "table"});
}

TEST(Borrow, BackwardFillsTheModulesGradientAndLeavesTheBufferAlone) {
  const auto buffer = noise(kV * kD, 4);
  const auto before = buffer;
  const tokpos::TokenEmbeddingOptions options{.vocab_size = kV, .dim = kD, .padding_idx = 2};
  auto borrowed = tokpos::TokenEmbedding::borrow(buffer, options, /*frozen=*/false);
  auto owned = tokpos::TokenEmbedding::from_pretrained(buffer, options, /*frozen=*/false);
  const int64_t B = 2, T = 8;
  const auto ids = ids_mod(B * T, kV, 5);
  const auto d_out = noise(B * T * kD, 6);
  EXPECT_EQ(borrowed.backward(d_out, ids, B, T), owned.backward(d_out, ids, B, T));
  EXPECT_TRUE(bitwise_equal(as_vector(borrowed.grad()), as_vector(owned.grad())));
  const auto h = noise(3 * kD, 7), d_logits = noise(3 * kV, 8);
  std::vector<float> d_h_b(3 * kD, 0.0f), d_h_o(3 * kD, 0.0f);
  borrowed.logits_backward(d_logits, h, 3, d_h_b);
  owned.logits_backward(d_logits, h, 3, d_h_o);
  EXPECT_TRUE(bitwise_equal(as_vector(borrowed.grad()), as_vector(owned.grad())));
  EXPECT_TRUE(bitwise_equal(d_h_b, d_h_o));
  EXPECT_TRUE(bitwise_equal(buffer, before));  // the borrowed memory, byte for byte
  EXPECT_EQ(borrowed.table().data(), buffer.data());
  // Frozen: no gradient at all.
  auto frozen = tokpos::TokenEmbedding::borrow(buffer, options);
  EXPECT_TRUE(frozen.backward(d_out, ids, B, T).empty());
  EXPECT_TRUE(frozen.grad().empty());
}

TEST(Borrow, ABorrowedTableIsReadOnly) {
  const auto buffer = noise(kV * kD, 9);
  auto m = tokpos::TokenEmbedding::borrow(buffer, {.vocab_size = kV, .dim = kD});
  expect_error([&] { m.mutable_table(); }, tokpos::Status::kInvalidArgument,
               {"TokenEmbedding", "borrowed (read-only)"});
  // set_padding_idx records the row (no gradient) but does not zero the memory.
  m.set_padding_idx(3);
  EXPECT_EQ(m.padding_idx(), 3);
  EXPECT_TRUE(same_bytes(buffer, m.table()));
  m.set_frozen(false);
  const std::vector<int64_t> ids = {3, 4};
  m.backward(noise(2 * kD, 10), ids, 1, 2);
  for (int64_t d = 0; d < kD; ++d) EXPECT_EQ(m.grad()[3 * kD + d], 0.0f);
  // An owned table is zeroed there, as before.
  auto owned = tokpos::TokenEmbedding::from_pretrained(buffer, {.vocab_size = kV, .dim = kD});
  owned.set_padding_idx(3);
  for (int64_t d = 0; d < kD; ++d) EXPECT_EQ(owned.table()[3 * kD + d], 0.0f);
  // make_owned copies the table; then it is writable and the buffer stays as it was.
  const auto before = buffer;
  m.make_owned();
  EXPECT_FALSE(m.borrowed());
  EXPECT_NE(m.table().data(), buffer.data());
  EXPECT_TRUE(same_bytes(buffer, m.table()));
  m.mutable_table()[0] = 42.0f;
  EXPECT_EQ(m.table()[0], 42.0f);
  EXPECT_TRUE(bitwise_equal(buffer, before));
}

TEST(Borrow, CopiesOfABorrowingModuleBorrowTheSameMemory) {
  const auto buffer = noise(kV * kD, 11);
  const auto a = tokpos::TokenEmbedding::borrow(buffer, {.vocab_size = kV, .dim = kD});
  const tokpos::TokenEmbedding b = a;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_TRUE(b.borrowed());
  EXPECT_EQ(b.table().data(), buffer.data());
  auto c = tokpos::TokenEmbedding({.vocab_size = 2, .dim = 2, .seed = 1});
  c = a;
  EXPECT_TRUE(c.borrowed());
  EXPECT_EQ(c.table().data(), buffer.data());
  EXPECT_EQ(c.vocab_size(), kV);
}

TEST(Borrow, CopiesOfAnOwningModuleOwnTheirOwnBuffer) {
  const auto a = tokpos::TokenEmbedding({.vocab_size = kV, .dim = kD, .seed = 3});
  auto b = a;
  EXPECT_FALSE(b.borrowed());
  EXPECT_NE(b.table().data(), a.table().data());
  EXPECT_TRUE(bitwise_equal(as_vector(a.table()), as_vector(b.table())));
  b.mutable_table()[0] = 7.0f;
  EXPECT_NE(a.table()[0], 7.0f);
  const auto buffer = noise(4, 12);
  auto c = tokpos::TokenEmbedding::borrow(buffer, {.vocab_size = 2, .dim = 2});
  c = a;  // a borrowing module assigned an owning one owns a copy
  EXPECT_FALSE(c.borrowed());
  EXPECT_NE(c.table().data(), a.table().data());
  EXPECT_NE(c.table().data(), buffer.data());
  EXPECT_TRUE(bitwise_equal(as_vector(a.table()), as_vector(c.table())));
}

TEST(Borrow, MovesKeepTheTableValid) {
  const auto buffer = noise(kV * kD, 13);
  auto a = tokpos::TokenEmbedding::borrow(buffer, {.vocab_size = kV, .dim = kD});
  auto b = std::move(a);
  EXPECT_TRUE(b.borrowed());
  EXPECT_EQ(b.table().data(), buffer.data());
  auto owner = tokpos::TokenEmbedding({.vocab_size = kV, .dim = kD, .seed = 4});
  const auto values = as_vector(owner.table());
  const float* where = owner.table().data();
  auto moved = std::move(owner);
  EXPECT_EQ(moved.table().data(), where);  // the buffer moved with it
  EXPECT_TRUE(bitwise_equal(as_vector(moved.table()), values));
  tokpos::TokenEmbedding assigned({.vocab_size = 2, .dim = 2, .seed = 1});
  assigned = std::move(moved);
  EXPECT_EQ(assigned.table().data(), where);
  EXPECT_TRUE(bitwise_equal(as_vector(assigned.table()), values));
  assigned = std::move(b);
  EXPECT_TRUE(assigned.borrowed());
  EXPECT_EQ(assigned.table().data(), buffer.data());
  const std::vector<int64_t> ids = {0, 5, 10};
  EXPECT_TRUE(bitwise_equal(
      assigned.forward(ids, 1, 3),
      tokpos::TokenEmbedding::from_pretrained(buffer, {.vocab_size = kV, .dim = kD}).forward(ids, 1, 3)));
}

TEST(Borrow, KeepAliveHoldsAHeapBufferForTheModuleAndItsCopies) {
  auto heap = std::make_shared<std::vector<float>>(noise(kV * kD, 14));
  const auto values = *heap;
  const std::weak_ptr<std::vector<float>> watch = heap;
  std::span<const float> view(*heap);
  auto m = std::make_unique<tokpos::TokenEmbedding>(
      tokpos::TokenEmbedding::borrow(view, {.vocab_size = kV, .dim = kD}, true, heap));
  heap.reset();  // the caller drops its reference
  ASSERT_FALSE(watch.expired());
  EXPECT_EQ(m->table().data(), view.data());
  EXPECT_TRUE(same_bytes(values, m->table()));
  auto copy = std::make_unique<tokpos::TokenEmbedding>(*m);
  m.reset();
  EXPECT_FALSE(watch.expired());  // the copy shares keep_alive
  EXPECT_EQ(copy->table().data(), view.data());
  const std::vector<int64_t> ids = {1, 2};
  EXPECT_TRUE(bitwise_equal(
      copy->forward(ids, 1, 2),
      tokpos::TokenEmbedding::from_pretrained(values, {.vocab_size = kV, .dim = kD}).forward(ids, 1, 2)));
  copy.reset();
  EXPECT_TRUE(watch.expired());
  // make_owned drops keep_alive.
  auto again = std::make_shared<std::vector<float>>(values);
  const std::weak_ptr<std::vector<float>> watch2 = again;
  auto owned = tokpos::TokenEmbedding::borrow(*again, {.vocab_size = kV, .dim = kD}, true, again);
  again.reset();
  owned.make_owned();
  EXPECT_TRUE(watch2.expired());
  EXPECT_TRUE(same_bytes(values, owned.table()));
}

TEST(Borrow, LearnedPositionTables) {
  const auto buffer = noise(kL * kD, 15);
  const auto before = buffer;
  const tokpos::LearnedPositionalOptions options{.max_context = kL, .dim = kD};
  auto borrowed = tokpos::LearnedPositionalEmbedding::borrow(buffer, options);
  tokpos::LearnedPositionalEmbedding owned(options);
  std::copy(buffer.begin(), buffer.end(), owned.mutable_table().begin());
  EXPECT_TRUE(borrowed.borrowed());
  EXPECT_FALSE(owned.borrowed());
  EXPECT_EQ(borrowed.table().data(), buffer.data());
  EXPECT_TRUE(bitwise_equal(borrowed.forward(5, 2), owned.forward(5, 2)));
  const auto d_out = noise(2 * 4 * kD, 16);
  borrowed.backward(d_out, 2, 4, {.start = 3});
  owned.backward(d_out, 2, 4, {.start = 3});
  EXPECT_TRUE(bitwise_equal(as_vector(borrowed.grad()), as_vector(owned.grad())));
  EXPECT_TRUE(bitwise_equal(buffer, before));
  expect_error([&] { borrowed.mutable_table(); }, tokpos::Status::kInvalidArgument,
               {"LearnedPositionalEmbedding", "borrowed (read-only)"});
  // Policies work on borrowed tables too (interpolation reads the borrowed rows).
  const auto interp = tokpos::LearnedPositionalEmbedding::borrow(
      buffer,
      {.max_context = kL, .dim = kD, .beyond = tokpos::BeyondTable::kInterpolate, .interpolate_to = 2 * kL});
  tokpos::LearnedPositionalEmbedding interp_owned(
      {.max_context = kL, .dim = kD, .beyond = tokpos::BeyondTable::kInterpolate, .interpolate_to = 2 * kL});
  std::copy(buffer.begin(), buffer.end(), interp_owned.mutable_table().begin());
  EXPECT_TRUE(bitwise_equal(interp.forward(2 * kL), interp_owned.forward(2 * kL)));
  // Copies and moves.
  const auto copy = borrowed;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.table().data(), buffer.data());
  const auto owned_copy = owned;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_NE(owned_copy.table().data(), owned.table().data());
  EXPECT_TRUE(bitwise_equal(as_vector(owned_copy.table()), as_vector(owned.table())));
  const float* where = owned.table().data();
  auto moved = std::move(owned);
  EXPECT_EQ(moved.table().data(), where);
  auto moved_borrow = std::move(borrowed);
  EXPECT_EQ(moved_borrow.table().data(), buffer.data());
  auto as_base = std::make_unique<tokpos::LearnedPositionalEmbedding>(std::move(moved_borrow));
  EXPECT_EQ(as_base->table().data(), buffer.data());
  // keep_alive.
  auto heap = std::make_shared<std::vector<float>>(buffer);
  const std::weak_ptr<std::vector<float>> watch = heap;
  auto kept = std::make_unique<tokpos::LearnedPositionalEmbedding>(
      tokpos::LearnedPositionalEmbedding::borrow(*heap, options, heap));
  heap.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_TRUE(same_bytes(buffer, kept->table()));
  kept->make_owned();
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(kept->borrowed());
  kept->mutable_table()[0] = 1.0f;
  // Checks as the constructor.
  expect_error([&] { tokpos::LearnedPositionalEmbedding::borrow(std::span(buffer).first(kD), options); },
               tokpos::Status::kShapeMismatch, {"LearnedPositionalEmbedding::borrow"});
  expect_error(
      [&] {
        tokpos::LearnedPositionalEmbedding::borrow(
            buffer, {.max_context = kL, .dim = kD, .beyond = tokpos::BeyondTable::kExtend});
      },
      tokpos::Status::kInvalidArgument, {"extend policy"});
}

TEST(Borrow, SinusoidalTablesAlwaysOwnTheirRows) {
  const tokpos::SinusoidalPositionalEmbedding a({.max_context = kL, .dim = kD});
  EXPECT_FALSE(a.borrowed());
  const auto b = a;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_NE(b.table().data(), a.table().data());
  EXPECT_TRUE(bitwise_equal(as_vector(a.table()), as_vector(b.table())));
  EXPECT_TRUE(bitwise_equal(a.extended(2 * kL).forward(kL), a.forward(kL)));
}

// A GPT-2 shaped file: wte (V, D) and wpe (L, D), F32 unless `f16_wte`.
void write_gpt2(const std::string& path, const std::vector<float>& wte, const std::vector<float>& wpe,
                bool f16_wte = false, bool misalign = false) {
  std::vector<uint16_t> half(wte.size());
  for (size_t k = 0; k < wte.size(); ++k)
    half[k] = wte[k] == 1.0f ? 0x3C00 : wte[k] == 0.5f ? 0x3800 : 0x0000;
  const uint16_t pad = 0;
  std::vector<tokpos::TensorRef> refs = {
      f16_wte ? tokpos::TensorRef{"wte.weight", "F16", {kV, kD}, half.data(), half.size() * 2}
              : tokpos::TensorRef{"wte.weight", "F32", {kV, kD}, wte.data(), wte.size() * 4},
      {"wpe.weight", "F32", {kL, kD}, wpe.data(), wpe.size() * 4}};
  // Sorted first, a 2-byte tensor shifts every F32 tensor after it off 4-byte alignment.
  if (misalign) refs.push_back({"a", "F16", {1}, &pad, 2});
  tokpos::write_safetensors(path, refs);
}

TEST(Borrow, Gpt2PresetBorrowsF32TablesFromTheMapping) {
  const auto wte = noise(kV * kD, 17), wpe = noise(kL * kD, 18);
  const auto path = scratch("borrow_gpt2.safetensors");
  write_gpt2(path, wte, wpe);
  std::unique_ptr<tokpos::EmbeddingComposer> model;
  const float* wte_in_file = nullptr;
  const float* wpe_in_file = nullptr;
  {
    const auto file = tokpos::SafetensorsFile::open(path);
    model = std::make_unique<tokpos::EmbeddingComposer>(tokpos::gpt2_from_safetensors(file));
    wte_in_file = file.view_f32("wte.weight").data();
    wpe_in_file = file.view_f32("wpe.weight").data();
    // The tables are the mapped tensors themselves, inside the file's data.
    EXPECT_EQ(model->token().table().data(), wte_in_file);
    EXPECT_EQ(model->position().table().data(), wpe_in_file);
    const uint8_t* begin = nullptr;
    const uint8_t* end = nullptr;
    for (const auto& name : file.names()) {
      const auto b = file.bytes(name);
      if (!begin || b.data() < begin) begin = b.data();
      if (!end || b.data() + b.size() > end) end = b.data() + b.size();
    }
    const auto* p = reinterpret_cast<const uint8_t*>(model->token().table().data());
    EXPECT_TRUE(p >= begin && p + wte.size() * sizeof(float) <= end);
  }  // the file object is gone; the modules keep the mapping alive
  EXPECT_TRUE(model->token().borrowed());
  EXPECT_TRUE(model->position().borrowed());
  EXPECT_FALSE(model->token().frozen());
  EXPECT_EQ(model->token().table().data(), wte_in_file);
  EXPECT_TRUE(same_bytes(wte, model->token().table()));
  EXPECT_TRUE(same_bytes(wpe, model->position().table()));
  // The forward equals one on owned copies of the same tables, bit for bit.
  tokpos::LearnedPositionalEmbedding pos({.max_context = kL, .dim = kD});
  std::copy(wpe.begin(), wpe.end(), pos.mutable_table().begin());
  const tokpos::EmbeddingComposer copies(
      tokpos::TokenEmbedding::from_pretrained(wte, {.vocab_size = kV, .dim = kD}),
      std::make_unique<tokpos::LearnedPositionalEmbedding>(pos));
  const int64_t B = 2, T = 5;
  const auto ids = ids_mod(B * T, kV, 19);
  EXPECT_TRUE(bitwise_equal(model->forward(ids, B, T), copies.forward(ids, B, T)));
  // Training computes the modules' own gradients; the mapped tables are untouched.
  model->backward(noise(B * T * kD, 20), ids, B, T);
  EXPECT_EQ(model->token().grad().size(), wte.size());
  EXPECT_TRUE(same_bytes(wte, model->token().table()));
}

TEST(Borrow, PresetsWidenF16AndMisalignedTablesIntoOwnedBuffers) {
  std::vector<float> wte(kV * kD, 0.5f);
  wte[0] = 1.0f;
  const auto wpe = noise(kL * kD, 21);
  const auto path = scratch("borrow_gpt2_f16.safetensors");
  write_gpt2(path, wte, wpe, /*f16_wte=*/true);
  auto file = tokpos::SafetensorsFile::open(path);
  auto model = tokpos::gpt2_from_safetensors(file);
  EXPECT_FALSE(model.token().borrowed());
  EXPECT_TRUE(same_bytes(wte, model.token().table()));
  EXPECT_TRUE(model.position().borrowed());
  EXPECT_EQ(model.position().table().data(), file.view_f32("wpe.weight").data());
  // F32 tensors off 4-byte alignment cannot be viewed: they are copied.
  const auto path2 = scratch("borrow_gpt2_misaligned.safetensors");
  write_gpt2(path2, wte, wpe, /*f16_wte=*/false, /*misalign=*/true);
  auto shifted = tokpos::gpt2_from_safetensors(tokpos::SafetensorsFile::open(path2));
  EXPECT_FALSE(shifted.token().borrowed());
  EXPECT_FALSE(shifted.position().borrowed());
  EXPECT_TRUE(same_bytes(wte, shifted.token().table()));
  EXPECT_TRUE(same_bytes(wpe, shifted.position().table()));
}

TEST(Borrow, BertPresetBorrowsItsThreeTables) {
  const int64_t Ty = 2;
  const auto word = noise(kV * kD, 22), pos = noise(kL * kD, 23), types = noise(Ty * kD, 24);
  const std::vector<float> gamma(kD, 1.0f), beta(kD, 0.0f);
  const auto path = scratch("borrow_bert.safetensors");
  tokpos::write_safetensors(
      path, {{"embeddings.word_embeddings.weight", "F32", {kV, kD}, word.data(), word.size() * 4},
             {"embeddings.position_embeddings.weight", "F32", {kL, kD}, pos.data(), pos.size() * 4},
             {"embeddings.token_type_embeddings.weight", "F32", {Ty, kD}, types.data(), types.size() * 4},
             {"embeddings.LayerNorm.weight", "F32", {kD}, gamma.data(), kD * 4},
             {"embeddings.LayerNorm.bias", "F32", {kD}, beta.data(), kD * 4}});
  const auto file = tokpos::SafetensorsFile::open(path);
  const auto model = tokpos::bert_from_safetensors(file);
  EXPECT_EQ(model.token().table().data(), file.view_f32("embeddings.word_embeddings.weight").data());
  EXPECT_EQ(model.position().table().data(), file.view_f32("embeddings.position_embeddings.weight").data());
  ASSERT_NE(model.token_types(), nullptr);
  EXPECT_EQ(model.token_types()->table().data(),
            file.view_f32("embeddings.token_type_embeddings.weight").data());
  const std::vector<int64_t> ids = {5, 0, 3}, type_ids = {0, 1, 1};
  const auto sum = model.forward(ids, 1, 3, {.token_type_ids = type_ids, .layer_norm = false});
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t d = 0; d < kD; ++d)
      EXPECT_EQ(sum[t * kD + d], (word[ids[t] * kD + d] + types[type_ids[t] * kD + d]) + pos[t * kD + d]);
}

TEST(Borrow, CheckpointsSaveBorrowedTablesAndLoadIntoOwnedCopies) {
  const auto wte = noise(kV * kD, 25), wpe = noise(kL * kD, 26);
  const auto path = scratch("borrow_ckpt_src.safetensors");
  write_gpt2(path, wte, wpe);
  const auto file = tokpos::SafetensorsFile::open(path);
  auto model = tokpos::gpt2_from_safetensors(file);
  const auto ckpt = scratch("borrow_ckpt.safetensors");
  tokpos::save_checkpoint(ckpt, model);  // reads the borrowed tables in place
  const auto saved = tokpos::SafetensorsFile::open(ckpt);
  EXPECT_TRUE(bitwise_equal(saved.read_f32("token.weight"), wte));
  EXPECT_TRUE(bitwise_equal(saved.read_f32("position.weight"), wpe));
  // Loading replaces a borrowed table with an owned copy; the mapped file is untouched.
  tokpos::EmbeddingComposer other(
      tokpos::TokenEmbedding({.vocab_size = kV, .dim = kD, .seed = 9}),
      std::make_unique<tokpos::LearnedPositionalEmbedding>(
          tokpos::LearnedPositionalOptions{.max_context = kL, .dim = kD, .seed = 9}));
  const auto other_ckpt = scratch("borrow_ckpt_other.safetensors");
  tokpos::save_checkpoint(other_ckpt, other);
  tokpos::load_checkpoint(other_ckpt, model);
  EXPECT_FALSE(model.token().borrowed());
  EXPECT_FALSE(model.position().borrowed());
  EXPECT_TRUE(bitwise_equal(as_vector(model.token().table()), as_vector(other.token().table())));
  EXPECT_TRUE(bitwise_equal(as_vector(model.position().table()), as_vector(other.position().table())));
  EXPECT_TRUE(same_bytes(wte, file.view_f32("wte.weight")));
  // A load that does not fit changes nothing: the table stays borrowed.
  auto single = tokpos::TokenEmbedding::borrow(wte, {.vocab_size = kV, .dim = kD});
  EXPECT_THROW(tokpos::load_checkpoint(other_ckpt, single), tokpos::Error);  // no "weight" tensor
  EXPECT_TRUE(single.borrowed());
  EXPECT_EQ(single.table().data(), wte.data());
}

// adopt_table takes a buffer as the module's own table with no copy, dropping
// a borrowed one; a buffer of the wrong size is refused and changes nothing.
TEST(Borrow, AdoptTableTakesTheBufferOrChangesNothing) {
  const auto wte = noise(10 * 4, 51), wpe = noise(6 * 4, 52);
  auto tok = tokpos::TokenEmbedding::borrow(wte, {.vocab_size = 10, .dim = 4});
  auto pos = tokpos::LearnedPositionalEmbedding::borrow(wpe, {.max_context = 6, .dim = 4});
  tokpos::testing::expect_error([&] { tok.adopt_table(std::vector<float>(39)); }, tokpos::Status::kShapeMismatch,
                                {"TokenEmbedding::adopt_table", "table has 39 elements, expected 40"});
  tokpos::testing::expect_error([&] { pos.adopt_table(std::vector<float>(25)); }, tokpos::Status::kShapeMismatch,
                                {"LearnedPositionalEmbedding::adopt_table", "expected 24"});
  EXPECT_TRUE(tok.borrowed() && pos.borrowed());
  EXPECT_EQ(tok.table().data(), wte.data());
  EXPECT_EQ(pos.table().data(), wpe.data());
  std::vector<float> t(40, 2.0f), p(24, 3.0f);
  const float* t_data = t.data();
  const float* p_data = p.data();
  tok.adopt_table(std::move(t));
  pos.adopt_table(std::move(p));
  EXPECT_FALSE(tok.borrowed() || pos.borrowed());
  EXPECT_EQ(tok.table().data(), t_data);  // the very buffer: no copy
  EXPECT_EQ(pos.table().data(), p_data);
  EXPECT_EQ(tok.mutable_table()[39], 2.0f);
  EXPECT_EQ(pos.mutable_table()[23], 3.0f);
}

}  // namespace
