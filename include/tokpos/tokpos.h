/* tokpos/tokpos.h: the C API.
 *
 * Plain C11, in four parts:
 *   1. status, errors, version, threads;
 *   2. the ops, on DLPack tensors (DLTensor): tokpos_op_* and the position-id,
 *      RoPE and ALiBi functions. They are the API: each validates every
 *      argument once (tokpos/ops.h and tokpos/positions.h, the checks every
 *      front end shares) and then runs its kernel;
 *   3. conveniences over the ops: the raw-pointer compose and table
 *      functions, the shard helpers and the modules behind opaque handles.
 *      Each names the op (or the module method over an op) it calls. It
 *      turns its pointers and sizes into the op's tensors, checking only
 *      what C alone can get wrong (NULL, alignment, enum values, sizes and
 *      the products of sizes), and leaves every other check to the op;
 *   4. the lab's two functions (seed 002): tokpos_pe_sinusoidal and
 *      tokpos_embedding_forward.
 * No C++ exception ever crosses this boundary. On failure:
 *   - nothing is written to any output or gradient buffer,
 *   - tokpos_last_error() returns a message naming the function, the bad
 *     value and its limit (thread-local; kept until the next failure).
 * Shapes follow llm.c: B batch, T time, D width, V vocabulary, L max context.
 * Tables are row-major. The raw-pointer functions take float32 tables,
 * except the _ex variants, which also take bfloat16 and float16 (uint16_t
 * bits; see tokpos_dtype), and tokpos_compose_forward_ex float64 (double);
 * the ops take float32, bfloat16 or float16 tables and outputs. Gradients
 * are float32. A float64 lookup (tokpos_op_compose_forward and _backward,
 * tokpos_compose_forward_ex) is float64 throughout: every table, output and
 * gradient of the call float64, summed in double.
 */
#ifndef TOKPOS_TOKPOS_H
#define TOKPOS_TOKPOS_H

#include <dlpack/dlpack.h>
#include <stdint.h>

#include "tokpos/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== 1. Status, errors, version, threads ================================== */

typedef enum tokpos_status {
  TOKPOS_OK = 0,
  TOKPOS_INVALID_ARGUMENT = 1,      /* a size, option or argument outside its range */
  TOKPOS_NULL_POINTER = 2,          /* a required pointer was NULL */
  TOKPOS_ID_OUT_OF_RANGE = 3,       /* a token id outside [0, V) */
  TOKPOS_POSITION_OUT_OF_RANGE = 4, /* a position past the table: T > L, start + T > L */
  TOKPOS_SHAPE_MISMATCH = 5,        /* two modules or buffers disagree on a dimension */
  TOKPOS_SIZE_OVERFLOW = 6,         /* a product of sizes overflows int64 or size_t */
  TOKPOS_OUT_OF_MEMORY = 7,         /* an allocation failed */
  TOKPOS_INTERNAL = 8,              /* a bug in tokpos */
  TOKPOS_UNIMPLEMENTED = 9,         /* valid but not supported (yet): a device, a dtype */
  TOKPOS_IO_ERROR = 10,             /* open, read, write, fsync or rename failed (errno's text) */
  TOKPOS_CORRUPT_FILE = 11,         /* a malformed safetensors or .npy file */
  /* Not statuses: they make every int a valid value of each enum in C++, so
   * a C caller passing any int is well-defined there (checked, not UB). */
  TOKPOS_STATUS_MIN_ENUM_ = -0x7fffffff - 1,
  TOKPOS_STATUS_MAX_ENUM_ = 0x7fffffff
} tokpos_status;

/* "TOKPOS_OK", "TOKPOS_ID_OUT_OF_RANGE", ...; "TOKPOS_UNKNOWN_STATUS" otherwise. */
TOKPOS_API const char* tokpos_status_string(tokpos_status s);
/* Message of this thread's last failure; "" if none yet. */
TOKPOS_API const char* tokpos_last_error(void);
/* "0.1.0" */
TOKPOS_API const char* tokpos_version(void);
/* n >= 1: use n threads; 0 (or negative) = all cores the process may run on (counted
   at the first use and again at each call). Results never depend on it. */
TOKPOS_API void tokpos_set_num_threads(int n);
TOKPOS_API int tokpos_get_num_threads(void);
/* A forward whose output is at least `bytes` bytes writes it with streaming
   (non-temporal) stores, past the cache; smaller outputs stay in cache for the
   next layer. bytes < 0: back to the start-up value, TOKPOS_STREAM_MIN_BYTES
   from the environment, else half the last-level cache, at most 16 MiB;
   0: always (except a decode step of at most 16 tokens); INT64_MAX: never. Results never depend on it. */
TOKPOS_API void tokpos_set_stream_min_bytes(int64_t bytes);
TOKPOS_API int64_t tokpos_get_stream_min_bytes(void);

/* ==== 2. The ops (DLTensor) ================================================ */

/* ---- Compose: token rows plus position rows -------------------------- *
 *
 * Tensors are described by DLPack's DLTensor (what numpy, PyTorch, JAX and
 * CuPy exchange):
 *   - tables and out: float32, bfloat16 or float16 (kDLFloat 32/16, kDLBfloat 16),
 *     or float64 (kDLFloat 64) for every table and out of a call at once;
 *     ids and position_ids: int32 or int64 (kDLInt 32/64); lanes 1;
 *   - any strides whose innermost (D) stride is 1, including 0 (broadcast)
 *     on other dimensions; strides NULL means row-major contiguous;
 *     byte_offset is honoured; data must be aligned to its element size;
 *   - device kDLCPU only: any other is TOKPOS_UNIMPLEMENTED, naming it.
 * Shapes: ids (B, T) or (N); out and d_out (B, T, D) or (N, D);
 * token_table (V, D); pos_table (L, D); position_ids the shape of ids.
 * The position of (b, t) is position_ids[b, t] if given, else start + t
 * (start + n for 1-D ids). Everything is checked before anything is written:
 * on failure nothing changes and tokpos_last_error() names the argument, the
 * bad value and its limit. out may not overlap a table, ids or
 * position_ids, nor itself (TOKPOS_INVALID_ARGUMENT). */

/* out = token_table[ids] (+ pos_table[position]), summed in float32 and
 * rounded once to out's dtype (float64: summed in double, no rounding; a
 * float64 table beside a narrower one is TOKPOS_UNIMPLEMENTED). pos_table NULL: token rows only
 * (tokpos::ops::compose_forward). */
TOKPOS_API tokpos_status tokpos_op_compose_forward(const DLTensor* out, const DLTensor* ids,
                                                   const DLTensor* token_table,
                                                   const DLTensor* pos_table,    /* may be NULL: token rows only */
                                                   const DLTensor* position_ids, /* may be NULL */
                                                   int64_t start);

/* The same from a token table in one of ggml's types, as llama.cpp's GGUF
 * files hold it: token_blocks (V, row_bytes) uint8 (kDLUInt 8), row v the raw
 * ggml blocks of token v, inner stride 1; ggml_type ggml's enum ggml_type
 * value: F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q2_K 10,
 * Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, Q8_K 15, BF16 30; dim D. Checked, as
 * for every op, before anything is written: ggml_type a ggml type
 * (TOKPOS_INVALID_ARGUMENT) and one of these (TOKPOS_UNIMPLEMENTED); D a
 * whole number of the type's blocks (TOKPOS_INVALID_ARGUMENT naming the type
 * and its block size) and row_bytes = D / block_size * the block's bytes
 * (TOKPOS_SHAPE_MISMATCH); F32, F16 and BF16 rows aligned to their element
 * size. out, ids, pos_table and position_ids as above. Each looked-up row
 * equals ggml's dequantize_row_<type> bit for bit; the position row is
 * added in float32 as tokpos_op_compose_forward adds it. There is no
 * backward: a quantized table is read-only (dequantize it to train it).
 * (tokpos::ops::compose_forward with a QuantizedTable.) */
TOKPOS_API tokpos_status tokpos_op_compose_forward_ggml(const DLTensor* out, const DLTensor* ids,
                                                        const DLTensor* token_blocks, int32_t ggml_type,
                                                        int64_t dim,
                                                        const DLTensor* pos_table,    /* may be NULL */
                                                        const DLTensor* position_ids, /* may be NULL */
                                                        int64_t start);

/* d_token_table (V, D) += d_out rows grouped by id; d_pos_table (L, D) +=
 * d_out rows grouped by position. Either gradient may be NULL. Gradients and
 * d_out must be float32, or all float64 (else TOKPOS_UNIMPLEMENTED), added in
 * that type in the order below. Only rows that appear
 * change. The order of the additions is fixed, so the bits are the same for
 * any thread count: a row with at most 64 sources adds them one at a time in
 * (b, t) order, grad = ((grad + s1) + s2) + ...; a row with more adds
 * blocks of 64 sources, each block summed from its first source in order,
 * the block sums added in order. Gradients may not overlap each other or the
 * inputs (tokpos::ops::compose_backward). */
TOKPOS_API tokpos_status tokpos_op_compose_backward(const DLTensor* d_token_table, /* may be NULL */
                                                    const DLTensor* d_pos_table,   /* may be NULL */
                                                    const DLTensor* d_out, const DLTensor* ids,
                                                    const DLTensor* position_ids,  /* may be NULL */
                                                    int64_t start);

/* ---- Vocab-parallel shards (Megatron-LM's VocabParallelEmbedding) ------ *
 *
 * A rank holds rows [row_begin, row_begin + R) of a global (vocab_size, D)
 * token table as shard_table (R, D); R may reach past vocab_size (padding
 * rows, never read or written). Every id is checked against vocab_size, so a
 * bad id fails identically on every rank before any communication; ids are
 * never UNK-mapped. An id inside the shard reads its row; any other adds
 * nothing: its out row is the position row alone (pos_table given) or zeros.
 * Give pos_table to exactly one rank and sum the float32 outputs (e.g.
 * MPI_Allreduce with MPI_SUM): the result equals tokpos_op_compose_forward on
 * the whole table bit for bit (a -0 may come back as +0). The backward adds
 * to d_shard_table (R, D) only the rows of ids inside the shard, in the same
 * order as the one-table backward, so its rows equal the matching rows of the
 * one-table gradient bit for bit. Other arguments as above. The same two ops
 * with a tokpos::ops::VocabShard. */
TOKPOS_API tokpos_status tokpos_op_compose_forward_shard(const DLTensor* out, const DLTensor* ids,
                                                         const DLTensor* shard_table, int64_t vocab_size,
                                                         int64_t row_begin,
                                                         const DLTensor* pos_table,    /* may be NULL */
                                                         const DLTensor* position_ids, /* may be NULL */
                                                         int64_t start);
TOKPOS_API tokpos_status tokpos_op_compose_backward_shard(const DLTensor* d_shard_table, /* may be NULL */
                                                          const DLTensor* d_pos_table,   /* may be NULL */
                                                          const DLTensor* d_out, const DLTensor* ids,
                                                          int64_t vocab_size, int64_t row_begin,
                                                          const DLTensor* position_ids, /* may be NULL */
                                                          int64_t start);

/* Rank `rank` of `world_size` holds rows [*row_begin, *row_begin + *rows) of
 * a vocabulary padded up to a multiple of pad_to_multiple_of (>= 1):
 * *rows = ceil(V_padded / world_size), *row_begin = rank * *rows
 * (tokpos::ops::vocab_shard_range). */
TOKPOS_API tokpos_status tokpos_vocab_shard_range(int64_t* row_begin, int64_t* rows, int64_t vocab_size,
                                                  int64_t pad_to_multiple_of, int world_size, int rank);

/* ---- Position ids (include/tokpos/positions.h) ------------------------ */

/* Position ids as the models compute them (docs/positions.md). Tensors as in
 * the compose ops: int32 or int64, any strides, kDLCPU. Every value is checked
 * before anything is written; out may not overlap an input. A result that
 * does not fit an int32 out is TOKPOS_INVALID_ARGUMENT. */

/* transformers' generation rule (GPT-2, Llama): attention_mask (B, S) covers
 * the cached and the new tokens; position = cumsum(mask) - 1 along each row,
 * 1 where mask is 0; out (B, T), T <= S, receives the last T columns. Mask
 * values other than 0 and 1 are TOKPOS_INVALID_ARGUMENT naming (b, s). */
TOKPOS_API tokpos_status tokpos_position_ids_from_mask(const DLTensor* out, const DLTensor* attention_mask);

/* RoBERTa / XLM-R: (cumsum(ids != padding_idx) + past_length) *
 * (ids != padding_idx) + padding_idx along each row. input_ids (B, S) or (S);
 * out the same shape; padding_idx and past_length >= 0. */
TOKPOS_API tokpos_status tokpos_roberta_position_ids(const DLTensor* out, const DLTensor* input_ids,
                                                     int64_t padding_idx, int64_t past_length);

/* Packed documents (flash-attn varlen): cu_seqlens (D + 1) starts at 0 and
 * never decreases; out (N), N = cu_seqlens[D], restarts at start in every
 * document. */
TOKPOS_API tokpos_status tokpos_packed_position_ids(const DLTensor* out, const DLTensor* cu_seqlens, int64_t start);

/* The inverse. A document starts at index 0 and wherever position_ids[i] !=
 * position_ids[i - 1] + 1 (position_ids (N), or (B, S) read row-major).
 * *count = the number of documents; out (count + 1) = 0, each later
 * document's start, N. */
TOKPOS_API tokpos_status tokpos_packed_document_count(int64_t* count, const DLTensor* position_ids);
TOKPOS_API tokpos_status tokpos_cu_seqlens_from_position_ids(const DLTensor* out, const DLTensor* position_ids);

/* ---- ALiBi -------------------------------------------------------------- */

/* out[0..num_heads): the ALiBi head slopes of the paper's get_slopes, with 8
 * generalised to max_bias as MPT and ggml do (include/tokpos/positions.h).
 * num_heads >= 1; max_bias finite and > 0. */
TOKPOS_API tokpos_status tokpos_alibi_slopes(double* out, int64_t num_heads, double max_bias);

typedef enum tokpos_alibi_mode {
  TOKPOS_ALIBI_CAUSAL = 0,    /* slope * (k - q) where k <= q, -inf where k > q */
  TOKPOS_ALIBI_SYMMETRIC = 1, /* -slope * |q - k| */
  TOKPOS_ALIBI_MODE_MIN_ENUM_ = -0x7fffffff - 1,
  TOKPOS_ALIBI_MODE_MAX_ENUM_ = 0x7fffffff
} tokpos_alibi_mode;

/* out (num_heads, Tq, Tk), float32, bfloat16 or float16 with a unit innermost
 * stride: the bias of query position q_positions[i] and key position
 * k_positions[j] under slopes[h], computed in double and rounded once.
 * q_positions (Tq) and k_positions (Tk): int32 or int64, each >= 0. */
TOKPOS_API tokpos_status tokpos_op_alibi_bias(const DLTensor* out, const double* slopes, int64_t num_heads,
                                              const DLTensor* q_positions, const DLTensor* k_positions,
                                              tokpos_alibi_mode mode);

/* ---- RoPE --------------------------------------------------------------- */

/* RoPE scaling schemes (include/tokpos/rope.h; docs/positions.md, "RoPE"). */
typedef enum tokpos_rope_type {
  TOKPOS_ROPE_DEFAULT = 0,
  TOKPOS_ROPE_LINEAR = 1,
  TOKPOS_ROPE_DYNAMIC = 2,
  TOKPOS_ROPE_YARN = 3,
  TOKPOS_ROPE_LONGROPE = 4,
  TOKPOS_ROPE_LLAMA3 = 5,
  TOKPOS_ROPE_PROPORTIONAL = 6, /* transformers 5.x; dim is the head dimension */
  TOKPOS_ROPE_TYPE_MIN_ENUM_ = -0x7fffffff - 1,
  TOKPOS_ROPE_TYPE_MAX_ENUM_ = 0x7fffffff
} tokpos_rope_type;

/* The keys of a Hugging Face rope_scaling. A key the config lacks is NaN
 * (doubles), 0 (lengths) or NULL with length 0 (factor lists): fill the
 * struct with tokpos_rope_scaling_init first, then set what the config has. */
typedef struct tokpos_rope_scaling {
  tokpos_rope_type type;
  double factor;                            /* proportional: NaN is 1 */
  int64_t original_max_position_embeddings;
  int64_t max_position_embeddings;
  double low_freq_factor, high_freq_factor; /* llama3 */
  double beta_fast, beta_slow;              /* yarn; NaN or 0: 32 and 1 */
  double mscale, mscale_all_dim;            /* yarn; NaN or 0: unused */
  double attention_factor;                  /* yarn, longrope */
  int truncate;                             /* yarn; 1 (the default) or 0 */
  const double* short_factor;               /* longrope: dim / 2 values */
  int64_t short_factor_len;
  const double* long_factor;                /* longrope: dim / 2 values */
  int64_t long_factor_len;
  double partial_rotary_factor;             /* proportional; in (0, 1], NaN: 1 */
} tokpos_rope_scaling;

/* type TOKPOS_ROPE_DEFAULT, every key absent (partial_rotary_factor NaN),
 * truncate 1. */
TOKPOS_API void tokpos_rope_scaling_init(tokpos_rope_scaling* s);

/* inv_freq (dim / 2 doubles) and *attention_factor of the scaling (NULL: the
 * default type), as transformers' ROPE_INIT_FUNCTIONS compute them, in
 * double. seq_len: the current sequence length (dynamic, longrope), 0 for
 * none. Errors name the key, its value and its limit (docs/errors.md). */
TOKPOS_API tokpos_status tokpos_rope_frequencies(double* inv_freq, double* attention_factor, int64_t dim,
                                                 double base, const tokpos_rope_scaling* scaling, int64_t seq_len);

typedef enum tokpos_rope_layout {
  TOKPOS_ROPE_HALF = 0,        /* GPT-NeoX / transformers' rotate_half: pairs (i, i + rotary_dim / 2) */
  TOKPOS_ROPE_INTERLEAVED = 1, /* GPT-J / Meta's Llama: pairs (2i, 2i + 1) */
  TOKPOS_ROPE_LAYOUT_MIN_ENUM_ = -0x7fffffff - 1,
  TOKPOS_ROPE_LAYOUT_MAX_ENUM_ = 0x7fffffff
} tokpos_rope_layout;

/* out = RoPE(x) (tokpos::ops::apply_rope): x and out (B, T, H, D) with
 * positions (B, T), or (T, H, D) with positions (T); float32, bfloat16 or
 * float16, out's dtype x's; positions int32 or int64 in [0, 2^31). The
 * first rotary_dim = 2 * n_freq dims of each head rotate by positions[b, t] *
 * inv_freq[i] (cos and sin exact to 2^-24, times attention_factor), the rest
 * are copied; math in float32, rounded once. inverse != 0: the transposed
 * rotation. out may be x (in place). rotary_dim < 0: 2 * n_freq. */
TOKPOS_API tokpos_status tokpos_op_apply_rope(const DLTensor* out, const DLTensor* x, const DLTensor* positions,
                                              const double* inv_freq, int64_t n_freq, tokpos_rope_layout layout,
                                              int64_t rotary_dim, double attention_factor, int inverse);

/* out = x rotated by the caller's cos and sin tables, transformers'
 * apply_rotary_pos_emb (tokpos::ops::apply_rope_tables): x and out
 * (B, T, H, D) with cos and sin (B, T, R), or (T, H, D) with (T, R); all
 * float32, bfloat16 or float16 alike; R even and <= D, the dims past R
 * copied. For each pair (j0, j1) of the layout, with the (b, t) rows c, s:
 * out[j0] = x[j0] c[j0] - x[j1] s[j0], out[j1] = x[j1] c[j1] + x[j0] s[j1],
 * each product and the sum rounded to the dtype as torch's elementwise ops
 * round. inverse != 0: the transposed map (the gradient). out may be x. */
TOKPOS_API tokpos_status tokpos_op_apply_rope_tables(const DLTensor* out, const DLTensor* x, const DLTensor* cos,
                                                     const DLTensor* sin, tokpos_rope_layout layout, int inverse);

/* ==== 3. Conveniences over the ops ========================================= */

/* Raw caller memory (pointer and sizes) in place of tensors. Every size is
 * checked against its least value (B, T, seq_len >= 0; V, L, D >= 1) and
 * their products against what can be addressed; pointers must be aligned to
 * their element type and may be NULL only when the call touches no memory.
 * The op checks the rest: ids, positions, overlaps. */

/* ---- Tables ------------------------------------------------------------- */

/* out (max_context, dim): the interleaved sinusoidal table with the given
 * base (tokpos::sinusoidal_table; a table, not an op). */
TOKPOS_API tokpos_status tokpos_sinusoidal_table(float* out, int64_t max_context, int64_t dim, double base);

typedef enum tokpos_layout {
  TOKPOS_LAYOUT_INTERLEAVED = 0, /* sin, cos, sin, cos, ...; w_k = base^(-2k/D) (the seeds, DistilBERT) */
  TOKPOS_LAYOUT_HALVES = 1,      /* [sin | cos]; w_k = base^(-2k/D) (Marian) */
  TOKPOS_LAYOUT_FAIRSEQ = 2,     /* [sin | cos | 0]; w_k = base^(-k/(D/2-1)); zero padding row */
  TOKPOS_LAYOUT_T2T = 3,         /* [sin | cos | 0]; tensor2tensor timing signal, base = max_timescale */
  TOKPOS_LAYOUT_GGML = 4,        /* [cos | sin | 0]; ggml timestep embedding, base = max_period */
  TOKPOS_LAYOUT_MIN_ENUM_ = -0x7fffffff - 1, /* range markers, as for tokpos_status */
  TOKPOS_LAYOUT_MAX_ENUM_ = 0x7fffffff
} tokpos_layout;

typedef enum tokpos_dtype {
  TOKPOS_DTYPE_F32 = 0,  /* float */
  TOKPOS_DTYPE_BF16 = 1, /* uint16_t bits of bfloat16 */
  TOKPOS_DTYPE_F16 = 2,  /* uint16_t bits of IEEE binary16 */
  TOKPOS_DTYPE_I32 = 3,  /* int32_t (ids and positions; not a table type) */
  TOKPOS_DTYPE_I64 = 4,  /* int64_t (ids and positions; not a table type) */
  TOKPOS_DTYPE_F64 = 5,  /* double (lookups only: the DLTensor compose ops and tokpos_compose_forward_ex) */
  TOKPOS_DTYPE_MIN_ENUM_ = -0x7fffffff - 1, /* range markers, as for tokpos_status */
  TOKPOS_DTYPE_MAX_ENUM_ = 0x7fffffff
} tokpos_dtype;

/* out (max_context, dim) of dtype: row r encodes position start + r in the given
 * layout. Every entry is the exact value correctly rounded to dtype
 * (docs/precision.md). min_timescale is used by TOKPOS_LAYOUT_T2T only (1.0 is
 * tensor2tensor's default); padding_idx by TOKPOS_LAYOUT_FAIRSEQ only (-1 for
 * none; fairseq uses 1). With TOKPOS_LAYOUT_INTERLEAVED, TOKPOS_DTYPE_F32,
 * start 0 it writes exactly what tokpos_sinusoidal_table writes
 * (tokpos::position_table). */
TOKPOS_API tokpos_status tokpos_sinusoidal_table_ex(void* out, tokpos_dtype dtype, int64_t max_context,
                                                    int64_t dim, int64_t start, tokpos_layout layout,
                                                    double base, double min_timescale, int64_t padding_idx);

/* ---- Compose on raw pointers ------------------------------------------ */

/* out (B, T, D) = token_table[ids[b, t]] + pos_table[t]. One fused pass: the
 * op of tokpos_op_compose_forward (tokpos::ops::compose_forward) on these
 * buffers. Fails, writing nothing, on an id outside [0, V) or T > L.
 * B = 0 or T = 0 writes nothing and succeeds. */
TOKPOS_API tokpos_status tokpos_compose_forward(float* out, const int64_t* ids, int64_t B, int64_t T,
                                                const float* token_table, int64_t V, const float* pos_table,
                                                int64_t L, int64_t D);

/* tokpos_compose_forward with 16-bit tables and/or a bf16 output: token and
 * position rows are read in their own dtype, summed in float32, and stored
 * as out_dtype (TOKPOS_DTYPE_F32, or TOKPOS_DTYPE_BF16 rounded to nearest
 * even). Or a float64 lookup: out, token_table and pos_table all
 * TOKPOS_DTYPE_F64 (double), summed in double with no rounding; float64
 * beside another dtype is TOKPOS_UNIMPLEMENTED, naming both. token_dtype
 * and pos_dtype take F32, BF16, F16 or F64, out_dtype F32, BF16 or F64
 * (else TOKPOS_INVALID_ARGUMENT). Same checks and guarantees as
 * tokpos_compose_forward. */
TOKPOS_API tokpos_status tokpos_compose_forward_ex(void* out, tokpos_dtype out_dtype, const int64_t* ids,
                                                   int64_t B, int64_t T, const void* token_table,
                                                   tokpos_dtype token_dtype, int64_t V, const void* pos_table,
                                                   tokpos_dtype pos_dtype, int64_t L, int64_t D);

/* d_token_table (V, D) += sum of d_out rows per id; d_pos_table (L, D) += sum over b
 * of d_out[b, t] at row t. d_pos_table may be NULL. Only rows that appear are
 * touched. Bitwise identical for any thread count. Checks everything first.
 * The op of tokpos_op_compose_backward (tokpos::ops::compose_backward); T > L
 * is an error only with d_pos_table. */
TOKPOS_API tokpos_status tokpos_compose_backward(float* d_token_table, float* d_pos_table, const float* d_out,
                                                 const int64_t* ids, int64_t B, int64_t T, int64_t V,
                                                 int64_t L, int64_t D);

/* ---- Vocab shards --------------------------------------------------------- */

/* table (rows, D) = rows [row_begin, row_begin + rows) of the table
 * tokpos_token_embedding_create(vocab_size, D, seed) makes, bit for bit;
 * rows at or past vocab_size (padding) are zeros (tokpos::fill_normal on
 * the token table's stream; an initialiser, not an op). */
TOKPOS_API tokpos_status tokpos_token_table_rows(float* table, int64_t row_begin, int64_t rows, int64_t vocab_size,
                                                 int64_t D, uint64_t seed);

/* ---- Modules behind opaque handles ------------------------------------ */

typedef enum tokpos_id_policy {
  TOKPOS_IDS_ERROR = 0,     /* an id outside [0, V) fails the call (default) */
  TOKPOS_IDS_MAP_TO_UNK = 1, /* such an id reads row unk_id instead */
  TOKPOS_IDS_MIN_ENUM_ = -0x7fffffff - 1, /* range markers, as for tokpos_status */
  TOKPOS_IDS_MAX_ENUM_ = 0x7fffffff
} tokpos_id_policy;

/* Token embedding (V, D). */
typedef struct tokpos_token_embedding tokpos_token_embedding;
/* A fresh table from N(0, 0.02^2), Philox seed `seed` (bitwise identical everywhere). */
TOKPOS_API tokpos_status tokpos_token_embedding_create(tokpos_token_embedding** out, int64_t V, int64_t D,
                                                       uint64_t seed);
/* Copies table (V, D). frozen != 0: backward never changes its gradient. */
TOKPOS_API tokpos_status tokpos_token_embedding_from_table(tokpos_token_embedding** out, const float* table,
                                                           int64_t V, int64_t D, int frozen);
TOKPOS_API tokpos_status tokpos_token_embedding_set_id_policy(tokpos_token_embedding* e,
                                                              tokpos_id_policy policy, int64_t unk_id);
/* padding_idx in [0, V): that row is zeroed now and never gets a gradient; -1 clears. */
TOKPOS_API tokpos_status tokpos_token_embedding_set_padding_idx(tokpos_token_embedding* e,
                                                                int64_t padding_idx);
/* out (B, T, D) = table[ids[b, t]] */
TOKPOS_API tokpos_status tokpos_token_embedding_forward(const tokpos_token_embedding* e, const int64_t* ids,
                                                        int64_t B, int64_t T, float* out);
/* grad += d_out (B, T, D) scattered by ids. num_touched (may be NULL) gets how many
 * distinct rows changed; tokpos_token_embedding_touched_rows lists them. */
TOKPOS_API tokpos_status tokpos_token_embedding_backward(tokpos_token_embedding* e, const float* d_out,
                                                         const int64_t* ids, int64_t B, int64_t T,
                                                         int64_t* num_touched);
/* Copies the rows touched by the last backward (sorted) into rows[0 .. capacity). */
TOKPOS_API tokpos_status tokpos_token_embedding_touched_rows(const tokpos_token_embedding* e, int64_t* rows,
                                                             int64_t capacity, int64_t* count);
/* Borrowed views, valid until the handle is freed. The gradient is zeros until a backward. */
TOKPOS_API tokpos_status tokpos_token_embedding_table(const tokpos_token_embedding* e, const float** table);
TOKPOS_API tokpos_status tokpos_token_embedding_grad(tokpos_token_embedding* e, const float** grad);
TOKPOS_API tokpos_status tokpos_token_embedding_zero_grad(tokpos_token_embedding* e);
/* V*D, or -1 for NULL. */
TOKPOS_API int64_t tokpos_token_embedding_num_parameters(const tokpos_token_embedding* e);
TOKPOS_API void tokpos_token_embedding_free(tokpos_token_embedding* e);

/* Position embedding (L, D): learned (a parameter) or sinusoidal (none). */
typedef struct tokpos_position_embedding tokpos_position_embedding;
TOKPOS_API tokpos_status tokpos_position_embedding_create_learned(tokpos_position_embedding** out, int64_t L,
                                                                  int64_t D, uint64_t seed);
TOKPOS_API tokpos_status tokpos_position_embedding_create_sinusoidal(tokpos_position_embedding** out,
                                                                     int64_t L, int64_t D, double base);
/* out (T, D) = table rows start .. start+T-1; fails if start + T > L. */
TOKPOS_API tokpos_status tokpos_position_embedding_forward(const tokpos_position_embedding* p, int64_t T,
                                                           int64_t start, float* out);
/* grad[start + t] += sum over b of d_out[b, t]; a no-op for sinusoidal tables. */
TOKPOS_API tokpos_status tokpos_position_embedding_backward(tokpos_position_embedding* p, const float* d_out,
                                                            int64_t B, int64_t T, int64_t start);
TOKPOS_API tokpos_status tokpos_position_embedding_table(const tokpos_position_embedding* p,
                                                         const float** table);
/* *grad = NULL for sinusoidal tables, which have none. */
TOKPOS_API tokpos_status tokpos_position_embedding_grad(tokpos_position_embedding* p, const float** grad);
TOKPOS_API tokpos_status tokpos_position_embedding_zero_grad(tokpos_position_embedding* p);
/* L*D for learned, 0 for sinusoidal, -1 for NULL. */
TOKPOS_API int64_t tokpos_position_embedding_num_parameters(const tokpos_position_embedding* p);
TOKPOS_API void tokpos_position_embedding_free(tokpos_position_embedding* p);

/* Composer: token + position, fused. */
typedef enum tokpos_position_kind {
  TOKPOS_POSITION_LEARNED = 0,
  TOKPOS_POSITION_SINUSOIDAL = 1,
  TOKPOS_POSITION_MIN_ENUM_ = -0x7fffffff - 1, /* range markers, as for tokpos_status */
  TOKPOS_POSITION_MAX_ENUM_ = 0x7fffffff
} tokpos_position_kind;

typedef struct tokpos_composer_options {
  int64_t vocab_size;            /* V */
  int64_t dim;                   /* D */
  int64_t max_context;           /* L */
  tokpos_position_kind position; /* default TOKPOS_POSITION_SINUSOIDAL */
  uint64_t seed;                 /* default 0 */
  double init_std;               /* default 0.02 */
  double base;                   /* sinusoidal base, default 10000 */
  tokpos_id_policy id_policy;    /* default TOKPOS_IDS_ERROR */
  int64_t unk_id;                /* default 1 (the byte tokenizer's UNK) */
  int64_t padding_idx;           /* default -1 (none) */
} tokpos_composer_options;

/* The defaults above, with vocab_size, dim and max_context set as given. */
TOKPOS_API tokpos_composer_options tokpos_composer_default_options(int64_t V, int64_t D, int64_t L);

typedef struct tokpos_composer tokpos_composer;
TOKPOS_API tokpos_status tokpos_composer_create(tokpos_composer** out,
                                                const tokpos_composer_options* options);
/* out (B, T, D). position_ids (B, T) may be NULL: then positions are start + t. */
TOKPOS_API tokpos_status tokpos_composer_forward(const tokpos_composer* c, const int64_t* ids, int64_t B,
                                                 int64_t T, int64_t start, const int64_t* position_ids,
                                                 float* out);
TOKPOS_API tokpos_status tokpos_composer_backward(tokpos_composer* c, const float* d_out, const int64_t* ids,
                                                  int64_t B, int64_t T, int64_t start,
                                                  const int64_t* position_ids, int64_t* num_touched);
/* Borrowed views; the position gradient is NULL for sinusoidal composers. */
TOKPOS_API tokpos_status tokpos_composer_token_table(const tokpos_composer* c, const float** t);
TOKPOS_API tokpos_status tokpos_composer_position_table(const tokpos_composer* c, const float** t);
TOKPOS_API tokpos_status tokpos_composer_token_grad(tokpos_composer* c, const float** g);
TOKPOS_API tokpos_status tokpos_composer_position_grad(tokpos_composer* c, const float** g);
TOKPOS_API tokpos_status tokpos_composer_zero_grad(tokpos_composer* c);
/* Token plus position parameters, or -1 for NULL. */
TOKPOS_API int64_t tokpos_composer_num_parameters(const tokpos_composer* c);
TOKPOS_API void tokpos_composer_free(tokpos_composer* c);

/* ==== 4. The lab's two functions =========================================== */

/* Seed 002's pe(pos, dim, hidden_dim) and embedding forward, formula base
 * 10000, with the signatures the lab gave them. */

/* PE(pos, dim) for width hidden_dim: sin(pos / 10000^(2*(dim/2)/hidden_dim)) at
 * even dim, cos at odd dim. NaN when pos < 0, hidden_dim < 1 or dim outside
 * [0, hidden_dim). */
TOKPOS_API float tokpos_pe_sinusoidal(int64_t pos, int64_t dim, int64_t hidden_dim);

/* out (seq_len, hidden_dim): out[p*D + d] = token_table[id*D + d] + PE(p, d),
 * where id = token_ids[p], replaced by unk_id if outside [0, vocab_size):
 * tokpos::ops::compose_forward with the UNK fallback, over the PE rows.
 * seq_len 0 writes nothing and succeeds. Errors: NULL pointers when
 * seq_len > 0, negative sizes, vocab_size or hidden_dim < 1, unk_id outside
 * [0, vocab_size). */
TOKPOS_API tokpos_status tokpos_embedding_forward(const int64_t* token_ids, int64_t seq_len,
                                                  const float* token_table, int64_t vocab_size,
                                                  int64_t hidden_dim, int64_t unk_id, float* out);

/* ---- GGUF files (llama.cpp's format; tokpos/gguf.h) ------------------- *
 *
 * tokpos_gguf_open maps a GGUF v2 or v3 file and validates all of it first
 * (every check of tokpos::GgufFile::open: counts against the file size,
 * strings, value types, alignment, every tensor's dims, type, block count
 * and data range, unique names and keys); a bad file is
 * TOKPOS_CORRUPT_FILE naming the file, the offset, the field, the value and
 * its limit, and a path that is not a regular file TOKPOS_IO_ERROR. Every
 * pointer handed out (names, keys, string bytes, tensor data, the blocks
 * DLTensor) points into the handle and stays valid until tokpos_gguf_free.
 * The file must not be truncated while it is mapped (SIGBUS). */
typedef struct tokpos_gguf tokpos_gguf;
TOKPOS_API tokpos_status tokpos_gguf_open(tokpos_gguf** out, const char* path);
TOKPOS_API void tokpos_gguf_free(tokpos_gguf* f); /* NULL: nothing */
/* The file's version (2 or 3), general.alignment (32 when absent), and its
 * numbers of tensors and of metadata keys. Any output may be NULL. */
TOKPOS_API tokpos_status tokpos_gguf_counts(const tokpos_gguf* f, uint32_t* version, uint64_t* alignment,
                                            int64_t* n_tensors, int64_t* n_keys);

typedef struct tokpos_gguf_tensor {
  const char* name;  /* NUL-terminated */
  int32_t ggml_type; /* ggml's type value (tokpos/ggml_type.h): 0 f32, 1 f16, 8 q8_0, 14 q6_K, ... */
  int32_t n_dims;    /* 1..4 */
  int64_t dims[4];   /* ne[0] first, as in the file: dims[0] is the row length D */
  uint64_t nbytes;   /* the tensor's bytes */
  const void* data;  /* its bytes in the mapping (zero copy) */
  /* The data as a (rows, row_bytes) uint8 DLTensor, rows the product of
   * dims[1..]: a token table's token_blocks for
   * tokpos_op_compose_forward_ggml with ggml_type and dim = dims[0]. It
   * views data, except for f32, f16 or bf16 data that the file's
   * general.alignment (1 or 2) leaves unaligned for its elements: then an
   * aligned copy, made by tokpos_gguf_open and freed with the handle. */
  DLTensor blocks;
} tokpos_gguf_tensor;
/* Tensor `index` in the file's order (0 <= index < n_tensors), or by name
 * (TOKPOS_INVALID_ARGUMENT naming a name the file lacks). */
TOKPOS_API tokpos_status tokpos_gguf_tensor_at(const tokpos_gguf* f, int64_t index, tokpos_gguf_tensor* out);
TOKPOS_API tokpos_status tokpos_gguf_find_tensor(const tokpos_gguf* f, const char* name, tokpos_gguf_tensor* out);

/* GGUF's value types, as the file stores them. */
typedef enum tokpos_gguf_type {
  TOKPOS_GGUF_UINT8 = 0, TOKPOS_GGUF_INT8 = 1, TOKPOS_GGUF_UINT16 = 2, TOKPOS_GGUF_INT16 = 3,
  TOKPOS_GGUF_UINT32 = 4, TOKPOS_GGUF_INT32 = 5, TOKPOS_GGUF_FLOAT32 = 6, TOKPOS_GGUF_BOOL = 7,
  TOKPOS_GGUF_STRING = 8, TOKPOS_GGUF_ARRAY = 9, TOKPOS_GGUF_UINT64 = 10, TOKPOS_GGUF_INT64 = 11,
  TOKPOS_GGUF_FLOAT64 = 12
} tokpos_gguf_type;
/* Metadata key `index` in the file's order: its key (NUL-terminated), its
 * type, and for an array its element type and count (else *elem_type = -1,
 * *count = 1). Any output but key may be NULL. */
TOKPOS_API tokpos_status tokpos_gguf_key_at(const tokpos_gguf* f, int64_t index, const char** key, int32_t* type,
                                            int32_t* elem_type, uint64_t* count);
/* The index of `key`, or -1 when the file has no such key (TOKPOS_OK either way). */
TOKPOS_API tokpos_status tokpos_gguf_find_key(const tokpos_gguf* f, const char* key, int64_t* index);
/* The value of key `index` (element -1), or element `element` of an array
 * value, converted as tokpos::GgufValue converts it: an integer type to
 * int64 or uint64 where it fits, FLOAT32/FLOAT64 to double (exact), BOOL to
 * 0/1 through the int64 getter, STRING as its bytes (not NUL-terminated)
 * and length. A value of another type, an element past the array, or
 * element -1 of an array is TOKPOS_INVALID_ARGUMENT naming the key. Arrays
 * of arrays are read through C++ or Python. */
TOKPOS_API tokpos_status tokpos_gguf_get_int64(const tokpos_gguf* f, int64_t index, int64_t element, int64_t* out);
TOKPOS_API tokpos_status tokpos_gguf_get_uint64(const tokpos_gguf* f, int64_t index, int64_t element,
                                                uint64_t* out);
TOKPOS_API tokpos_status tokpos_gguf_get_double(const tokpos_gguf* f, int64_t index, int64_t element, double* out);
TOKPOS_API tokpos_status tokpos_gguf_get_string(const tokpos_gguf* f, int64_t index, int64_t element,
                                                const char** data, uint64_t* length);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TOKPOS_TOKPOS_H */
