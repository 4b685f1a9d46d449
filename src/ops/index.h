// Private to the ops layer: (b, t) access to a checked index view (ids,
// positions), as the kernels read it. Separate from tensor.h, which the
// modules also see: they may not see the kernels.
#pragma once

#include "kernels/kernels.h"
#include "ops/tensor.h"

namespace tokpos::ops::detail {

// A (B, T) or (N) index view; a 1-D view is row 0 (its element i is
// at(0, i)). An absent view gives Index{} (data nullptr).
inline kernels::Index index_of(const View& v) {
  if (!v.present) return {};
  if (v.ndim == 1) return {v.data, v.dtype, 0, v.strides[0]};
  return {v.data, v.dtype, v.strides[0], v.strides[1]};
}

}  // namespace tokpos::ops::detail
