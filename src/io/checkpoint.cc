#include "tokpos/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "common/check.h"
#include "tokpos/safetensors.h"

namespace tokpos {
namespace {

struct Entry {
  std::string name;
  std::span<const float> data;  // for saving
  // For loading, called only once the file checks out and every value is
  // read: takes the values (of the checked size) into the model. It must not
  // fail: load_entries commits every entry with it, one after another.
  std::function<void(std::vector<float>&&)> commit;
  std::vector<int64_t> shape;
};

// A module's table: read in place for saving. For loading, an owned table
// is overwritten in place (its memory stays where it was); a borrowed,
// read-only one is replaced by the values read, which the module then owns
// (adopt_table: a move, no allocation). Neither can fail at the checked size.
template <typename Module>
Entry table_entry(const std::string& name, Module& m, std::vector<int64_t> shape) {
  return {name, m.table(),
          [&m](std::vector<float>&& v) {
            if (m.borrowed()) return m.adopt_table(std::move(v));
            std::copy(v.begin(), v.end(), m.mutable_table().begin());
          },
          std::move(shape)};
}

// A buffer the model owns (a gradient, layer norm's parameters): the values
// are copied into it, which cannot fail at the checked size.
Entry buffer_entry(const std::string& name, std::span<float> t, std::vector<int64_t> shape) {
  return {name, t, [t](std::vector<float>&& v) { std::copy(v.begin(), v.end(), t.begin()); }, std::move(shape)};
}

// A module's gradient. Saving reads it (ensure_grad may allocate a zero
// one). Loading writes it: into the gradient the module has, or, when it has
// none yet, the values read become it (adopt_grad: a move, no allocation), so
// nothing is allocated in the module before the file checks out.
template <typename Module>
Entry grad_entry(const std::string& name, Module& m, std::vector<int64_t> shape, bool loading) {
  if (!loading) return buffer_entry(name, m.ensure_grad(), std::move(shape));
  return {name, {},
          [&m](std::vector<float>&& v) {
            if (m.grad().empty()) return m.adopt_grad(std::move(v));
            // The gradient exists: ensure_grad allocates nothing.
            std::copy(v.begin(), v.end(), m.ensure_grad().begin());
          },
          std::move(shape)};
}

// Everything the model holds, as named tensors.
std::vector<Entry> entries(EmbeddingComposer& m, bool grads, bool loading) {
  std::vector<Entry> out;
  auto add = [&](const std::string& name, std::span<float> t, std::vector<int64_t> shape) {
    out.push_back(buffer_entry(name, t, std::move(shape)));
  };
  const int64_t D = m.dim();
  out.push_back(table_entry("token.weight", m.token(), {m.token().vocab_size(), D}));
  auto* learned = dynamic_cast<LearnedPositionalEmbedding*>(&m.position());
  if (learned) {
    out.push_back(table_entry("position.weight", *learned, {learned->max_context(), D}));
  }
  if (m.token_types()) {
    auto& t = *m.token_types();
    out.push_back(table_entry("token_type.weight", t, {t.vocab_size(), D}));
  }
  if (m.layer_norm()) {
    auto& ln = *m.layer_norm();
    add("layer_norm.weight", ln.gamma, {D});
    add("layer_norm.bias", ln.beta, {D});
  }
  if (grads) {
    out.push_back(grad_entry("token.grad", m.token(), {m.token().vocab_size(), D}, loading));
    // Only a learned table has a gradient.
    if (learned) out.push_back(grad_entry("position.grad", *learned, {learned->max_context(), D}, loading));
  }
  return out;
}

// A table and, optionally, its gradient, under "<prefix>weight" / "<prefix>grad".
template <typename Module>
std::vector<Entry> module_entries(Module& m, int64_t rows, bool grads, bool loading) {
  std::vector<Entry> out;
  const std::vector<int64_t> shape = {rows, m.dim()};
  out.push_back(table_entry("weight", m, shape));
  if (grads) out.push_back(grad_entry("grad", m, shape, loading));
  return out;
}

// A failed write (missing directory, full disk) is kIoError; the previous file is kept.
void save_entries(const std::string& path, const std::vector<Entry>& list) {
  std::vector<TensorRef> refs;
  for (const auto& e : list) refs.push_back({e.name, "F32", e.shape, e.data.data(), e.data.size_bytes()});
  write_safetensors(path, refs, {{"format", "tokpos"}});
}

void load_entries(const std::string& path, const std::vector<Entry>& list) {
  constexpr const char* kWhere = "load_checkpoint";
  // An unreadable file is kIoError and a malformed one kCorruptFile (from
  // SafetensorsFile::open). A well-formed file that does not fit the model is
  // the caller's mismatch: a missing tensor or a non-float dtype is
  // kInvalidArgument, a tensor of another shape kShapeMismatch. Every value
  // is copied, so the file is read (pread), not mapped: one truncated while
  // it is loaded is a named error, not SIGBUS.
  const auto file = SafetensorsFile::open(path, SafetensorsFile::Access::kRead);
  // Check everything first: a failed load changes nothing.
  for (const auto& e : list) {
    if (!file.contains(e.name))
      detail::fail(Status::kInvalidArgument, kWhere, path, ": missing tensor '", e.name, "'");
    const auto& info = file.info(e.name);
    if (info.shape != e.shape) {
      int64_t want = 1;
      for (const int64_t n : e.shape) want *= n;
      detail::fail(Status::kShapeMismatch, kWhere, path, ": tensor '", e.name, "' has ", info.shape.size(),
                   "-d shape with ", info.numel(), " elements; the model needs ", want);
    }
    if (info.dtype != "F32" && info.dtype != "F16" && info.dtype != "BF16") {
      detail::fail(Status::kInvalidArgument, kWhere, path, ": tensor '", e.name, "' has dtype ", info.dtype);
    }
  }
  // Every allocation happens here, before the model changes: the values of
  // every tensor, read and converted to F32 (of the checked sizes). Any
  // failure (a short read, bad_alloc) leaves the model as it was.
  std::vector<std::vector<float>> values;
  values.reserve(list.size());
  for (const auto& e : list) values.push_back(file.read_f32(e.name));
  // The commits allocate nothing and cannot fail (a table is adopted by a
  // move, a buffer is copied into): once the first module changes, every
  // other one does too.
  for (size_t k = 0; k < list.size(); ++k) list[k].commit(std::move(values[k]));
}

}  // namespace

void save_checkpoint(const std::string& path, const EmbeddingComposer& model, bool with_gradients) {
  // ensure_grad may allocate a zero gradient; the parameters are only read.
  save_entries(path, entries(const_cast<EmbeddingComposer&>(model), with_gradients, false));
}

void load_checkpoint(const std::string& path, EmbeddingComposer& model, bool with_gradients) {
  load_entries(path, entries(model, with_gradients, true));
}

void save_checkpoint(const std::string& path, const TokenEmbedding& m, bool with_gradients) {
  auto& mm = const_cast<TokenEmbedding&>(m);
  save_entries(path, module_entries(mm, mm.vocab_size(), with_gradients, false));
}
void load_checkpoint(const std::string& path, TokenEmbedding& m, bool with_gradients) {
  load_entries(path, module_entries(m, m.vocab_size(), with_gradients, true));
}
void save_checkpoint(const std::string& path, const LearnedPositionalEmbedding& m, bool with_gradients) {
  auto& mm = const_cast<LearnedPositionalEmbedding&>(m);
  save_entries(path, module_entries(mm, mm.max_context(), with_gradients, false));
}
void load_checkpoint(const std::string& path, LearnedPositionalEmbedding& m, bool with_gradients) {
  load_entries(path, module_entries(m, m.max_context(), with_gradients, true));
}

}  // namespace tokpos
