// tokpos/tokpos.hpp: the whole C++ API in one include.
//
// Every public header of include/tokpos but two: tokpos.h, the C API (it
// includes nothing C++), and export.h, the visibility macro the others
// include. The test public_headers (tests/CMakeLists.txt) fails when a header
// of include/tokpos is missing here.
#pragma once

#include "tokpos/checkpoint.h"
#include "tokpos/composer.h"
#include "tokpos/diagnostics.h"
#include "tokpos/dtype.h"
#include "tokpos/error.h"
#include "tokpos/files.h"
#include "tokpos/ggml_type.h"
#include "tokpos/gguf.h"
#include "tokpos/npy.h"
#include "tokpos/ops.h"
#include "tokpos/position_table.h"
#include "tokpos/positional.h"
#include "tokpos/positions.h"
#include "tokpos/presets.h"
#include "tokpos/random.h"
#include "tokpos/rope.h"
#include "tokpos/safetensors.h"
#include "tokpos/table_storage.h"
#include "tokpos/threading.h"
#include "tokpos/token_embedding.h"
#include "tokpos/tokenizer.h"
