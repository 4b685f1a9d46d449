// tokpos/ops.h: the ops layer. Every front end (the C API, the modules, the
// command-line tool, language bindings) computes through these functions.
//
// Each op takes DLPack tensors (DLTensor, the format numpy, PyTorch, JAX and
// CuPy exchange), validates every argument once, and then runs a kernel that
// never checks again. What an op accepts:
//   - tables and outputs: float32, bfloat16 or float16; ids and positions:
//     int32 or int64; lanes 1;
//   - any strides whose innermost stride is 1 (stride 0 broadcasts an input
//     over a dimension); strides == nullptr means row-major contiguous;
//     byte_offset is honoured; data must be aligned to its element size;
//   - device kDLCPU; any other device is Error(kUnimplemented) naming it.
// On any error nothing is written, and the message names the argument, the
// bad value and its limit. Outputs may not overlap an input or themselves.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>

#include "tokpos/dtype.h"
#include "tokpos/export.h"

namespace tokpos {

// How a call runs: the kernel back end, the thread count, when the forward
// streams its output, and scratch space the backward keeps between calls (so a training loop
// does not allocate its plan buffers every step). The process-wide settings
// (threading.h) are the defaults. One Context serves one thread at a time;
// give each thread its own.
class TOKPOS_API Context {
 public:
  Context();
  ~Context();
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // n >= 1: this many threads; 0 (the default): tokpos::num_threads() at call time.
  Context& set_num_threads(int n);
  int num_threads() const;  // resolved, >= 1
  // bytes >= 0: stream outputs of at least this many bytes; < 0 (the
  // default): tokpos::stream_min_bytes() at call time.
  Context& set_stream_min_bytes(int64_t bytes);
  int64_t stream_min_bytes() const;  // resolved

  // The kernel back end the ops run: "cpu" (the default) or "reference"
  // (plain loops, the definition; slow). Every back end gives the same bits
  // or stays within the tolerance it declares. An unknown name is
  // Error(kInvalidArgument) listing the known ones.
  Context& set_backend(std::string_view name);
  const char* backend() const;

  // Bytes of scratch kept for the next backward; release_scratch frees them.
  size_t scratch_bytes() const;
  void release_scratch();

  struct Scratch;  // defined by the ops layer
  Scratch& scratch();  // the backward's workspace

 private:
  friend struct ContextAccess;
  int threads_ = 0;
  int64_t stream_min_bytes_ = -1;
  const void* backend_ = nullptr;     // the ops layer's kernel table; nullptr: the default ("cpu")
  std::unique_ptr<Scratch> scratch_;  // made by the constructor; a moved-from Context makes a new one on use
};

// A DLTensor over caller memory on the CPU, with its shape and strides held
// inside (so it cannot dangle). Neither copyable nor movable: make it where
// it is used. Strides are row-major contiguous unless given.
class TOKPOS_API TensorView {
 public:
  TensorView(const void* data, DType dtype, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides = {});
  TensorView(const void* data, DType dtype, std::span<const int64_t> shape, std::span<const int64_t> strides = {});
  TensorView(const TensorView&) = delete;
  TensorView& operator=(const TensorView&) = delete;
  operator const DLTensor&() const { return dl_; }
  const DLTensor* get() const { return &dl_; }

 private:
  void init(const void* data, DType dtype, std::span<const int64_t> shape, std::span<const int64_t> strides);
  DLTensor dl_{};
  int64_t shape_[4]{};
  int64_t strides_[4]{};
};

// DLPack's description of a DType (kDLFloat 32/16, kDLBfloat 16, kDLInt 32/64).
TOKPOS_API DLDataType to_dlpack(DType dtype);

namespace ops {

// A vocab-parallel shard (Megatron-LM's VocabParallelEmbedding): the token
// table an op is given holds rows [row_begin, row_begin + R) of a global
// table of vocab_size rows, R being its own row count (R may reach past
// vocab_size: padding rows, never read). Every id is checked against
// vocab_size (an error on every rank alike, before any communication; never
// UNK-mapped). An id inside the shard reads its row; any other contributes
// exactly nothing: the forward writes the position row alone (or zeros when
// there is no position table), and the backward skips it. Summing the
// shards' float32 outputs, with the position table on exactly one of them,
// gives the one-table output bit for bit (-0 may become +0), because each
// sum has one token row and zeros. vocab_size 0: no shard.
struct VocabShard {
  int64_t vocab_size = 0;
  int64_t row_begin = 0;
};

// The rows rank `rank` of `world_size` holds when a vocabulary of vocab_size
// ids is padded up to a multiple of pad_to_multiple_of and split evenly
// (Megatron-LM's make_vocab_size_divisible_by): rows = ceil(V_padded /
// world_size), row_begin = rank * rows. Rows at or past vocab_size are
// padding. Error(kInvalidArgument) names a value out of range.
struct VocabShardRange {
  int64_t row_begin = 0, rows = 0;
};
TOKPOS_API VocabShardRange vocab_shard_range(int64_t vocab_size, int64_t pad_to_multiple_of, int64_t world_size,
                                             int64_t rank);

struct LookupOptions {
  // >= 0: a token id outside [0, V) reads row unk_id instead of failing (the
  // seed lab's UNK fallback). -1 (the default): such an id is an error.
  int64_t unk_id = -1;
  // >= 0: this token row never receives a gradient (PyTorch's padding_idx).
  int64_t padding_idx = -1;
  // Names the caller at the start of error messages; nullptr: the op's name.
  const char* where = nullptr;
  // The token table is a shard of a larger one (VocabShard); unk_id must
  // then be -1, and padding_idx (when >= 0) is a global id.
  VocabShard shard{};
  // The backward divides each token row's gradient by the row's count in
  // the batch (PyTorch's scale_grad_by_freq): the scale 1 / count, computed
  // in double and rounded to the gradient's type, and each source added as
  // one fused multiply-add, one at a time in (b, t) order, as PyTorch's CPU
  // backward adds them, so the bits are PyTorch's.
  bool scale_grad_by_freq = false;
};

// The validated ids and positions of one batch, and the backward's plan:
// every source grouped by the token row and by the position it adds to,
// in increasing (b, t) order. Build it once per batch and pass it to the
// forward and the backward (as llm.c passes its bucket plan): the ids are
// checked and sorted once, and the plan keeps its own copy, so the ids'
// memory may change or go away afterwards. Immutable, so one plan can be
// used by several threads at once.
class TOKPOS_API RowPlan {
 public:
  // ids: (B, T) or (N), int32 or int64. Every id must be in [0, vocab_size)
  // unless options.unk_id >= 0 maps it. With options.shard, vocab_size is the
  // shard's row count R, the ids are checked against options.shard.vocab_size
  // and the plan's rows are the shard's (-1 for an id outside it). Positions: position_ids (the shape of
  // ids) or start + t; they must be >= 0 and are checked against the
  // position table when the plan is used. Throws Error as the ops do.
  RowPlan(const DLTensor& ids, int64_t vocab_size, const DLTensor* position_ids = nullptr, int64_t start = 0,
          const LookupOptions& options = {});
  ~RowPlan();
  RowPlan(const RowPlan&);
  RowPlan& operator=(const RowPlan&);
  RowPlan(RowPlan&&) noexcept;
  RowPlan& operator=(RowPlan&&) noexcept;

  int ids_ndim() const;        // 1 or 2
  int64_t batch() const;       // B (1 for 1-D ids)
  int64_t time() const;        // T (N for 1-D ids)
  int64_t size() const;        // B * T
  int64_t vocab_size() const;  // V
  int64_t padding_idx() const;
  const VocabShard& shard() const;  // vocab_size 0: not a shard
  // The token row each (b, t) reads (after the UNK mapping; -1: none, an id
  // outside a shard), (B*T).
  std::span<const int64_t> token_rows() const;
  // The position of each (b, t), (B*T).
  std::span<const int64_t> positions() const;
  // One past the largest position (0 for an empty batch): a position table
  // needs at least this many rows.
  int64_t position_limit() const;
  // The token rows a backward adds to, sorted and unique (padding_idx left out).
  std::span<const int64_t> touched_rows() const;

  struct Impl;
  const Impl& impl() const;  // Error(kInvalidArgument) on a moved-from plan

 private:
  std::shared_ptr<const Impl> impl_;
};

// out (B, T, D) or (N, D) = token_table[row(b, t)] + pos_table[pos(b, t)],
// each element summed in float32 and rounded once to out's dtype. pos_table
// may be null (token rows only); position_ids may be null (positions start + t).
TOKPOS_API void compose_forward(const DLTensor& out, const DLTensor& ids, const DLTensor& token_table,
                                const DLTensor* pos_table = nullptr, const DLTensor* position_ids = nullptr,
                                int64_t start = 0, const LookupOptions& options = {},
                                const Context* ctx = nullptr);
// The same from a plan (nothing about the ids is checked again).
TOKPOS_API void compose_forward(const DLTensor& out, const RowPlan& plan, const DLTensor& token_table,
                                const DLTensor* pos_table = nullptr, const Context* ctx = nullptr);

// A token table in one of ggml's types, as llama.cpp's GGUF files hold it:
// blocks is a (V, row_bytes) uint8 tensor (inner stride 1), row r the raw
// blocks of token r; ggml_type is ggml's type value (tokpos/ggml_type.h);
// dim is D. Types: f32, f16, bf16 (read as those dtypes: blocks' rows must
// be aligned to the element size) and q8_0, q4_0, q4_1, q5_0, q5_1, q2_K,
// q3_K, q4_K, q5_K, q6_K, q8_K. D must be a whole number of the type's
// blocks and row_bytes its row size (ggml_row_bytes), else an error naming
// the type and its block size. Each looked-up row equals ggml's
// dequantize_row_<type> bit for bit; the position row is added in float as
// the float forward adds it. There is no backward: a quantized table is
// read-only (compose_backward_quantized is the named error).
struct QuantizedTable {
  const DLTensor* blocks = nullptr;
  int ggml_type = 0;
  int64_t dim = 0;
};
TOKPOS_API void compose_forward(const DLTensor& out, const DLTensor& ids, const QuantizedTable& token_table,
                                const DLTensor* pos_table = nullptr, const DLTensor* position_ids = nullptr,
                                int64_t start = 0, const LookupOptions& options = {},
                                const Context* ctx = nullptr);
// Always Error(kUnimplemented) naming the type: the gradient of a quantized
// table is not defined (dequantize it to float32 to train it).
[[noreturn]] TOKPOS_API void compose_backward_quantized(const QuantizedTable& token_table, const char* where = nullptr);

// d_token_table (V, D) += d_out rows grouped by token row (padding_idx
// skipped); d_pos_table (L, D) += d_out rows grouped by position. Either may
// be null. Gradients and d_out must be float32 (else kUnimplemented).
// Only rows that appear change. The order of the additions is fixed
// (tokpos_op_compose_backward in tokpos.h states it): bitwise identical for
// any thread count and any back end.
TOKPOS_API void compose_backward(const DLTensor* d_token_table, const DLTensor* d_pos_table, const DLTensor& d_out,
                                 const DLTensor& ids, const DLTensor* position_ids = nullptr, int64_t start = 0,
                                 const LookupOptions& options = {}, Context* ctx = nullptr);
TOKPOS_API void compose_backward(const DLTensor* d_token_table, const DLTensor* d_pos_table, const DLTensor& d_out,
                                 const RowPlan& plan, Context* ctx = nullptr);

// The token gradient as a sparse matrix (PyTorch's sparse=True): values
// (U, D), float32, U = plan.touched_rows().size(), row u the gradient of
// token row touched_rows()[u]. Overwrites values, with the bits a backward
// would add to a zeroed gradient.
TOKPOS_API void token_gradient_rows(const DLTensor& values, const DLTensor& d_out, const RowPlan& plan,
                                    Context* ctx = nullptr);

// BERT's input stage, fused: for each (b, t)
//   x = (token_table[row] + type_table[type_ids[b, t]]) + pos_table[pos(b, t)]
// in exactly that order (as transformers' BertEmbeddings adds them), then, if
// gamma is given, LayerNorm over D with statistics in double:
// (x - mean) / sqrt(var + eps) * gamma + beta. float32 tables and output.
// type_table null: no token-type term; type_ids null: type 0 everywhere.
TOKPOS_API void compose_typed_forward(const DLTensor& out, const RowPlan& plan, const DLTensor& token_table,
                                      const DLTensor* type_ids, const DLTensor* type_table,
                                      const DLTensor& pos_table, const DLTensor* gamma, const DLTensor* beta,
                                      double eps, const Context* ctx = nullptr);

}  // namespace ops
}  // namespace tokpos
