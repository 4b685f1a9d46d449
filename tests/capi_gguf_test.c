/* The C API's GGUF reader on the files tools/make_gguf_data.py wrote with
 * llama.cpp's own Python writer (gguf-py); the values expected here are the
 * ones that script wrote (tests/data/gguf/expected.json lists them).
 * usage: capi_gguf_c_test DATA_DIR */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"

static char g_path[4096];
static const char* path_of(const char* dir, const char* name) {
  snprintf(g_path, sizeof g_path, "%s/%s", dir, name);
  return g_path;
}

static int has(const char* text) { return strstr(tokpos_last_error(), text) != NULL; }

/* IEEE binary16 to float, exactly (every half is a float). */
static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    float v = (float)man / 1024.0f / 16384.0f; /* subnormal: man * 2^-24 */
    memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float out;
  memcpy(&out, &bits, 4);
  return out;
}

static DLTensor f32_tensor(float* data, int ndim, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

static DLTensor i64_tensor(int64_t* data, int ndim, int64_t* shape) {
  DLTensor t = f32_tensor(NULL, ndim, shape);
  t.data = data;
  t.dtype.code = kDLInt;
  t.dtype.bits = 64;
  return t;
}

static int64_t key(const tokpos_gguf* f, const char* name) {
  int64_t i = -2;
  return tokpos_gguf_find_key(f, name, &i) == TOKPOS_OK ? i : -2;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
    return 2;
  }
  const char* dir = argv[1];
  tokpos_gguf* f = NULL;
  CHECK("a GGUF file written by gguf-py opens", tokpos_gguf_open(&f, path_of(dir, "gpt2_tiny.gguf")) == TOKPOS_OK);
  if (f == NULL) return c_check_summary();

  uint32_t version = 0;
  uint64_t alignment = 0;
  int64_t n_tensors = 0, n_keys = 0;
  CHECK("counts", tokpos_gguf_counts(f, &version, &alignment, &n_tensors, &n_keys) == TOKPOS_OK && version == 3 &&
                      alignment == 32 && n_tensors == 2 && n_keys == 22);

  const char* text = NULL;
  uint64_t length = 0;
  CHECK("general.architecture is the string gpt2",
        tokpos_gguf_get_string(f, key(f, "general.architecture"), -1, &text, &length) == TOKPOS_OK &&
            length == 4 && memcmp(text, "gpt2", 4) == 0);
  int64_t i64 = 0;
  uint64_t u64 = 0;
  double dbl = 0;
  CHECK("an INT8 as int64", tokpos_gguf_get_int64(f, key(f, "test.int8"), -1, &i64) == TOKPOS_OK && i64 == -100);
  CHECK("a UINT64 past INT64_MAX as uint64",
        tokpos_gguf_get_uint64(f, key(f, "test.uint64"), -1, &u64) == TOKPOS_OK &&
            u64 == UINT64_C(18000000000000000000));
  CHECK("a FLOAT32 as double", tokpos_gguf_get_double(f, key(f, "test.float32"), -1, &dbl) == TOKPOS_OK &&
                                   dbl == 0.15625);
  CHECK("a BOOL as int64 1", tokpos_gguf_get_int64(f, key(f, "test.bool"), -1, &i64) == TOKPOS_OK && i64 == 1);

  const int64_t tokens = key(f, "tokenizer.ggml.tokens");
  const char* k = NULL;
  int32_t type = -1, elem = -1;
  uint64_t count = 0;
  CHECK("an array of 16 strings", tokpos_gguf_key_at(f, tokens, &k, &type, &elem, &count) == TOKPOS_OK &&
                                      strcmp(k, "tokenizer.ggml.tokens") == 0 && type == TOKPOS_GGUF_ARRAY &&
                                      elem == TOKPOS_GGUF_STRING && count == 16);
  CHECK("its element 3", tokpos_gguf_get_string(f, tokens, 3, &text, &length) == TOKPOS_OK && length == 4 &&
                             memcmp(text, "tok3", 4) == 0);
  CHECK("an element past the array is refused by name",
        tokpos_gguf_get_string(f, tokens, 16, &text, &length) == TOKPOS_INVALID_ARGUMENT &&
            has("element 16 of 'tokenizer.ggml.tokens' is outside [0, 16)"));
  CHECK("the array itself as a scalar is refused",
        tokpos_gguf_get_string(f, tokens, -1, &text, &length) == TOKPOS_INVALID_ARGUMENT && has("array of 16"));
  CHECK("a string as int64 is refused, naming the key",
        tokpos_gguf_get_int64(f, key(f, "general.name"), -1, &i64) == TOKPOS_INVALID_ARGUMENT &&
            has("'general.name'"));
  CHECK("a negative INT64 as uint64 is refused",
        tokpos_gguf_get_uint64(f, key(f, "test.int64"), -1, &u64) == TOKPOS_INVALID_ARGUMENT);
  CHECK("a missing key is index -1", key(f, "no.such.key") == -1);
  CHECK("a key index past the end is refused", tokpos_gguf_get_int64(f, 22, -1, &i64) == TOKPOS_INVALID_ARGUMENT &&
                                                   has("outside [0, 22)"));

  tokpos_gguf_tensor t;
  memset(&t, 0, sizeof t);
  CHECK("token_embd.weight by name", tokpos_gguf_find_tensor(f, "token_embd.weight", &t) == TOKPOS_OK &&
                                         strcmp(t.name, "token_embd.weight") == 0 && t.ggml_type == 0 &&
                                         t.n_dims == 2 && t.dims[0] == 8 && t.dims[1] == 16 && t.nbytes == 512);
  /* gguf-py read its first bytes as c3 91 a0 3f 0d e3 46 3f. */
  static const unsigned char first[8] = {0xc3, 0x91, 0xa0, 0x3f, 0x0d, 0xe3, 0x46, 0x3f};
  CHECK("its data in place", t.data != NULL && memcmp(t.data, first, 8) == 0);
  CHECK("its blocks view: (16, 32) uint8 over the same bytes",
        t.blocks.data == t.data && t.blocks.ndim == 2 && t.blocks.shape[0] == 16 && t.blocks.shape[1] == 32 &&
            t.blocks.dtype.code == kDLUInt && t.blocks.dtype.bits == 8 && t.blocks.device.device_type == kDLCPU);
  CHECK("tensor 1 is position_embd.weight", tokpos_gguf_tensor_at(f, 1, &t) == TOKPOS_OK &&
                                                strcmp(t.name, "position_embd.weight") == 0 && t.dims[1] == 12);
  CHECK("a tensor index past the end is refused", tokpos_gguf_tensor_at(f, 2, &t) == TOKPOS_INVALID_ARGUMENT);
  CHECK("a missing tensor is refused by name",
        tokpos_gguf_find_tensor(f, "output.weight", &t) == TOKPOS_INVALID_ARGUMENT && has("output.weight"));
  /* The f32 tables through the blocks view: out = token row + position row. */
  {
    tokpos_gguf_tensor tok, pos;
    static float out[2 * 8];
    int64_t ids[2] = {5, 15}, ids_shape[1] = {2}, out_shape[2] = {2, 8};
    const int ok = tokpos_gguf_find_tensor(f, "token_embd.weight", &tok) == TOKPOS_OK &&
                   tokpos_gguf_find_tensor(f, "position_embd.weight", &pos) == TOKPOS_OK;
    int64_t pos_shape[2] = {12, 8};
    DLTensor o = f32_tensor(out, 2, out_shape), i = i64_tensor(ids, 1, ids_shape);
    DLTensor p = f32_tensor((float*)(uintptr_t)pos.data, 2, pos_shape);
    const tokpos_status st =
        ok ? tokpos_op_compose_forward_ggml(&o, &i, &tok.blocks, tok.ggml_type, tok.dims[0], &p, NULL, 3)
           : TOKPOS_INTERNAL;
    int same = st == TOKPOS_OK;
    const float* wte = (const float*)tok.data;
    const float* wpe = (const float*)pos.data;
    for (int n = 0; n < 2 && same; ++n)
      for (int d = 0; d < 8; ++d) same = same && out[n * 8 + d] == wte[ids[n] * 8 + d] + wpe[(3 + n) * 8 + d];
    CHECK("an f32 file's blocks compose as token + position rows", same);
  }
  tokpos_gguf_free(f);

  /* Q8_0 from its file: each element d * qs, d the block's fp16 scale. */
  tokpos_gguf* q8 = NULL;
  CHECK("a q8_0 table opens", tokpos_gguf_open(&q8, path_of(dir, "token_embd_q8_0.gguf")) == TOKPOS_OK);
  if (q8 != NULL) {
    tokpos_gguf_tensor tok;
    static float out[256];
    int64_t ids[1] = {2}, ids_shape[1] = {1}, out_shape[2] = {1, 256};
    DLTensor o = f32_tensor(out, 2, out_shape), i = i64_tensor(ids, 1, ids_shape);
    int same = tokpos_gguf_find_tensor(q8, "token_embd.weight", &tok) == TOKPOS_OK &&
               tokpos_op_compose_forward_ggml(&o, &i, &tok.blocks, tok.ggml_type, tok.dims[0], NULL, NULL, 0) ==
                   TOKPOS_OK;
    const unsigned char* row = (const unsigned char*)tok.data + 2 * tok.blocks.shape[1];
    for (int b = 0; b < 8 && same; ++b) {
      const unsigned char* block = row + b * 34;
      const float dq = half_to_float((uint16_t)(block[0] | (block[1] << 8)));
      for (int k = 0; k < 32; ++k) same = same && out[b * 32 + k] == dq * (float)(signed char)block[2 + k];
    }
    CHECK("a q8_0 file's row 2 is d * qs, block by block", same);
    tokpos_gguf_free(q8);
  }

  tokpos_gguf* q = NULL;
  CHECK("a q6_K table opens", tokpos_gguf_open(&q, path_of(dir, "token_embd_q6_k.gguf")) == TOKPOS_OK);
  if (q != NULL) {
    CHECK("its type and blocks: 4 rows of one 210-byte block",
          tokpos_gguf_find_tensor(q, "token_embd.weight", &t) == TOKPOS_OK && t.ggml_type == 14 &&
              t.dims[0] == 256 && t.blocks.shape[0] == 4 && t.blocks.shape[1] == 210);
    tokpos_gguf_free(q);
  }

  /* A cut copy of the file: refused whole, naming it. */
  const char* cut = "capi_gguf_cut.gguf";
  {
    FILE* in = fopen(path_of(dir, "gpt2_tiny.gguf"), "rb");
    FILE* out = fopen(cut, "wb");
    char buf[1000];
    const size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
    if (out) fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (out) fclose(out);
  }
  tokpos_gguf* bad = (tokpos_gguf*)&g_passed; /* a canary: must stay untouched on failure */
  CHECK("a truncated file is TOKPOS_CORRUPT_FILE naming it, out untouched",
        tokpos_gguf_open(&bad, cut) == TOKPOS_CORRUPT_FILE && has(cut) && bad == (tokpos_gguf*)&g_passed);
  remove(cut);
  CHECK("a missing file is TOKPOS_IO_ERROR", tokpos_gguf_open(&bad, "/nonexistent-dir/x.gguf") == TOKPOS_IO_ERROR);
  CHECK("NULL path is TOKPOS_NULL_POINTER", tokpos_gguf_open(&bad, NULL) == TOKPOS_NULL_POINTER);
  CHECK("NULL handle is TOKPOS_NULL_POINTER", tokpos_gguf_counts(NULL, NULL, NULL, NULL, NULL) == TOKPOS_NULL_POINTER);
  tokpos_gguf_free(NULL);
  return c_check_summary();
}
