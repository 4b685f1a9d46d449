// TableStorage (tokpos/table_storage.h): the one owned-or-borrowed table type
// that TokenEmbedding and the position tables hold, with its gradient.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "expect_error.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"
#include "tokpos/positional.h"
#include "tokpos/table_storage.h"
#include "tokpos/token_embedding.h"

namespace {

using tokpos::Status;
using tokpos::TableStorage;
using tokpos::testing::expect_error;

std::vector<float> ramp(size_t n, float from = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from + static_cast<float>(i);
  return v;
}

std::vector<float> copy_of(std::span<const float> s) { return {s.begin(), s.end()}; }

TEST(TableStorage, OwnedTakesTheBufferWithoutACopyAndIsWritable) {
  auto values = ramp(6);
  const float* buffer = values.data();
  TableStorage t = TableStorage::owned("test", 3, 2, std::move(values));
  EXPECT_EQ(t.rows(), 3);
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.size(), 6);
  EXPECT_FALSE(t.borrowed());
  EXPECT_EQ(t.data(), buffer);
  EXPECT_EQ(copy_of(t.values()), ramp(6));
  t.mutable_values("test")[4] = -1.0f;
  EXPECT_EQ(t.values()[4], -1.0f);
  expect_error([] { TableStorage::owned("Where", 3, 2, ramp(5)); }, Status::kShapeMismatch,
               {"Where: table has 5 elements, expected 6"});
}

TEST(TableStorage, ZerosAreZero) {
  const TableStorage t = TableStorage::zeros("test", "table", 4, 3);
  EXPECT_EQ(copy_of(t.values()), std::vector<float>(12, 0.0f));
  EXPECT_FALSE(t.borrowed());
}

TEST(TableStorage, CheckShapeNamesTheRowsAndDim) {
  EXPECT_EQ(TableStorage::check_shape("W", "vocab_size", 5, 3), 15);
  expect_error([] { TableStorage::check_shape("W", "vocab_size", 0, 3); }, Status::kInvalidArgument,
               {"W: vocab_size = 0 must be >= 1"});
  expect_error([] { TableStorage::check_shape("W", "max_context", 4, 0); }, Status::kInvalidArgument,
               {"W: dim = 0 must be >= 1"});
  expect_error([] { TableStorage::check_shape("W", "max_context", int64_t{1} << 40, int64_t{1} << 40); },
               Status::kSizeOverflow, {"W: max_context*dim = "});
}

TEST(TableStorage, BorrowedReadsTheCallersMemoryAndIsReadOnly) {
  const auto memory = ramp(8);
  auto keep = std::make_shared<int>(7);
  TableStorage t = TableStorage::borrowed("test", memory, 4, 2, keep);
  EXPECT_TRUE(t.borrowed());
  EXPECT_EQ(t.data(), memory.data());
  EXPECT_EQ(keep.use_count(), 2);
  expect_error([&] { t.mutable_values("Mod::mutable_table"); }, Status::kInvalidArgument,
               {"Mod::mutable_table: the table is borrowed (read-only); call make_owned()"});
  expect_error([&] { TableStorage::borrowed("B", std::span(memory).first(7), 4, 2); }, Status::kShapeMismatch,
               {"B: table has 7 elements, expected 8"});
  expect_error([] { TableStorage::borrowed("B", std::span<const float>(static_cast<const float*>(nullptr), 8), 4, 2); },
               Status::kNullPointer, {"B: table is NULL"});
}

TEST(TableStorage, CopyOfAnOwnedTableOwnsItsOwnValues) {
  TableStorage a = TableStorage::owned("test", 2, 3, ramp(6));
  TableStorage b = a;
  EXPECT_FALSE(b.borrowed());
  EXPECT_NE(b.data(), a.data());
  EXPECT_EQ(copy_of(b.values()), copy_of(a.values()));
  b.mutable_values("test")[0] = 100.0f;
  EXPECT_EQ(a.values()[0], 1.0f);  // the original is untouched
  TableStorage c = TableStorage::zeros("test", "table", 1, 1);
  c = a;  // copy assignment: the same
  EXPECT_NE(c.data(), a.data());
  EXPECT_EQ(copy_of(c.values()), copy_of(a.values()));
}

TEST(TableStorage, CopyOfABorrowedTableBorrowsTheSameMemoryAndOwnsItsCopyAfterMakeOwned) {
  const auto memory = ramp(6);
  auto keep = std::make_shared<int>(1);
  const TableStorage a = TableStorage::borrowed("test", memory, 3, 2, keep);
  TableStorage b = a;
  EXPECT_TRUE(b.borrowed());
  EXPECT_EQ(b.data(), memory.data());
  EXPECT_EQ(keep.use_count(), 3);  // shared by both
  b.make_owned("test", "table");
  EXPECT_FALSE(b.borrowed());
  EXPECT_NE(b.data(), memory.data());
  EXPECT_EQ(copy_of(b.values()), memory);
  EXPECT_EQ(keep.use_count(), 2);  // b let go of it; a still borrows
  EXPECT_TRUE(a.borrowed());
  EXPECT_EQ(a.data(), memory.data());
  b.mutable_values("test")[0] = -5.0f;
  EXPECT_EQ(memory[0], 1.0f);
}

TEST(TableStorage, MoveKeepsTheValuesAndLeavesTheSourceEmpty) {
  auto values = ramp(6);
  const float* buffer = values.data();
  TableStorage a = TableStorage::owned("test", 3, 2, std::move(values));
  a.ensure_grad("test")[1] = 2.0f;
  TableStorage b = std::move(a);
  EXPECT_EQ(b.data(), buffer);  // no copy
  EXPECT_EQ(b.rows(), 3);
  EXPECT_EQ(b.grad()[1], 2.0f);
  EXPECT_EQ(a.rows(), 0);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(a.dim(), 0);
  EXPECT_TRUE(a.values().empty());
  EXPECT_TRUE(a.grad().empty());
  EXPECT_FALSE(a.borrowed());

  const auto memory = ramp(4);
  auto keep = std::make_shared<int>(1);
  TableStorage c = TableStorage::borrowed("test", memory, 2, 2, keep);
  TableStorage d;
  d = std::move(c);
  EXPECT_TRUE(d.borrowed());
  EXPECT_EQ(d.data(), memory.data());
  EXPECT_EQ(keep.use_count(), 2);  // moved, not shared
  EXPECT_FALSE(c.borrowed());      // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(c.values().empty());
}

TEST(TableStorage, AdoptTakesOwnershipOrChangesNothing) {
  const auto memory = ramp(4);
  auto keep = std::make_shared<int>(1);
  TableStorage t = TableStorage::borrowed("test", memory, 2, 2, keep);
  expect_error([&] { t.adopt("Mod::adopt_table", ramp(3)); }, Status::kShapeMismatch,
               {"Mod::adopt_table: table has 3 elements, expected 4"});
  EXPECT_TRUE(t.borrowed());
  EXPECT_EQ(t.data(), memory.data());
  auto mine = ramp(4, 10.0f);
  const float* buffer = mine.data();
  t.adopt("Mod::adopt_table", std::move(mine));
  EXPECT_FALSE(t.borrowed());
  EXPECT_EQ(t.data(), buffer);
  EXPECT_EQ(keep.use_count(), 1);  // keep_alive dropped
}

TEST(TableStorage, GradientIsEmptyUntilAskedForThenZeroedAndZeroGradKeepsIt) {
  const auto memory = ramp(6);
  TableStorage t = TableStorage::borrowed("test", memory, 3, 2);  // a borrowed table has a gradient too
  EXPECT_TRUE(t.grad().empty());
  t.zero_grad();  // a no-op without one
  EXPECT_TRUE(t.grad().empty());
  auto g = t.ensure_grad("test");
  ASSERT_EQ(g.size(), 6u);
  EXPECT_EQ(copy_of(g), std::vector<float>(6, 0.0f));
  for (auto& x : g) x = 3.0f;
  EXPECT_EQ(t.ensure_grad("test").data(), g.data());  // not reallocated, not cleared
  EXPECT_EQ(t.grad()[5], 3.0f);
  t.zero_grad();
  EXPECT_EQ(copy_of(t.grad()), std::vector<float>(6, 0.0f));
  EXPECT_EQ(t.grad().data(), g.data());
  expect_error([&] { t.adopt_grad("Mod::adopt_grad", std::vector<float>(5)); }, Status::kShapeMismatch,
               {"Mod::adopt_grad: gradient has 5 elements, expected 6"});
  EXPECT_EQ(t.grad().data(), g.data());
  auto mine = ramp(6);
  const float* buffer = mine.data();
  t.adopt_grad("test", std::move(mine));
  EXPECT_EQ(t.grad().data(), buffer);
  const TableStorage copy = t;
  EXPECT_NE(copy.grad().data(), t.grad().data());
  EXPECT_EQ(copy_of(copy.grad()), ramp(6));
}

// Both modules hold one: the same semantics through either.
TEST(TableStorage, TokenAndLearnedPositionTablesShareTheSemantics) {
  const auto memory = ramp(12);
  auto tok = tokpos::TokenEmbedding::borrow(memory, {.vocab_size = 4, .dim = 3}, /*frozen=*/false);
  auto pos = tokpos::LearnedPositionalEmbedding::borrow(memory, {.max_context = 4, .dim = 3});
  for (const float* p : {tok.table().data(), pos.table().data()}) EXPECT_EQ(p, memory.data());
  tok.make_owned();
  pos.make_owned();
  EXPECT_NE(tok.table().data(), memory.data());
  EXPECT_NE(pos.table().data(), memory.data());
  EXPECT_EQ(copy_of(tok.table()), copy_of(pos.table()));
  tok.ensure_grad()[0] = 1.0f;
  pos.ensure_grad()[0] = 1.0f;
  const auto moved_tok = std::move(tok);
  const auto moved_pos = std::move(pos);
  EXPECT_EQ(moved_tok.grad()[0], 1.0f);
  EXPECT_EQ(moved_pos.grad()[0], 1.0f);
  EXPECT_EQ(tok.vocab_size(), 0);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(pos.max_context(), 0);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(tok.grad().empty());
  EXPECT_TRUE(pos.grad().empty());
}

}  // namespace
