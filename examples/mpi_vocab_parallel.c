/* examples/mpi_vocab_parallel.c: a vocab-parallel token embedding over MPI,
 * checked against one process holding the whole table.
 *
 * Each rank holds the rows [row_begin, row_begin + rows) of a (V, D) token
 * table (tokpos_vocab_shard_range, V padded to a multiple of --pad), fills
 * them with tokpos_token_table_rows (the same seed on every rank), and runs
 * tokpos_op_compose_forward_shard. Rank 0 alone adds the learned position
 * table, so the float32 sum of the partial outputs (MPI_Allreduce, MPI_SUM)
 * is token row + position row, each counted once. Every rank then checks,
 * against tokpos_op_compose_forward / tokpos_op_compose_backward on the whole
 * table computed here in this process:
 *   - forward: the all-reduced output equals the one-table output bit for
 *     bit (-0 and +0 count as equal; no NaN anywhere);
 *   - backward: tokpos_op_compose_backward_shard into its gradient shard
 *     equals the matching rows of the one-table gradient bit for bit, padding
 *     rows (row >= V) stay zero, and rank 0's position gradient equals the
 *     one-table position gradient.
 * The ids hit every shard boundary (v0 - 1, v0, v1 - 1, v1 of every rank),
 * 0 and V - 1, and one id (the first row of rank 1's shard) appears 70
 * times, so its gradient takes the blocked (more than 64 sources) path.
 *
 *   mpirun -np 2 build/examples/mpi_vocab_parallel          exit 0: all equal
 *   mpirun -np 2 build/examples/mpi_vocab_parallel --bad-id an id = V in the batch
 *   options: --pad N (pad the vocabulary to a multiple of N; default 8)
 *
 * --bad-id: every rank's tokpos_op_compose_forward_shard fails on its own,
 * before any communication (each rank checks every id against V), and each
 * rank prints the error. The ranks then agree on the outcome with one small
 * MPI_Allreduce of a status flag (so a rank whose call succeeded would not
 * wait forever in the data all-reduce), call MPI_Finalize and exit 3.
 * Bad arguments on any rank (mpirun's "prog --pad 0 : prog" gives ranks
 * different ones) or ranks given different --pad values: each such rank
 * names its bad argument, the others say another rank has bad arguments,
 * after one MPI_Allreduce of the start-up status that every rank joins
 * before anything else, and all exit 2.
 * Exit codes: 0 all equal, 1 a mismatch (the first differing element is
 * named), 2 bad arguments, 3 a tokpos call failed. */
#include <dlpack/dlpack.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokpos/tokpos.h"

enum { EXIT_MISMATCH = 1, EXIT_USAGE = 2, EXIT_TOKPOS = 3 };

static const int64_t kV = 1001; /* 7 * 11 * 13: not a multiple of 2, 3, 4 or 8 */
static const int64_t kD = 64;
static const int64_t kB = 4;
static const int64_t kStart = 5; /* positions start + t, t in [0, T) */
static const int kHotCount = 70; /* > 64 sources: the blocked gradient sum */
static const uint64_t kTableSeed = 1234;
static const uint64_t kPosSeed = 99;
static const uint64_t kPriorSeed = 7;

static int g_rank = 0;

/* A 2-D float32 or int64 tensor; shape points into the caller's array. */
static DLTensor f32(float* data, int64_t* shape, int ndim) {
  DLTensor t = {data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, shape, NULL, 0};
  return t;
}
static DLTensor i64(int64_t* data, int64_t* shape, int ndim) {
  DLTensor t = {data, {kDLCPU, 0}, ndim, {kDLInt, 64, 1}, shape, NULL, 0};
  return t;
}

/* Prints a failed call as "rank r: fn: message [STATUS]" (the message names
 * the function already); returns 1 on failure. */
static int failed(const char* fn, tokpos_status st) {
  if (st == TOKPOS_OK) return 0;
  const char* msg = tokpos_last_error();
  const int named = strncmp(msg, fn, strlen(fn)) == 0;
  printf("rank %d: %s%s%s [%s]\n", g_rank, named ? "" : fn, named ? "" : ": ", msg, tokpos_status_string(st));
  fflush(stdout);
  return 1;
}

static void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n, size);
  if (p == NULL) {
    fprintf(stderr, "rank %d: out of memory (%zu x %zu bytes)\n", g_rank, n, size);
    MPI_Abort(MPI_COMM_WORLD, EXIT_TOKPOS);
  }
  return p;
}

static uint32_t lcg(uint32_t* s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

/* The same ids on every rank: every boundary of every shard, 0 and V - 1,
 * the hot id kHotCount times, the rest pseudo-random; shuffled. */
static void make_ids(int64_t* ids, int64_t n, int world, int64_t pad) {
  int64_t k = 0;
  ids[k++] = 0;
  ids[k++] = kV - 1;
  for (int r = 0; r < world; ++r) {
    int64_t v0 = 0, rows = 0;
    tokpos_vocab_shard_range(&v0, &rows, kV, pad, world, r);
    const int64_t edges[4] = {v0 - 1, v0, v0 + rows - 1, v0 + rows};
    for (int e = 0; e < 4; ++e)
      if (edges[e] >= 0 && edges[e] < kV) ids[k++] = edges[e];
  }
  int64_t hot = 0, rows0 = 0;
  tokpos_vocab_shard_range(&hot, &rows0, kV, pad, world, world > 1 ? 1 : 0);
  if (hot >= kV) hot = kV - 1;
  for (int i = 0; i < kHotCount; ++i) ids[k++] = hot;
  uint32_t s = 2024u;
  while (k < n) ids[k++] = (int64_t)(lcg(&s) % (uint32_t)kV);
  for (int64_t i = n - 1; i > 0; --i) { /* Fisher-Yates */
    const int64_t j = (int64_t)(lcg(&s) % (uint32_t)(i + 1));
    const int64_t x = ids[i];
    ids[i] = ids[j];
    ids[j] = x;
  }
}

/* d_out: a fixed formula whose values have different exponents and full
 * 24-bit mantissas, so the order of the gradient sums shows in the bits. */
static void make_d_out(float* d_out, int64_t n, int64_t D) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      const uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(d * 40503u + 977u);
      const float u = (float)(h & 0xffffffu) / 16777216.0f - 0.5f;
      d_out[i * D + d] = ldexpf(u, (int)((i + d) % 7) - 3);
    }
}

static uint32_t bits(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  /* Arguments: a rank that cannot parse its own does not stop here, where the
   * others would wait for it in their first collective; it joins the start-up
   * agreement below, which every rank reaches. */
  int bad_id = 0, usage = 0;
  int64_t pad = 8;
  for (int i = 1; i < argc && !usage; ++i) {
    if (strcmp(argv[i], "--bad-id") == 0) {
      bad_id = 1;
    } else if (strcmp(argv[i], "--pad") == 0) {
      char* end = NULL;
      const long long v = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || v < 1) {
        printf("rank %d: --pad needs an integer >= 1, got %s%s%s\n", g_rank, i + 1 < argc ? "'" : "",
               i + 1 < argc ? argv[i + 1] : "nothing", i + 1 < argc ? "'" : "");
        usage = 1;
      } else {
        pad = v;
        ++i;
      }
    } else {
      printf("rank %d: unknown argument '%s'\n", g_rank, argv[i]);
      usage = 1;
    }
  }
  if (usage) printf("rank %d: usage: %s [--bad-id] [--pad N (>= 1)]\n", g_rank, argv[0]);

  int64_t row_begin = 0, rows = 0;
  int shard_err = 0;
  if (!usage)
    shard_err = failed("tokpos_vocab_shard_range", tokpos_vocab_shard_range(&row_begin, &rows, kV, pad, world, g_rank));

  /* The start-up agreement, before anything else: every rank takes part,
   * whatever its own arguments, so each ends with the named error of the
   * rank that failed, and none waits for one that has stopped. The ranks must
   * also agree on --pad: shards of different paddings are not one table. */
  {
    int64_t mine[4] = {usage, shard_err, pad, -pad}, all[4] = {0, 0, 0, 0};
    MPI_Allreduce(mine, all, 4, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    const int pads_differ = !all[0] && all[2] != -all[3];
    if (pads_differ)
      printf("rank %d: --pad %lld here, but the ranks were given different values, from %lld to %lld\n", g_rank,
             (long long)pad, (long long)-all[3], (long long)all[2]);
    if (all[0] || pads_differ || all[1]) {
      if (!usage && !shard_err && !pads_differ)
        printf("rank %d: stopping, another rank %s\n", g_rank, all[0] ? "has bad arguments" : "failed");
      fflush(stdout);
      MPI_Finalize();
      return all[0] || pads_differ ? EXIT_USAGE : EXIT_TOKPOS;
    }
  }

  /* T grows with the rank count so every boundary id fits. */
  int64_t T = 48;
  while (kB * T < 2 + 4 * (int64_t)world + kHotCount + 16) T += 8;
  const int64_t N = kB * T, D = kD, V = kV, L = kStart + T + 3;

  int64_t* ids = xcalloc((size_t)N, sizeof *ids);
  float* shard = xcalloc((size_t)(rows * D), sizeof *shard);
  float* whole = xcalloc((size_t)(V * D), sizeof *whole);
  float* pos = xcalloc((size_t)(L * D), sizeof *pos);
  float* out = xcalloc((size_t)(N * D), sizeof *out);
  float* ref = xcalloc((size_t)(N * D), sizeof *ref);
  float* d_out = xcalloc((size_t)(N * D), sizeof *d_out);
  float* d_shard = xcalloc((size_t)(rows * D), sizeof *d_shard);
  float* d_whole = xcalloc((size_t)(V * D), sizeof *d_whole);
  float* d_pos = xcalloc((size_t)(L * D), sizeof *d_pos);
  float* d_pos_ref = xcalloc((size_t)(L * D), sizeof *d_pos_ref);

  make_ids(ids, N, world, pad);
  if (bad_id) ids[kB * T / 2 + 3] = V; /* one past the last row */
  make_d_out(d_out, N, D);

  int64_t ids_shape[2] = {kB, T}, out_shape[3] = {kB, T, D}, shard_shape[2] = {rows, D}, whole_shape[2] = {V, D},
          pos_shape[2] = {L, D};
  DLTensor ids_t = i64(ids, ids_shape, 2), out_t = f32(out, out_shape, 3), ref_t = f32(ref, out_shape, 3),
           d_out_t = f32(d_out, out_shape, 3), shard_t = f32(shard, shard_shape, 2),
           d_shard_t = f32(d_shard, shard_shape, 2), whole_t = f32(whole, whole_shape, 2),
           d_whole_t = f32(d_whole, whole_shape, 2), pos_t = f32(pos, pos_shape, 2), d_pos_t = f32(d_pos, pos_shape, 2),
           d_pos_ref_t = f32(d_pos_ref, pos_shape, 2);

  /* The shard, the learned position table (a seeded table standing in for
   * trained weights), and a prior gradient (as left by an earlier
   * micro-batch; its padding rows are zeros) that the backward adds to. */
  int err = failed("tokpos_token_table_rows", tokpos_token_table_rows(shard, row_begin, rows, V, D, kTableSeed));
  err |= failed("tokpos_token_table_rows", tokpos_token_table_rows(pos, 0, L, L, D, kPosSeed));
  err |= failed("tokpos_token_table_rows", tokpos_token_table_rows(d_shard, row_begin, rows, V, D, kPriorSeed));

  /* The forward on this rank alone: ids are checked against V here. */
  if (!err)
    err |= failed("tokpos_op_compose_forward_shard",
                  tokpos_op_compose_forward_shard(&out_t, &ids_t, &shard_t, V, row_begin,
                                                  g_rank == 0 ? &pos_t : NULL, NULL, kStart));

  /* Agree on the outcome before the data all-reduce, so no rank waits there
   * for a rank that has stopped. */
  int any_err = 0;
  MPI_Allreduce(&err, &any_err, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  int rc = EXIT_TOKPOS;
  if (any_err) {
    if (!err) printf("rank %d: stopping, another rank failed\n", g_rank);
    goto done;
  }
  MPI_Allreduce(MPI_IN_PLACE, out, (int)(N * D), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);

  /* The single-process reference: the whole table, forward and backward. */
  err |= failed("tokpos_token_table_rows", tokpos_token_table_rows(whole, 0, V, V, D, kTableSeed));
  err |= failed("tokpos_token_table_rows", tokpos_token_table_rows(d_whole, 0, V, V, D, kPriorSeed));
  if (!err)
    err |= failed("tokpos_op_compose_forward", tokpos_op_compose_forward(&ref_t, &ids_t, &whole_t, &pos_t, NULL, kStart));
  if (!err)
    err |= failed("tokpos_op_compose_backward",
                  tokpos_op_compose_backward(&d_whole_t, &d_pos_ref_t, &d_out_t, &ids_t, NULL, kStart));
  /* This rank's backward: its gradient shard; the position gradient on rank 0. */
  if (!err)
    err |= failed("tokpos_op_compose_backward_shard",
                  tokpos_op_compose_backward_shard(&d_shard_t, g_rank == 0 ? &d_pos_t : NULL, &d_out_t, &ids_t, V,
                                                   row_begin, NULL, kStart));

  /* 1: the shard's rows, 2: forward, 4: backward; the first difference is named. */
  int bad = 0;
  for (int64_t i = 0; i < rows * D && !err; ++i) {
    const int64_t g = row_begin + i / D;
    const uint32_t want = g < V ? bits(whole[g * D + i % D]) : 0u;
    if (bits(shard[i]) != want) {
      printf("rank %d: shard row %lld (global row %lld), d = %lld: 0x%08x, whole table 0x%08x\n", g_rank,
             (long long)(i / D), (long long)g, (long long)(i % D), bits(shard[i]), want);
      bad |= 1;
      break;
    }
  }
  for (int64_t i = 0; i < N * D && !err; ++i) {
    if (isnan(out[i]) || isnan(ref[i]) || out[i] != ref[i]) {
      printf("rank %d: forward differs at out[b=%lld, t=%lld, d=%lld] (id %lld): all-reduced %.9g (0x%08x), "
             "one table %.9g (0x%08x)\n",
             g_rank, (long long)(i / D / T), (long long)(i / D % T), (long long)(i % D), (long long)ids[i / D],
             (double)out[i], bits(out[i]), (double)ref[i], bits(ref[i]));
      bad |= 2;
      break;
    }
  }
  for (int64_t i = 0; i < rows * D && !err; ++i) {
    const int64_t g = row_begin + i / D;
    const uint32_t want = g < V ? bits(d_whole[g * D + i % D]) : 0u;
    if (bits(d_shard[i]) != want) {
      printf("rank %d: backward differs at d_shard_table[%lld, %lld] (global row %lld%s): 0x%08x (%.9g), "
             "one table 0x%08x\n",
             g_rank, (long long)(i / D), (long long)(i % D), (long long)g, g < V ? "" : ", padding",
             bits(d_shard[i]), (double)d_shard[i], want);
      bad |= 4;
      break;
    }
  }
  for (int64_t i = 0; i < L * D && !err && g_rank == 0; ++i) {
    if (bits(d_pos[i]) != bits(d_pos_ref[i])) {
      printf("rank %d: backward differs at d_pos_table[%lld, %lld]: 0x%08x, one table 0x%08x\n", g_rank,
             (long long)(i / D), (long long)(i % D), bits(d_pos[i]), bits(d_pos_ref[i]));
      bad |= 4;
      break;
    }
  }
  fflush(stdout);

  int all_bad = 0, all_err = 0;
  MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
  MPI_Allreduce(&err, &all_err, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0 && !all_err) {
    int64_t padded = 0;
    printf("mpi_vocab_parallel: %d ranks, V = %lld, D = %lld, B = %lld, T = %lld, L = %lld (learned), pad to %lld\n",
           world, (long long)V, (long long)D, (long long)kB, (long long)T, (long long)L, (long long)pad);
    for (int r = 0; r < world; ++r) {
      int64_t b = 0, n = 0;
      tokpos_vocab_shard_range(&b, &n, V, pad, world, r);
      const int64_t real = b >= V ? 0 : (b + n > V ? V - b : n);
      printf("  rank %d: rows [%lld, %lld): %lld rows, %lld padding\n", r, (long long)b, (long long)(b + n),
             (long long)n, (long long)(n - real));
      padded = b + n;
    }
    printf("  padded vocabulary %lld rows; all-reduced %lld bytes (B*T*D*4) of float32 partial outputs\n",
           (long long)padded, (long long)(N * D * 4));
    printf("shard rows: %s\n", all_bad & 1 ? "DIFFER from the whole table" : "bitwise equal to the whole table");
    printf("forward: %s\n", all_bad & 2 ? "DIFFERS" : "bitwise equal");
    printf("backward: %s\n", all_bad & 4 ? "DIFFERS" : "bitwise equal");
  }
  rc = all_err ? EXIT_TOKPOS : all_bad ? EXIT_MISMATCH : 0;

done:
  fflush(stdout);
  free(ids);
  free(shard);
  free(whole);
  free(pos);
  free(out);
  free(ref);
  free(d_out);
  free(d_shard);
  free(d_whole);
  free(d_pos);
  free(d_pos_ref);
  MPI_Finalize();
  return rc;
}
