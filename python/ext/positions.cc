// tokpos._core: the positions bindings (tokpos/positions.h). Arrays become
// DLTensors over the same memory; the C++ functions check them and every
// value before they write; the GIL is released while they run.
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <vector>

#include "bind.h"
#include "tokpos/positions.h"

namespace tokpos::python {
namespace {

using Doubles = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void position_ids_from_mask(const OutArray& out, const InArray& mask, int64_t pad_value) {
  const Tensor o(out, "out"), m(mask, "attention_mask");
  nb::gil_scoped_release release;
  tokpos::position_ids_from_mask(&m.dl, &o.dl, pad_value);
}

void roberta_position_ids(const OutArray& out, const InArray& ids, int64_t padding_idx, int64_t past_length) {
  const Tensor o(out, "out"), i(ids, "input_ids");
  nb::gil_scoped_release release;
  tokpos::roberta_position_ids(&i.dl, padding_idx, past_length, &o.dl);
}

void packed_position_ids(const OutArray& out, const InArray& cu_seqlens, int64_t start) {
  const Tensor o(out, "out"), c(cu_seqlens, "cu_seqlens");
  nb::gil_scoped_release release;
  tokpos::packed_position_ids(&c.dl, start, &o.dl);
}

int64_t packed_document_count(const InArray& position_ids) {
  const Tensor p(position_ids, "position_ids");
  nb::gil_scoped_release release;
  return tokpos::packed_document_count(&p.dl);
}

void cu_seqlens_from_position_ids(const OutArray& out, const InArray& position_ids) {
  const Tensor o(out, "out"), p(position_ids, "position_ids");
  nb::gil_scoped_release release;
  tokpos::cu_seqlens_from_position_ids(&p.dl, &o.dl);
}

std::vector<double> alibi_slopes(int64_t num_heads, double max_bias) {
  return tokpos::alibi_slopes(num_heads, max_bias);
}

void alibi_bias(const OutArray& out, const Doubles& slopes, const InArray& q_positions,
                const InArray& k_positions, int mode) {
  const Tensor o(out, "out"), q(q_positions, "q_positions"), k(k_positions, "k_positions");
  const std::span<const double> s(slopes.data(), slopes.shape(0));
  nb::gil_scoped_release release;
  tokpos::alibi_bias(s, &q.dl, &k.dl, static_cast<tokpos::AlibiMode>(mode), &o.dl);
}

}  // namespace

void bind_positions(nb::module_& m) {
  m.def("position_ids_from_mask", &position_ids_from_mask, nb::arg("out"), nb::arg("attention_mask"),
        nb::arg("pad_value"));
  m.def("roberta_position_ids", &roberta_position_ids, nb::arg("out"), nb::arg("input_ids"),
        nb::arg("padding_idx"), nb::arg("past_length"));
  m.def("packed_position_ids", &packed_position_ids, nb::arg("out"), nb::arg("cu_seqlens"), nb::arg("start"));
  m.def("packed_document_count", &packed_document_count, nb::arg("position_ids"));
  m.def("cu_seqlens_from_position_ids", &cu_seqlens_from_position_ids, nb::arg("out"), nb::arg("position_ids"));
  m.def("alibi_slopes", &alibi_slopes, nb::arg("num_heads"), nb::arg("max_bias"));
  m.def("alibi_bias", &alibi_bias, nb::arg("out"), nb::arg("slopes"), nb::arg("q_positions"),
        nb::arg("k_positions"), nb::arg("mode"));
}

}  // namespace tokpos::python
