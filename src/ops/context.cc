#include "ops/context.h"

#include <algorithm>
#include <string>

#include "common/check.h"
#include "tokpos/ops.h"
#include "tokpos/threading.h"

namespace tokpos {

Context::Context() : scratch_(std::make_unique<Scratch>()) {}
Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

Context& Context::set_num_threads(int n) {
  threads_ = std::max(0, n);
  return *this;
}
int Context::num_threads() const {
  return threads_ > 0 ? threads_ : tokpos::num_threads();
}
Context& Context::set_stream_min_bytes(int64_t bytes) {
  stream_min_bytes_ = bytes < 0 ? -1 : bytes;
  return *this;
}
int64_t Context::stream_min_bytes() const {
  return stream_min_bytes_ >= 0 ? stream_min_bytes_ : tokpos::stream_min_bytes();
}
Context& Context::set_backend(std::string_view name) {
  std::string known;
  for (const kernels::KernelTable* k : kernels::backends()) {
    if (name == k->name) {
      backend_ = k;
      return *this;
    }
    known += known.empty() ? "" : ", ";
    known += k->name;
  }
  tokpos::detail::fail(Status::kInvalidArgument, "Context::set_backend", "no back end named '", name,
                       "' (known: ", known, ")");
}
const char* Context::backend() const {
  return ops::detail::kernels_for(this).name;
}

size_t Context::scratch_bytes() const {
  return scratch_ ? scratch_->ws.bytes() : 0;
}
void Context::release_scratch() {
  if (scratch_) scratch_->ws.release();  // the back end choice stays
}
Context::Scratch& Context::scratch() {
  if (!scratch_) scratch_ = std::make_unique<Scratch>();  // only after a move
  return *scratch_;
}

namespace ops::detail {

kernels::Exec exec_for(const Context* ctx, kernels::Workspace* ws) {
  kernels::Exec ex;
  ex.threads = ctx ? ctx->num_threads() : tokpos::num_threads();
  ex.stream_min_bytes = ctx ? ctx->stream_min_bytes() : tokpos::stream_min_bytes();
  ex.ws = ws;
  return ex;
}

kernels::Workspace* workspace_of(Context* ctx) {
  return ctx ? &ctx->scratch().ws : nullptr;
}

const kernels::KernelTable& kernels_for(const Context* ctx) {
  const kernels::KernelTable* k = ctx ? ContextAccess::backend(*ctx) : nullptr;
  return k != nullptr ? *k : kernels::active_kernels();
}

}  // namespace ops::detail

// ---- TensorView ------------------------------------------------------------------

DLDataType to_dlpack(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kF64: return {kDLFloat, 64, 1};
  }
  return {kDLOpaqueHandle, 0, 0};
}

TensorView::TensorView(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                       std::initializer_list<int64_t> strides) {
  init(data, dtype, {shape.begin(), shape.size()}, {strides.begin(), strides.size()});
}
TensorView::TensorView(const void* data, DType dtype, std::span<const int64_t> shape,
                       std::span<const int64_t> strides) {
  init(data, dtype, shape, strides);
}

void TensorView::init(const void* data, DType dtype, std::span<const int64_t> shape,
                      std::span<const int64_t> strides) {
  constexpr const char* kWhere = "TensorView";
  if (shape.size() > 4) tokpos::detail::fail(Status::kInvalidArgument, kWhere, shape.size(), " dimensions; at most 4");
  if (!strides.empty() && strides.size() != shape.size())
    tokpos::detail::fail(Status::kShapeMismatch, kWhere, strides.size(), " strides for ", shape.size(),
                         " dimensions");
  std::copy(shape.begin(), shape.end(), shape_);
  std::copy(strides.begin(), strides.end(), strides_);
  dl_.data = const_cast<void*>(data);
  dl_.device = {kDLCPU, 0};
  dl_.ndim = static_cast<int32_t>(shape.size());
  dl_.dtype = to_dlpack(dtype);
  dl_.shape = shape_;
  dl_.strides = strides.empty() ? nullptr : strides_;
  dl_.byte_offset = 0;
}

}  // namespace tokpos
