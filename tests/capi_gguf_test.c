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
  tokpos_gguf_free(f);

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
