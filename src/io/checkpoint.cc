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
  std::span<const float> data;               // for saving
  std::function<std::span<float>()> target;  // for loading, asked for only once the file checks out
  std::vector<int64_t> shape;
};

// A module's table: read in place for saving; for loading, a borrowed
// (read-only) table is first copied into a buffer the module owns.
template <typename Module>
Entry table_entry(const std::string& name, Module& m, std::vector<int64_t> shape) {
  return {name, m.table(),
          [&m] {
            m.make_owned();
            return m.mutable_table();
          },
          std::move(shape)};
}

// Everything the model holds, as named tensors.
std::vector<Entry> entries(EmbeddingComposer& m, bool grads) {
  std::vector<Entry> out;
  auto add = [&](const std::string& name, std::span<float> t, std::vector<int64_t> shape) {
    out.push_back({name, t, [t] { return t; }, std::move(shape)});
  };
  const int64_t D = m.dim();
  out.push_back(table_entry("token.weight", m.token(), {m.token().vocab_size(), D}));
  if (auto* learned = dynamic_cast<LearnedPositionalEmbedding*>(&m.position())) {
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
    add("token.grad", m.token().ensure_grad(), {m.token().vocab_size(), D});
    auto g = m.position().ensure_grad();
    if (!g.empty()) add("position.grad", g, {m.position().max_context(), D});
  }
  return out;
}

// A table and, optionally, its gradient, under "<prefix>weight" / "<prefix>grad".
template <typename Module>
std::vector<Entry> module_entries(Module& m, int64_t rows, bool grads) {
  std::vector<Entry> out;
  const std::vector<int64_t> shape = {rows, m.dim()};
  out.push_back(table_entry("weight", m, shape));
  if (grads) {
    auto g = m.ensure_grad();
    out.push_back({"grad", g, [g] { return g; }, shape});
  }
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
  std::vector<std::vector<float>> values;
  for (const auto& e : list) values.push_back(file.read_f32(e.name));  // may throw: still nothing changed
  // make_owned may still fail to allocate; the values are only written after.
  std::vector<std::span<float>> targets;
  for (const auto& e : list) targets.push_back(e.target());
  for (size_t k = 0; k < list.size(); ++k) std::copy(values[k].begin(), values[k].end(), targets[k].begin());
}

}  // namespace

void save_checkpoint(const std::string& path, const EmbeddingComposer& model, bool with_gradients) {
  // ensure_grad may allocate a zero gradient; the parameters are only read.
  save_entries(path, entries(const_cast<EmbeddingComposer&>(model), with_gradients));
}

void load_checkpoint(const std::string& path, EmbeddingComposer& model, bool with_gradients) {
  load_entries(path, entries(model, with_gradients));
}

void save_checkpoint(const std::string& path, const TokenEmbedding& m, bool with_gradients) {
  auto& mm = const_cast<TokenEmbedding&>(m);
  save_entries(path, module_entries(mm, mm.vocab_size(), with_gradients));
}
void load_checkpoint(const std::string& path, TokenEmbedding& m, bool with_gradients) {
  load_entries(path, module_entries(m, m.vocab_size(), with_gradients));
}
void save_checkpoint(const std::string& path, const LearnedPositionalEmbedding& m, bool with_gradients) {
  auto& mm = const_cast<LearnedPositionalEmbedding&>(m);
  save_entries(path, module_entries(mm, mm.max_context(), with_gradients));
}
void load_checkpoint(const std::string& path, LearnedPositionalEmbedding& m, bool with_gradients) {
  load_entries(path, module_entries(m, m.max_context(), with_gradients));
}

}  // namespace tokpos
