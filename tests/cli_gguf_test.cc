// `tokpos inspect` and `tokpos embed --weights FILE.gguf`, run as a user
// would, checked against what llama.cpp's own Python package (gguf-py) wrote
// and read back (tests/data/gguf/expected.json, dequant/*.npy: written by
// tools/make_gguf_data.py, with no tokpos code involved).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_command.h"
#include "tokpos/npy.h"

namespace {

const std::string kData = std::string(TOKPOS_TEST_DATA) + "/gguf/";

nlohmann::json expected() {
  std::ifstream f(kData + "expected.json");
  return nlohmann::json::parse(f);
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string scratch(const std::string& name) { return ::testing::TempDir() + "/cli_gguf_" + name; }

// The scalars of a (possibly nested) JSON array, in order: gguf-py reads an
// array of arrays as its elements one after another.
void flatten(const nlohmann::json& v, nlohmann::json& out) {
  if (!v.is_array()) return out.push_back(v);
  for (const auto& e : v) flatten(e, out);
}

TEST(CliGguf, InspectListsWhatGgufPyWrote) {
  const auto all = expected();  // held: a range over a temporary's member would dangle
  for (const auto& [file, want] : all["files"].items()) {
    const auto r = run("inspect --json " + kData + file);
    ASSERT_EQ(r.status, 0) << file << ": " << r.out;
    const auto got = nlohmann::json::parse(r.out);
    EXPECT_EQ(got["format"], "gguf");
    EXPECT_EQ(got["alignment"], want["alignment"]) << file;
    ASSERT_EQ(got["tensors"].size(), want["tensors"].size()) << file;
    for (size_t i = 0; i < want["tensors"].size(); ++i) {
      const auto& w = want["tensors"][i];
      const auto& g = got["tensors"][i];
      EXPECT_EQ(g["name"], w["name"]);
      std::string type = w["type_name"];
      std::string got_type = g["type"];
      for (auto& ch : type) ch = static_cast<char>(std::tolower(ch));
      for (auto& ch : got_type) ch = static_cast<char>(std::tolower(ch));
      EXPECT_EQ(got_type, type) << file;
      auto dims = w["dims"].get<std::vector<int64_t>>();
      EXPECT_EQ(g["shape"].get<std::vector<int64_t>>(), std::vector<int64_t>(dims.rbegin(), dims.rend())) << file;
      EXPECT_EQ(g["bytes"], w["nbytes"]) << file;
      EXPECT_EQ(g["offset"].get<uint64_t>(), want["data_offset"].get<uint64_t>() + w["offset"].get<uint64_t>());
    }
    ASSERT_EQ(got["metadata"].size(), want["metadata"].size()) << file;
    for (const auto& w : want["metadata"]) {
      const std::string key = w["key"];
      ASSERT_TRUE(got["metadata"].contains(key)) << file << ": " << key;
      const auto& g = got["metadata"][key];
      const std::string type = w["type"];
      EXPECT_EQ(g["type"].get<std::string>().rfind(type, 0), 0u) << key << ": " << g["type"];
      nlohmann::json flat = nlohmann::json::array(), want_flat = nlohmann::json::array();
      flatten(g["value"], flat);
      flatten(w["value"], want_flat);
      if (type == "FLOAT32" || type == "FLOAT64" || w.value("element_type", nlohmann::json()) == "FLOAT32") {
        ASSERT_EQ(flat.size(), want_flat.size()) << key;
        for (size_t k = 0; k < flat.size(); ++k) EXPECT_EQ(flat[k].get<double>(), want_flat[k].get<double>()) << key;
      } else {
        EXPECT_EQ(flat, want_flat) << key;
      }
    }
  }
}

TEST(CliGguf, InspectPrintsATable) {
  const auto r = run("inspect " + kData + "gpt2_tiny.gguf");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* piece : {"gguf v3, alignment 32, 2 tensors", "general.architecture (STRING) = gpt2",
                            "tokenizer.ggml.tokens (ARRAY of STRING) = [16 items: tok0, tok1,",
                            "token_embd.weight     f32   [16, 8]  512", "total: 896 bytes"}) {
    EXPECT_NE(r.out.find(piece), std::string::npos) << "missing: " << piece << "\n" << r.out;
  }
}

// A safetensors file: its header (8-byte length, then JSON) read here directly.
TEST(CliGguf, InspectReadsSafetensorsToo) {
  const std::string path = std::string(TOKPOS_TEST_DATA) + "/safetensors/tiny_gpt2.safetensors";
  const auto bytes = file_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const auto header = nlohmann::json::parse(std::string(bytes.data() + 8, n));
  const auto r = run("inspect --json " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto got = nlohmann::json::parse(r.out);
  EXPECT_EQ(got["format"], "safetensors");
  size_t tensors = 0;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    ++tensors;
    bool found = false;
    for (const auto& t : got["tensors"]) {
      if (t["name"] != name) continue;
      found = true;
      EXPECT_EQ(t["type"], info["dtype"]);
      EXPECT_EQ(t["shape"], info["shape"]);
      EXPECT_EQ(t["bytes"].get<uint64_t>(),
                info["data_offsets"][1].get<uint64_t>() - info["data_offsets"][0].get<uint64_t>());
    }
    EXPECT_TRUE(found) << name;
  }
  EXPECT_EQ(got["tensors"].size(), tensors);
}

// Every quantized token table: the rows tokpos looks up equal gguf-py's
// gguf.quants.dequantize of the same rows, bit for bit (llama-family files:
// no position table).
TEST(CliGguf, EmbedLooksUpQuantizedRowsAsGgufPyDequantizes) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kData + "dequant")) {
    const std::string type = entry.path().stem().string();
    const auto table = tokpos::read_npy(entry.path().string());  // (4, 256) float32
    ASSERT_EQ(table.shape, (std::vector<int64_t>{4, 256})) << type;
    const std::vector<int64_t> ids{3, 0, 2, 1, 3};
    const std::string out = scratch(type + ".npy");
    const auto r = run("embed --weights " + kData + "token_embd_" + type + ".gguf --ids '3,0,2;1,3,0' --out " + out);
    ASSERT_EQ(r.status, 0) << type << ": " << r.out;
    EXPECT_NE(r.out.find("token rows only"), std::string::npos) << r.out;
    const auto got = tokpos::read_npy(out);
    ASSERT_EQ(got.shape, (std::vector<int64_t>{2, 3, 256})) << type;
    const int64_t order[6] = {3, 0, 2, 1, 3, 0};
    const auto* g = reinterpret_cast<const float*>(got.data.data());
    const auto* w = reinterpret_cast<const float*>(table.data.data());
    for (int k = 0; k < 6; ++k) {
      EXPECT_EQ(std::memcmp(g + k * 256, w + order[k] * 256, 256 * sizeof(float)), 0)
          << type << ": row " << k << " (id " << order[k] << ")";
    }
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

// GPT-2's GGUF: token_embd.weight + position_embd.weight, both f32; the
// expected sum is computed here from the file's bytes at gguf-py's offsets.
TEST(CliGguf, EmbedAddsGpt2PositionTable) {
  const auto want = expected()["files"]["gpt2_tiny.gguf"];
  const auto bytes = file_bytes(kData + "gpt2_tiny.gguf");
  auto table = [&](int i) {
    const auto& t = want["tensors"][i];
    const uint64_t at = want["data_offset"].get<uint64_t>() + t["offset"].get<uint64_t>();
    std::vector<float> v(t["nbytes"].get<size_t>() / 4);
    std::memcpy(v.data(), bytes.data() + at, v.size() * 4);
    return v;
  };
  ASSERT_EQ(want["tensors"][0]["name"], "token_embd.weight");
  ASSERT_EQ(want["tensors"][1]["name"], "position_embd.weight");
  const auto wte = table(0), wpe = table(1);
  const int64_t D = 8;
  const std::string out = scratch("gpt2.npy");
  const auto r = run("embed --weights " + kData + "gpt2_tiny.gguf --ids '5,0,15' --past 2 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("gpt2 from"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("positions 2..4"), std::string::npos) << r.out;
  const auto got = tokpos::read_npy(out);
  ASSERT_EQ(got.shape, (std::vector<int64_t>{1, 3, D}));
  const auto* g = reinterpret_cast<const float*>(got.data.data());
  const int64_t ids[3] = {5, 0, 15};
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(g[t * D + d], wte[ids[t] * D + d] + wpe[(2 + t) * D + d]) << "t " << t << " d " << d;
  // A left-padded batch: positions from the mask, pads at 1 as elsewhere in the CLI.
  const auto m = run("embed --weights " + kData + "gpt2_tiny.gguf --ids '4,1;1,2' --mask '0,1;1,1' --out " + out);
  ASSERT_EQ(m.status, 0) << m.out;
  const auto padded = tokpos::read_npy(out);
  const auto* p = reinterpret_cast<const float*>(padded.data.data());
  for (int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(p[1 * D + d], wte[1 * D + d] + wpe[0 * D + d]);  // (0, 1): the first real token, position 0
    EXPECT_EQ(p[3 * D + d], wte[2 * D + d] + wpe[1 * D + d]);  // (1, 1): position 1
  }
}

TEST(CliGguf, BadInputIsRefusedByName) {
  const std::string q = kData + "token_embd_q4_k.gguf";
  const std::string g = kData + "gpt2_tiny.gguf";
  const std::string truncated = scratch("truncated.gguf");
  {
    auto bytes = file_bytes(g);
    std::ofstream(truncated, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 100));
  }
  const std::string fifo = scratch("fifo.gguf");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  struct Case {
    std::string args;
    std::string message;
  };
  for (const Case& c : {Case{"embed --weights " + q + " --ids 4", "token id 4 at (b=0, t=0) is outside [0, 4)"},
                        Case{"embed --weights " + q + " --preset gpt2 --ids 1", "--preset is for safetensors"},
                        Case{"embed --weights " + q + " --ids 1 --past 3", "has no position table"},
                        Case{"embed --weights " + q + " --ids 1 --map wte=x", "--map is for safetensors"},
                        Case{"embed --weights " + g + " --ids 1 --mask 1,1", "--mask must be (B, past + T) = (1, 1)"},
                        Case{"embed --weights " + truncated + " --ids 1", truncated},
                        Case{"inspect " + truncated, truncated},
                        Case{"inspect " + fifo, "not a regular file"},
                        Case{"inspect /nonexistent-dir/x.gguf", "/nonexistent-dir/x.gguf"}}) {
    const auto r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args << " -> " << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << " -> " << r.out;
  }
  ::unlink(fifo.c_str());
}


// --- Files crafted here, byte by byte ---

// A GGUF v3 file: string key/values, then f32 (rows, D) tensors holding
// `values` in order, each at the next multiple of `alignment` (plus `shift`
// bytes for the first), the data section padded to `alignment`.
struct Tensor {
  std::string name;
  int64_t rows, dim;
  std::vector<float> values;
};
std::string write_gguf(const std::string& path, const std::vector<std::pair<std::string, std::string>>& strings,
                       const std::vector<Tensor>& tensors, uint32_t alignment = 32, uint64_t shift = 0) {
  std::string b = "GGUF";
  auto u32 = [&](uint32_t x) { b.append(reinterpret_cast<const char*>(&x), 4); };
  auto u64 = [&](uint64_t x) { b.append(reinterpret_cast<const char*>(&x), 8); };
  auto str = [&](const std::string& x) { u64(x.size()); b += x; };
  u32(3);
  u64(tensors.size());
  u64(strings.size() + (alignment != 32 ? 1 : 0));
  for (const auto& [k, v] : strings) {
    str(k);
    u32(8);
    str(v);
  }
  if (alignment != 32) {
    str("general.alignment");
    u32(4);
    u32(alignment);
  }
  std::vector<uint64_t> offsets;
  uint64_t at = shift;
  for (const auto& t : tensors) {
    offsets.push_back(at);
    at += static_cast<uint64_t>(t.values.size()) * 4;
    at = (at + alignment - 1) / alignment * alignment;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    str(tensors[i].name);
    u32(2);
    u64(static_cast<uint64_t>(tensors[i].dim));
    u64(static_cast<uint64_t>(tensors[i].rows));
    u32(0);  // f32
    u64(offsets[i]);
  }
  while (b.size() % alignment != 0) b += '\0';
  const size_t data = b.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    b.resize(data + offsets[i], '\0');
    b.append(reinterpret_cast<const char*>(tensors[i].values.data()), tensors[i].values.size() * 4);
  }
  std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  return path;
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i) - 1.5f;
  return v;
}

// Bytes that are not UTF-8 and control characters in a key, a string value
// and a tensor name: plain inspect, --json and embed all read the file, and
// neither form sends a control byte or a byte that is not UTF-8 to the terminal.
TEST(CliGguf, BytesThatAreNotUtf8OrControlsAreShownAsHexEscapes) {
  const std::string key = "evil.\xff\x1b]0;title\x07";
  const std::string value = std::string("v\xc3(\x1b[31mred\r\x1b[2K\0nul\xc2\x9b", 22);
  const std::string name = "tok\xfe\x1b[H";
  const std::string path = write_gguf(scratch("bytes.gguf"), {{"general.architecture", "llama"}, {key, value}},
                                      {{"token_embd.weight", 3, 4, ramp(12, 0.25f)}, {name, 1, 4, ramp(4, 1.0f)}});
  // The table's text here is printable ASCII; JSON's may hold UTF-8 (its
  // U+009B stays as it is), but no C0 control byte and no byte that is not UTF-8.
  auto clean = [](const std::string& out, bool ascii = true) {
    for (size_t i = 0; i < out.size(); ++i) {
      const auto c = static_cast<unsigned char>(out[i]);
      if (c == '\n') continue;
      if (c < 0x20 || c == 0x7f) return "control byte " + std::to_string(c) + " at " + std::to_string(i);
      if (c >= 0x80 && ascii) return "a byte above 0x7f at " + std::to_string(i);
      if (c >= 0x80 && !(c == 0xc2 && i + 1 < out.size() && static_cast<unsigned char>(out[i + 1]) == 0x9b))
        return "a byte that is not the UTF-8 of U+009B at " + std::to_string(i);
      if (c >= 0x80) ++i;
    }
    return std::string();
  };
  const auto table = run("inspect " + path);
  ASSERT_EQ(table.status, 0) << table.out;
  EXPECT_EQ(clean(table.out), "") << table.out;
  for (const char* piece : {"evil.\\xff\\x1b]0;title\\x07 (STRING) = v\\xc3(\\x1b[31mred\\x0d\\x1b[2K\\x00nul\\xc2\\x9b",
                            "tok\\xfe\\x1b[H"}) {
    EXPECT_NE(table.out.find(piece), std::string::npos) << "missing: " << piece << "\n" << table.out;
  }
  const auto json = run("inspect --json " + path);
  ASSERT_EQ(json.status, 0) << json.out;
  EXPECT_EQ(clean(json.out, false), "") << json.out;
  const auto j = nlohmann::json::parse(json.out);
  // JSON holds the text of the rule (bytes that are not UTF-8 as \xNN); its
  // own escapes carry the control characters.
  ASSERT_TRUE(j["metadata"].contains("evil.\\xff\x1b]0;title\x07")) << json.out;
  EXPECT_EQ(j["metadata"]["evil.\\xff\x1b]0;title\x07"]["value"],
            std::string("v\\xc3(\x1b[31mred\r\x1b[2K\0nul\xc2\x9b", 25));
  EXPECT_EQ(j["tensors"][1]["name"], "tok\\xfe\x1b[H");
  const auto embed = run("embed --weights " + path + " --ids 2,0");
  EXPECT_EQ(embed.status, 0) << embed.out;
  EXPECT_NE(embed.out.find("llama from"), std::string::npos) << embed.out;
  // An architecture name with control bytes is shown escaped too.
  const std::string odd = write_gguf(scratch("arch.gguf"), {{"general.architecture", "ll\x1b[2Jama"}},
                                     {{"token_embd.weight", 3, 4, ramp(12, 0.25f)}});
  const auto e = run("embed --weights " + odd + " --ids 2,0");
  EXPECT_EQ(e.status, 0) << e.out;
  EXPECT_NE(e.out.find("ll\\x1b[2Jama from"), std::string::npos) << e.out;
  EXPECT_EQ(clean(e.out), "") << e.out;
}

// general.alignment 1 lets an f32 table start at any byte: embed copies
// such rows to aligned memory and reads them as gguf-py would.
TEST(CliGguf, EmbedReadsF32TablesTheAlignmentLeavesUnaligned) {
  const auto wte = ramp(12, 0.25f), wpe = ramp(8, -0.5f);
  for (const uint64_t shift : {0, 1, 2, 3}) {
    SCOPED_TRACE(shift);
    const std::string path =
        write_gguf(scratch("align1.gguf"), {{"general.architecture", "gpt2"}},
                   {{"token_embd.weight", 3, 4, wte}, {"position_embd.weight", 2, 4, wpe}}, 1, shift);
    const auto info = run("inspect --json " + path);
    ASSERT_EQ(info.status, 0) << info.out;
    EXPECT_EQ(nlohmann::json::parse(info.out)["alignment"], 1);
    const std::string out = scratch("align1.npy");
    const auto r = run("embed --weights " + path + " --ids 2,0 --out " + out);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto got = tokpos::read_npy(out);
    ASSERT_EQ(got.shape, (std::vector<int64_t>{1, 2, 4}));
    const auto* g = reinterpret_cast<const float*>(got.data.data());
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(g[d], wte[8 + d] + wpe[d]);
      EXPECT_EQ(g[4 + d], wte[d] + wpe[4 + d]);
    }
  }
}

// An empty or 3-byte .gguf is named as GGUF by its extension: the magic is
// what is missing, not a safetensors header.
TEST(CliGguf, FilesTooShortForAMagicAreNamedByTheirExtension) {
  for (const size_t n : {0, 3}) {
    const std::string path = scratch("short" + std::to_string(n) + ".GGUF");
    std::ofstream(path, std::ios::binary).write("GGU", static_cast<std::streamsize>(n));
    for (const std::string cmd : {"inspect ", "inspect --json ", "embed --ids 1 --weights "}) {
      const auto r = run(cmd + path);
      EXPECT_EQ(r.status, 1) << cmd << r.out;
      EXPECT_NE(r.out.find("gguf: " + path + ": at byte 0: magic needs 4 bytes but the file ends at byte " +
                           std::to_string(n)),
                std::string::npos)
          << cmd << r.out;
      EXPECT_EQ(r.out.find("safetensors"), std::string::npos) << cmd << r.out;
    }
  }
}

}  // namespace
