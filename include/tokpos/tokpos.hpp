// tokpos/tokpos.hpp: the whole C++ API in one include.
#pragma once

#include "tokpos/composer.h"
#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/positional.h"
#include "tokpos/random.h"
#include "tokpos/sinusoidal.h"
#include "tokpos/threading.h"
#include "tokpos/token_embedding.h"
#include "tokpos/tokenizer.h"
