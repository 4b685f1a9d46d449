// tokpos._core: the rope bindings (tokpos/rope.h).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bind.h"
#include "tokpos/ops.h"
#include "tokpos/rope.h"

namespace tokpos::python {

namespace {

RopeLayout layout_named(const std::string& layout, const char* where) {
  if (layout == "half") return RopeLayout::kHalf;
  if (layout == "interleaved") return RopeLayout::kInterleaved;
  throw Error(Status::kInvalidArgument, std::string(where) + ": layout = '" + layout + "' is not 'half' or 'interleaved'");
}

}  // namespace

void bind_rope(nb::module_& m) {
  nb::class_<RopeScaling>(m, "RopeScaling")
      .def(nb::init<>())
      .def_prop_rw(
          "type", [](const RopeScaling& s) { return std::string(rope_type_name(s.type)); },
          [](RopeScaling& s, const std::string& name) { s.type = rope_type_from_name(name); })
      .def_rw("factor", &RopeScaling::factor, nb::arg().none())
      .def_rw("original_max_position_embeddings", &RopeScaling::original_max_position_embeddings, nb::arg().none())
      .def_rw("max_position_embeddings", &RopeScaling::max_position_embeddings, nb::arg().none())
      .def_rw("low_freq_factor", &RopeScaling::low_freq_factor, nb::arg().none())
      .def_rw("high_freq_factor", &RopeScaling::high_freq_factor, nb::arg().none())
      .def_rw("beta_fast", &RopeScaling::beta_fast, nb::arg().none())
      .def_rw("beta_slow", &RopeScaling::beta_slow, nb::arg().none())
      .def_rw("mscale", &RopeScaling::mscale, nb::arg().none())
      .def_rw("mscale_all_dim", &RopeScaling::mscale_all_dim, nb::arg().none())
      .def_rw("attention_factor", &RopeScaling::attention_factor, nb::arg().none())
      .def_rw("truncate", &RopeScaling::truncate)
      .def_rw("short_factor", &RopeScaling::short_factor)
      .def_rw("long_factor", &RopeScaling::long_factor)
      .def_rw("partial_rotary_factor", &RopeScaling::partial_rotary_factor, nb::arg().none());

  // The type of a scaling dict from its "rope_type" and "type" values (None: absent), by the core's rule.
  m.def(
      "rope_scaling_type",
      [](const std::optional<std::string>& rope_type, const std::optional<std::string>& type) {
        const auto view = [](const std::optional<std::string>& v) {
          return v ? std::optional<std::string_view>(*v) : std::nullopt;
        };
        return std::string(rope_type_name(tokpos::rope_scaling_type(view(rope_type), view(type))));
      },
      nb::arg("rope_type").none(), nb::arg("type").none());

  // (inv_freq as a list of floats, attention_factor); tokpos/rope.py makes the array.
  m.def(
      "rope_frequencies",
      [](int64_t dim, double base, const RopeScaling& scaling, std::optional<int64_t> seq_len) {
        RopeFrequencies r = rope_frequencies(dim, base, scaling, seq_len);
        return std::make_pair(std::move(r.inv_freq), r.attention_factor);
      },
      nb::arg("dim"), nb::arg("base"), nb::arg("scaling"), nb::arg("seq_len").none());

  // out = RoPE(x) through ops::apply_rope; inv_freq a contiguous float64 vector.
  m.def(
      "apply_rope",
      [](const OutArray& out, const InArray& x, const InArray& positions,
         const nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>& inv_freq,
         const std::string& layout, int64_t rotary_dim, double attention_factor, bool inverse, const char* where) {
        RopeApplyOptions o;
        o.layout = layout_named(layout, where);
        o.rotary_dim = rotary_dim;
        o.attention_factor = attention_factor;
        o.inverse = inverse;
        const std::string w = where;
        o.where = w.c_str();
        const Tensor ot(out, "out"), xt(x, "x"), pt(positions, "positions");
        const std::span<const double> freqs(inv_freq.data(), inv_freq.shape(0));
        nb::gil_scoped_release release;
        ops::apply_rope(ot.dl, xt.dl, pt.dl, freqs, o);
      },
      nb::arg("out"), nb::arg("x"), nb::arg("positions"), nb::arg("inv_freq"), nb::arg("layout"),
      nb::arg("rotary_dim"), nb::arg("attention_factor"), nb::arg("inverse"), nb::arg("where"));

  // out = x rotated by cos and sin through ops::apply_rope_tables.
  m.def(
      "apply_rope_tables",
      [](const OutArray& out, const InArray& x, const InArray& cos, const InArray& sin, const std::string& layout,
         bool inverse, const char* where) {
        RopeTablesOptions o;
        o.layout = layout_named(layout, where);
        o.inverse = inverse;
        const std::string w = where;
        o.where = w.c_str();
        const Tensor ot(out, "out"), xt(x, "x"), ct(cos, "cos"), st(sin, "sin");
        nb::gil_scoped_release release;
        ops::apply_rope_tables(ot.dl, xt.dl, ct.dl, st.dl, o);
      },
      nb::arg("out"), nb::arg("x"), nb::arg("cos"), nb::arg("sin"), nb::arg("layout"), nb::arg("inverse"),
      nb::arg("where"));

  // The same by address, shape and element strides (torch's CPU tensors,
  // whose DLPack capsules cost more than a decode step's kernel): dtype a
  // tokpos::DType code, shared by all four; cos and sin share a shape.
  m.def(
      "apply_rope_tables_raw",
      [](uintptr_t out, uintptr_t x, uintptr_t cos, uintptr_t sin, int dtype, const std::vector<int64_t>& x_shape,
         const std::vector<int64_t>& x_strides, const std::vector<int64_t>& out_strides,
         const std::vector<int64_t>& cos_shape, const std::vector<int64_t>& cos_strides,
         const std::vector<int64_t>& sin_strides, const std::string& layout, bool inverse, const char* where) {
        if (dtype < 0 || dtype > static_cast<int>(DType::kF64)) {
          throw Error(Status::kInvalidArgument, std::string(where) + ": unknown dtype code " + std::to_string(dtype));
        }
        if (x_strides.size() != x_shape.size() || out_strides.size() != x_shape.size() ||
            cos_strides.size() != cos_shape.size() || sin_strides.size() != cos_shape.size()) {
          throw Error(Status::kInvalidArgument, std::string(where) + ": every shape needs one stride per dimension");
        }
        RopeTablesOptions o;
        o.layout = layout_named(layout, where);
        o.inverse = inverse;
        const std::string w = where;
        o.where = w.c_str();
        const auto d = static_cast<DType>(dtype);
        auto ptr = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
        const TensorView ov(ptr(out), d, x_shape, out_strides), xv(ptr(x), d, x_shape, x_strides);
        const TensorView cv(ptr(cos), d, cos_shape, cos_strides), sv(ptr(sin), d, cos_shape, sin_strides);
        nb::gil_scoped_release release;
        ops::apply_rope_tables(ov, xv, cv, sv, o);
      },
      nb::arg("out"), nb::arg("x"), nb::arg("cos"), nb::arg("sin"), nb::arg("dtype"), nb::arg("x_shape"),
      nb::arg("x_strides"), nb::arg("out_strides"), nb::arg("cos_shape"), nb::arg("cos_strides"),
      nb::arg("sin_strides"), nb::arg("layout"), nb::arg("inverse"), nb::arg("where"));
}

}  // namespace tokpos::python
