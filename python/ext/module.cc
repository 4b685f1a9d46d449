// tokpos._core: the Python binding of the ops layer (tokpos/ops.h).
//
// Arrays arrive as nanobind ndarrays (DLPack or the buffer protocol, so numpy
// arrays and torch CPU tensors alike) and go to the ops as DLTensors over the
// same memory: nothing is copied, and the ops' own validation (dtype, shape,
// strides, overlap, ids, positions) decides what is accepted. The GIL is
// released while a kernel runs. The Python package (tokpos/__init__.py)
// allocates results in the caller's framework and calls these functions.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bind.h"
#include "common/check.h"
#include "frontend/params.h"
#include "tokpos/error.h"
#include "tokpos/ops.h"
#include "tokpos/position_table.h"
#include "tokpos/random.h"
#include "tokpos/threading.h"
#include "tokpos/tokpos.h"

namespace nb = nanobind;

namespace {

using tokpos::python::InArray;
using tokpos::python::maybe;
using tokpos::python::OutArray;
using tokpos::python::Tensor;

tokpos::ops::LookupOptions lookup(const char* where, int64_t padding_idx = -1, int64_t unk_id = -1) {
  tokpos::ops::LookupOptions o;
  o.where = where;
  o.padding_idx = padding_idx;
  o.unk_id = unk_id;
  return o;
}

// Every status becomes the Python exception a caller expects, with the
// library's message: ids and positions out of range IndexError, file problems
// OSError, memory MemoryError, a tokpos bug RuntimeError, the rest ValueError.
void translate(const tokpos::Error& e) {
  using tokpos::Status;
  PyObject* type = PyExc_ValueError;
  switch (e.status()) {
    case Status::kIdOutOfRange:
    case Status::kPositionOutOfRange: type = PyExc_IndexError; break;
    case Status::kIoError:
    case Status::kCorruptFile: type = PyExc_OSError; break;
    case Status::kOutOfMemory: type = PyExc_MemoryError; break;
    case Status::kInternal: type = PyExc_RuntimeError; break;
    default: break;
  }
  PyErr_SetString(type, e.what());
}

void compose(const OutArray& out, const InArray& ids, const InArray& token_table,
             const std::optional<InArray>& pos_table, const std::optional<InArray>& position_ids, int64_t start,
             int64_t unk_id, const char* where) {
  const Tensor o(out, "out"), i(ids, "ids"), tok(token_table, "token_table");
  std::optional<Tensor> pos, pids;
  const DLTensor* p = maybe(pos, pos_table, "pos_table");
  const DLTensor* pi = maybe(pids, position_ids, "position_ids");
  const std::string w = where;
  nb::gil_scoped_release release;
  tokpos::ops::compose_forward(o.dl, i.dl, tok.dl, p, pi, start, lookup(w.c_str(), -1, unk_id));
}

// compose over raw CPU addresses: the inference fast path of tokpos.torch,
// which reads each address, shape and dtype from a contiguous CPU tensor in
// the same call (DLPack capsules cost more than the kernel at decode sizes).
// The tensors are row-major contiguous; ids are (B, T), or (T) when B < 0;
// position_ids have ids' shape; pos_table 0: none, position_ids 0: start + t.
// dtypes are tokpos::DType codes. The op validates everything else.
void compose_raw(uintptr_t out, uintptr_t ids, int ids_dtype, int64_t B, int64_t T, uintptr_t token_table,
                 int table_dtype, int64_t V, int64_t D, uintptr_t pos_table, int pos_dtype, int64_t L,
                 uintptr_t position_ids, int position_dtype, int64_t start, const char* where) {
  using tokpos::DType;
  using tokpos::TensorView;
  auto dtype = [](int code, const char* name) {
    if (code < 0 || code > static_cast<int>(DType::kF64)) {
      throw tokpos::Error(tokpos::Status::kInvalidArgument,
                          std::string("tokpos: ") + name + " has unknown dtype code " + std::to_string(code));
    }
    return static_cast<DType>(code);
  };
  auto ptr = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
  const DType out_dtype = dtype(table_dtype, "token_table");
  const bool flat = B < 0;
  const TensorView o(ptr(out), out_dtype,
                     flat ? std::initializer_list<int64_t>{T, D} : std::initializer_list<int64_t>{B, T, D});
  const TensorView i(ptr(ids), dtype(ids_dtype, "ids"),
                     flat ? std::initializer_list<int64_t>{T} : std::initializer_list<int64_t>{B, T});
  const TensorView tok(ptr(token_table), out_dtype, {V, D});
  std::optional<TensorView> pos, pids;
  if (pos_table) pos.emplace(ptr(pos_table), dtype(pos_dtype, "pos_table"), std::initializer_list<int64_t>{L, D});
  if (position_ids) {
    pids.emplace(ptr(position_ids), dtype(position_dtype, "position_ids"),
                 flat ? std::initializer_list<int64_t>{T} : std::initializer_list<int64_t>{B, T});
  }
  const std::string w = where;
  nb::gil_scoped_release release;
  tokpos::ops::compose_forward(*o.get(), *i.get(), *tok.get(), pos ? pos->get() : nullptr,
                               pids ? pids->get() : nullptr, start, lookup(w.c_str()));
}

void compose_backward(const std::optional<OutArray>& d_token_table,
                      const std::optional<OutArray>& d_pos_table, const InArray& d_out, const InArray& ids,
                      const std::optional<InArray>& position_ids, int64_t start, int64_t padding_idx,
                      int64_t unk_id, const char* where, bool scale_grad_by_freq) {
  std::optional<Tensor> dt, dp, pids;
  const DLTensor* t = maybe(dt, d_token_table, "d_token_table");
  const DLTensor* p = maybe(dp, d_pos_table, "d_pos_table");
  const DLTensor* pi = maybe(pids, position_ids, "position_ids");
  const Tensor g(d_out, "d_out"), i(ids, "ids");
  const std::string w = where;
  nb::gil_scoped_release release;
  tokpos::ops::LookupOptions o = lookup(w.c_str(), padding_idx, unk_id);
  o.scale_grad_by_freq = scale_grad_by_freq;
  tokpos::ops::compose_backward(t, p, g.dl, i.dl, pi, start, o);
}

// BERT's sum out (B, T, D) = (token_table[ids] + type_table[type_ids]) +
// pos_table[position], float32, in that order (ops::compose_typed_forward
// without its LayerNorm). type_ids null: type 0; position_ids null: t.
void compose_typed(const OutArray& out, const InArray& ids, const InArray& token_table,
                   const std::optional<InArray>& type_ids, const std::optional<InArray>& type_table,
                   const InArray& pos_table, const std::optional<InArray>& position_ids, const char* where) {
  const Tensor o(out, "out"), i(ids, "ids"), tok(token_table, "token_table"), pos(pos_table, "pos_table");
  std::optional<Tensor> tids, types, pids;
  const DLTensor* ti = maybe(tids, type_ids, "type_ids");
  const DLTensor* ty = maybe(types, type_table, "type_table");
  const DLTensor* pi = maybe(pids, position_ids, "position_ids");
  const int64_t V = tok.dl.ndim > 0 ? tok.dl.shape[0] : 0;
  const std::string w = where;
  nb::gil_scoped_release release;
  const tokpos::ops::RowPlan plan(i.dl, V, pi, 0, lookup(w.c_str()));
  tokpos::ops::compose_typed_forward(o.dl, plan, tok.dl, ti, ty, pos.dl, nullptr, nullptr, 0.0);
}

// The touched rows and their summed gradients (a sparse COO gradient's
// indices and values). Returns the row count U; rows (U) int64 and values
// (U, D) float32 are allocated by the caller from plan_rows' answer.
struct Plan {
  tokpos::ops::RowPlan plan;
};

Plan make_plan(const InArray& ids, int64_t vocab_size, int64_t padding_idx, const char* where) {
  const Tensor i(ids, "ids");
  const std::string w = where;
  nb::gil_scoped_release release;
  return Plan{tokpos::ops::RowPlan(i.dl, vocab_size, nullptr, 0, lookup(w.c_str(), padding_idx))};
}

void plan_touched_rows(const Plan& p, const OutArray& rows) {
  const auto touched = p.plan.touched_rows();
  if (rows.ndim() != 1 || rows.shape(0) != touched.size() || rows.dtype() != nb::dtype<int64_t>() ||
      rows.stride(0) != 1) {
    throw tokpos::Error(tokpos::Status::kInvalidArgument,
                        "tokpos: rows must be a contiguous int64 array of " + std::to_string(touched.size()) +
                            " elements");
  }
  auto* r = static_cast<int64_t*>(rows.data());
  for (size_t k = 0; k < touched.size(); ++k) r[k] = touched[k];
}

void plan_gradient_rows(const Plan& p, const OutArray& values, const InArray& d_out) {
  const Tensor v(values, "values"), g(d_out, "d_out");
  nb::gil_scoped_release release;
  tokpos::ops::token_gradient_rows(v.dl, g.dl, p.plan);
}

void sinusoidal_into(const OutArray& out, int64_t max_context, int64_t dim, double base, const std::string& layout,
                     int64_t start, std::optional<int64_t> padding_idx, double min_timescale) {
  const tokpos::Layout l = tokpos::frontend::parse_layout_param(layout);
  tokpos::DType dtype;
  const nb::dlpack::dtype t = out.dtype();
  if (t == nb::dtype<float>()) {
    dtype = tokpos::DType::kF32;
  } else if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && t.bits == 16) {
    dtype = tokpos::DType::kBF16;
  } else if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && t.bits == 16) {
    dtype = tokpos::DType::kF16;
  } else {
    throw tokpos::Error(tokpos::Status::kInvalidArgument, "tokpos.sinusoidal_table: unsupported output dtype");
  }
  if (out.ndim() != 2 || static_cast<int64_t>(out.shape(0)) != max_context ||
      static_cast<int64_t>(out.shape(1)) != dim || out.stride(1) != 1 || out.stride(0) != dim) {
    throw tokpos::Error(tokpos::Status::kInvalidArgument,
                        "tokpos.sinusoidal_table: out must be a contiguous (max_context, dim) array");
  }
  tokpos::TableOptions o;
  o.layout = l;
  o.base = base;
  o.min_timescale = min_timescale;
  o.padding_idx = padding_idx;
  nb::gil_scoped_release release;
  tokpos::position_table(out.data(), dtype, max_context, dim, start, o);
}

// out (any shape, contiguous float32) = N(mean, std^2) from the documented
// Philox stream (tokpos/random.h): the same table the C++ modules draw.
// first: the index of out's first number in the stream (a slice of a larger
// table, such as a vocab shard's rows, gets the bits the whole table has).
void fill_normal(const OutArray& out, uint64_t seed, uint64_t stream, double mean, double std, uint64_t first) {
  if (out.dtype() != nb::dtype<float>()) {
    throw tokpos::Error(tokpos::Status::kInvalidArgument, "tokpos: fill_normal needs a float32 array");
  }
  int64_t expected = 1;
  for (size_t i = out.ndim(); i-- > 0;) {
    if (out.shape(i) > 1 && out.stride(i) != expected) {
      throw tokpos::Error(tokpos::Status::kInvalidArgument, "tokpos: fill_normal needs a contiguous array");
    }
    expected *= static_cast<int64_t>(out.shape(i));
  }
  float* data = static_cast<float*>(out.data());
  const size_t n = out.size();
  nb::gil_scoped_release release;
  tokpos::fill_normal(std::span<float>(data, n), seed, stream, mean, std, first);
}

// A module's table (out, contiguous float32) from N(0, init_std^2), numbers
// [first, first + size) of the stream: init_std checked first, by the check
// the C++ modules use (finite and >= 0), even when out is empty.
void init_table(const OutArray& out, uint64_t seed, uint64_t stream, double init_std, uint64_t first,
                const std::string& where) {
  tokpos::detail::check_init_std(where.c_str(), init_std);
  fill_normal(out, seed, stream, 0.0, init_std, first);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "tokpos's compiled core: the ops layer over DLPack tensors (use the tokpos package, not this)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const tokpos::Error& e) {
      translate(e);
    }
  });

  m.def("version", [] { return std::string(tokpos_version()); });
  m.def("set_num_threads", &tokpos::set_num_threads, nb::arg("n"));
  m.def("get_num_threads", &tokpos::num_threads);
  m.def("pe_sinusoidal", [](int64_t pos, int64_t dim, int64_t hidden_dim) {
    return tokpos::sinusoidal_value(pos, dim, hidden_dim);
  }, nb::arg("pos"), nb::arg("dim"), nb::arg("hidden_dim"));

  m.def("compose", &compose, nb::arg("out"), nb::arg("ids"), nb::arg("token_table"), nb::arg("pos_table").none(),
        nb::arg("position_ids").none(), nb::arg("start"), nb::arg("unk_id"), nb::arg("where"));
  m.def("compose_raw", &compose_raw, nb::arg("out"), nb::arg("ids"), nb::arg("ids_dtype"), nb::arg("B"),
        nb::arg("T"), nb::arg("token_table"), nb::arg("table_dtype"), nb::arg("V"), nb::arg("D"),
        nb::arg("pos_table"), nb::arg("pos_dtype"), nb::arg("L"), nb::arg("position_ids"),
        nb::arg("position_dtype"), nb::arg("start"), nb::arg("where"));
  m.def("compose_backward", &compose_backward, nb::arg("d_token_table").none(), nb::arg("d_pos_table").none(),
        nb::arg("d_out"), nb::arg("ids"), nb::arg("position_ids").none(), nb::arg("start"),
        nb::arg("padding_idx"), nb::arg("unk_id"), nb::arg("where"), nb::arg("scale_grad_by_freq") = false);
  m.def("compose_typed", &compose_typed, nb::arg("out"), nb::arg("ids"), nb::arg("token_table"),
        nb::arg("type_ids").none(), nb::arg("type_table").none(), nb::arg("pos_table"),
        nb::arg("position_ids").none(), nb::arg("where"));
  m.def("sinusoidal_into", &sinusoidal_into, nb::arg("out"), nb::arg("max_context"), nb::arg("dim"),
        nb::arg("base"), nb::arg("layout"), nb::arg("start"), nb::arg("padding_idx").none(),
        nb::arg("min_timescale"));

  nb::class_<Plan>(m, "RowPlan")
      .def_prop_ro("num_touched", [](const Plan& p) { return p.plan.touched_rows().size(); })
      .def("touched_rows", &plan_touched_rows, nb::arg("rows"))
      .def("gradient_rows", &plan_gradient_rows, nb::arg("values"), nb::arg("d_out"));
  m.def("row_plan", &make_plan, nb::arg("ids"), nb::arg("vocab_size"), nb::arg("padding_idx"), nb::arg("where"));

  m.def("fill_normal", &fill_normal, nb::arg("out"), nb::arg("seed"), nb::arg("stream"), nb::arg("mean"),
        nb::arg("std"), nb::arg("first") = 0);
  m.def("init_table", &init_table, nb::arg("out"), nb::arg("seed"), nb::arg("stream"), nb::arg("init_std"),
        nb::arg("first"), nb::arg("where"));
  m.attr("TOKEN_TABLE_STREAM") = tokpos::kTokenTableStream;
  m.attr("POSITION_TABLE_STREAM") = tokpos::kPositionTableStream;

  tokpos::python::bind_io(m);
  tokpos::python::bind_gguf(m);
  tokpos::python::bind_positions(m);
  tokpos::python::bind_rope(m);
  tokpos::python::bind_shard(m);
  tokpos::python::bind_frontend(m);
  tokpos::python::bind_diagnostics(m);
  tokpos::python::bind_quant(m);
}
