// tokpos._core: the vocab-parallel shard bindings (tokpos/ops.h, VocabShard).
// Arrays become DLTensors over the same memory; the ops check them and every
// id before they write; the GIL is released while they run.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "bind.h"
#include "tokpos/ops.h"

namespace tokpos::python {
namespace {

ops::LookupOptions shard_options(const std::string& where, int64_t vocab_size, int64_t row_begin,
                                 int64_t padding_idx = -1) {
  ops::LookupOptions o;
  o.where = where.c_str();
  o.padding_idx = padding_idx;
  o.shard = {vocab_size, row_begin};
  return o;
}

// A shard's vocab_size must be >= 1 (0 would mean "no shard" to the ops).
void check_vocab(const std::string& where, int64_t vocab_size) {
  if (vocab_size < 1) {
    throw Error(Status::kInvalidArgument, where + ": vocab_size = " + std::to_string(vocab_size) + " must be >= 1");
  }
}

void compose_shard(const OutArray& out, const InArray& ids, const InArray& shard_table, int64_t vocab_size,
                   int64_t row_begin, const std::optional<InArray>& pos_table,
                   const std::optional<InArray>& position_ids, int64_t start, const std::string& where) {
  check_vocab(where, vocab_size);
  const Tensor o(out, "out"), i(ids, "ids"), tok(shard_table, "shard_table");
  std::optional<Tensor> pos, pids;
  const DLTensor* p = maybe(pos, pos_table, "pos_table");
  const DLTensor* pi = maybe(pids, position_ids, "position_ids");
  nb::gil_scoped_release release;
  ops::compose_forward(o.dl, i.dl, tok.dl, p, pi, start, shard_options(where, vocab_size, row_begin));
}

void compose_shard_backward(const std::optional<OutArray>& d_shard_table, const std::optional<OutArray>& d_pos_table,
                            const InArray& d_out, const InArray& ids, int64_t vocab_size, int64_t row_begin,
                            const std::optional<InArray>& position_ids, int64_t start, int64_t padding_idx,
                            const std::string& where) {
  check_vocab(where, vocab_size);
  std::optional<Tensor> dt, dp, pids;
  const DLTensor* t = maybe(dt, d_shard_table, "d_shard_table");
  const DLTensor* p = maybe(dp, d_pos_table, "d_pos_table");
  const DLTensor* pi = maybe(pids, position_ids, "position_ids");
  const Tensor g(d_out, "d_out"), i(ids, "ids");
  nb::gil_scoped_release release;
  ops::compose_backward(t, p, g.dl, i.dl, pi, start, shard_options(where, vocab_size, row_begin, padding_idx));
}

std::pair<int64_t, int64_t> vocab_shard_range(int64_t vocab_size, int64_t pad_to_multiple_of, int64_t world_size,
                                              int64_t rank) {
  const auto r = ops::vocab_shard_range(vocab_size, pad_to_multiple_of, world_size, rank);
  return {r.row_begin, r.rows};
}

}  // namespace

void bind_shard(nb::module_& m) {
  m.def("compose_shard", &compose_shard, nb::arg("out"), nb::arg("ids"), nb::arg("shard_table"),
        nb::arg("vocab_size"), nb::arg("row_begin"), nb::arg("pos_table").none(), nb::arg("position_ids").none(),
        nb::arg("start"), nb::arg("where"));
  m.def("compose_shard_backward", &compose_shard_backward, nb::arg("d_shard_table").none(),
        nb::arg("d_pos_table").none(), nb::arg("d_out"), nb::arg("ids"), nb::arg("vocab_size"),
        nb::arg("row_begin"), nb::arg("position_ids").none(), nb::arg("start"), nb::arg("padding_idx"),
        nb::arg("where"));
  m.def("vocab_shard_range", &vocab_shard_range, nb::arg("vocab_size"), nb::arg("pad_to_multiple_of"),
        nb::arg("world_size"), nb::arg("rank"));
}

}  // namespace tokpos::python
