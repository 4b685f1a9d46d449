// tokpos serve: a local HTTP server with one page and a JSON API over the
// library (docs/serve.md). This header needs no HTTP library: the command
// line parses into ServeOptions, and the API answers are plain functions of
// a parameter map, so both can be used without a socket.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace tokpos::frontend {
struct TrainedPositions;
struct TrainingRun;
}

namespace tokpos::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";  // the address to bind; anything not loopback is warned about
  int port = 8765;                 // 0: any free port (printed when ready)
  int threads = 16;                // requests served at once (one worker thread each)
  std::string weights;             // a .safetensors file: its position table becomes positions=trained;
                                   // a training run ("tokpos.run" metadata): its snapshots, positions=trained&step=N
  std::string preset;              // gpt2 or bert: which tensor of `weights` is the position table (not for a run)
  std::vector<std::string> map;    // --map ROLE=NAME: other tensor names (frontend::parse_name_map)
};

// The work caps, as docs/serve.md states them (each parameter's own bounds
// are its rule's, frontend/params.h, the same as the command line's).
inline constexpr size_t kMaxTextBytes = 4096;
inline constexpr int64_t kMaxTableValues = int64_t{1} << 22;    // context*dim and vocab*dim
inline constexpr int64_t kMaxRowValues = int64_t{1} << 18;      // T*dim of each embed array, dim/2 wavelengths
inline constexpr int64_t kMaxOffsetWork = int64_t{1} << 27;     // (max_offset+1)*context*dim
inline constexpr int64_t kMaxMatrixContext = 512;               // the L x L matrix, up to here
inline constexpr int64_t kMaxMatrixWork = int64_t{1} << 29;     // and context*context*dim up to here
inline constexpr int64_t kDefaultMaxOffset = 1023;              // offsets 0..this at most, by default
inline constexpr size_t kMaxPayloadBytes = 4096;                // request bodies (only refused anyway)

// One API answer: an HTTP status and the JSON body text.
struct ApiAnswer {
  int status = 200;
  std::string body;
};

// The query parameters of one request, decoded; a name given twice is an error.
using Params = std::multimap<std::string, std::string>;

// GET /api/embed, /api/similarity, /api/wavelengths. 400 with {"error": ...}
// naming the parameter and its limit for bad input; never throws for bad
// input (only for an internal failure such as running out of memory).
// `trained`: the table positions=trained reads (serve --weights), or nullptr.
// `run`: serve --weights RUN.safetensors, a training run, or nullptr; with
// it, positions=trained takes step=N (one of the run's steps; default the
// last) and reads that snapshot, and `trained` is the last one.
ApiAnswer api_embed(const Params& params, const frontend::TrainedPositions* trained = nullptr,
                    const frontend::TrainingRun* run = nullptr);
ApiAnswer api_similarity(const Params& params, const frontend::TrainedPositions* trained = nullptr,
                         const frontend::TrainingRun* run = nullptr);
// GET /api/trained: {"trained": null}, or the trained table's file, preset, context and dim.
ApiAnswer api_trained(const frontend::TrainedPositions* trained);
// GET /api/run: {"run": null}, or the run's file, context, dim, steps, the
// four loss series, each snapshot's mean adjacent cosine, and its config and
// beyond metadata as they are in the file.
ApiAnswer api_run(const frontend::TrainingRun* run);
// GET /api/run/table?step=N: snapshot N's whole (L, D) table as rows and its
// adjacent cosines (L*D over kMaxTableValues: the first rows only, said in
// rows_omitted). 400 naming step when there is no run or N is not a step of it.
ApiAnswer api_run_table(const Params& params, const frontend::TrainingRun* run);
ApiAnswer api_wavelengths(const Params& params);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// Serves until SIGINT or SIGTERM. Prints "tokpos serve: listening on URL"
// to `out` (flushed) once the socket accepts connections, warnings and
// errors to `err`. Returns the exit status: 0 after a signal, 1 if the
// address cannot be bound.
int run_serve(const ServeOptions& options, std::ostream& out, std::ostream& err);

}  // namespace tokpos::serve
