// The seed lesson's diagnostics (tokpos/diagnostics.h) on a caller's (L, D)
// table. tokpos.adjacent_cosine and friends (python/tokpos/diagnostics.py)
// check the argument and hand a C-contiguous float32 array here; the core
// checks the sizes and the offset again, with its own messages.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bind.h"
#include "frontend/params.h"
#include "tokpos/diagnostics.h"

namespace tokpos::python {
namespace {

using Table = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

struct View {
  std::span<const float> table;
  int64_t L, D;
};

View view(const Table& t) {
  const auto L = static_cast<int64_t>(t.shape(0)), D = static_cast<int64_t>(t.shape(1));
  return {std::span<const float>(t.data(), static_cast<size_t>(L * D)), L, D};
}

}  // namespace

void bind_diagnostics(nb::module_& m) {
  nb::class_<RelativeFit>(m, "RelativeFit",
                          "How well PE(p + k) = R_k PE(p) holds, R_k one 2x2 rotation per sin/cos column pair")
      .def_ro("offset", &RelativeFit::offset, "k")
      .def_ro("pairs", &RelativeFit::pairs, "column pairs fitted")
      .def_ro("max_residual", &RelativeFit::max_residual, "largest |residual| of any fitted entry")
      .def_ro("relative", &RelativeFit::relative, "max_residual / largest |entry| of the fitted columns")
      .def("__repr__", [](const RelativeFit& f) {
        return "RelativeFit(offset=" + std::to_string(f.offset) + ", pairs=" + std::to_string(f.pairs) +
               ", max_residual=" + nb::repr(nb::float_(f.max_residual)).c_str() +
               ", relative=" + nb::repr(nb::float_(f.relative)).c_str() + ")";
      });
  m.def(
      "adjacent_cosine",
      [](const Table& t) {
        const View v = view(t);
        nb::gil_scoped_release release;
        return adjacent_cosine(v.table, v.L, v.D);
      },
      nb::arg("table"));
  m.def(
      "cosine_by_offset",
      [](const Table& t, int64_t max_offset) {
        const View v = view(t);
        nb::gil_scoped_release release;
        return cosine_by_offset(v.table, v.L, v.D, max_offset);
      },
      nb::arg("table"), nb::arg("max_offset"));
  m.def(
      "relative_position_fit",
      [](const Table& t, int64_t k, const std::string& layout) {
        const View v = view(t);
        const Layout l = frontend::parse_layout_param(layout);
        nb::gil_scoped_release release;
        return relative_position_fit(v.table, v.L, v.D, k, l);
      },
      nb::arg("table"), nb::arg("k"), nb::arg("layout"));
}

}  // namespace tokpos::python
