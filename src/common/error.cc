#include "tokpos/error.h"

namespace tokpos {

const char* status_name(Status s) noexcept {
  switch (s) {
    case Status::kOk: return "TOKPOS_OK";
    case Status::kInvalidArgument: return "TOKPOS_INVALID_ARGUMENT";
    case Status::kNullPointer: return "TOKPOS_NULL_POINTER";
    case Status::kIdOutOfRange: return "TOKPOS_ID_OUT_OF_RANGE";
    case Status::kPositionOutOfRange: return "TOKPOS_POSITION_OUT_OF_RANGE";
    case Status::kShapeMismatch: return "TOKPOS_SHAPE_MISMATCH";
    case Status::kSizeOverflow: return "TOKPOS_SIZE_OVERFLOW";
    case Status::kOutOfMemory: return "TOKPOS_OUT_OF_MEMORY";
    case Status::kInternal: return "TOKPOS_INTERNAL";
    case Status::kUnimplemented: return "TOKPOS_UNIMPLEMENTED";
    case Status::kIoError: return "TOKPOS_IO_ERROR";
    case Status::kCorruptFile: return "TOKPOS_CORRUPT_FILE";
  }
  return "TOKPOS_UNKNOWN_STATUS";
}

}  // namespace tokpos
