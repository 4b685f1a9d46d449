// tokpos._core: quantized token tables (tokpos/ops.h, QuantizedTable;
// tokpos/ggml_type.h). The raw blocks become a DLTensor over the same
// memory; the op checks the type, D, the row bytes and every id before it
// writes; the GIL is released while it runs.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bind.h"
#include "tokpos/ggml_type.h"
#include "tokpos/ops.h"

namespace tokpos::python {
namespace {

void compose_ggml(const OutArray& out, const InArray& ids, const InArray& token_blocks, int ggml_type,
                  int64_t dim, const std::optional<InArray>& pos_table,
                  const std::optional<InArray>& position_ids, int64_t start, const std::string& where) {
  const Tensor o(out, "out"), i(ids, "ids"), blocks(token_blocks, "token_blocks");
  std::optional<Tensor> pos, pids;
  const DLTensor* p = maybe(pos, pos_table, "pos_table");
  const DLTensor* pi = maybe(pids, position_ids, "position_ids");
  ops::LookupOptions lo;
  lo.where = where.c_str();
  nb::gil_scoped_release release;
  ops::compose_forward(o.dl, i.dl, ops::QuantizedTable{&blocks.dl, ggml_type, dim}, p, pi, start, lo);
}

// ggml's type table (tokpos/ggml_type.h): (value, name, block_size, type_size) for every type, by value.
std::vector<std::tuple<int, std::string, int64_t, size_t>> ggml_types() {
  std::vector<std::tuple<int, std::string, int64_t, size_t>> types;
  for (int v = 0; v < 256; ++v)
    if (const GgmlTypeTraits* t = ggml_type_traits(v))
      types.emplace_back(v, t->name, t->block_size, t->type_size);
  return types;
}

}  // namespace

void bind_quant(nb::module_& m) {
  m.def("compose_ggml", &compose_ggml, nb::arg("out"), nb::arg("ids"), nb::arg("token_blocks"),
        nb::arg("ggml_type"), nb::arg("dim"), nb::arg("pos_table").none(), nb::arg("position_ids").none(),
        nb::arg("start"), nb::arg("where"));
  m.def("ggml_types", &ggml_types);
}

}  // namespace tokpos::python
