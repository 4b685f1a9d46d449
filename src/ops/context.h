// Private to the ops layer: what a Context holds, and the kernels' view of it.
#pragma once

#include "kernels/kernels.h"
#include "tokpos/ops.h"

namespace tokpos {

struct Context::Scratch {
  kernels::Workspace ws;
  const kernels::KernelTable* backend = nullptr;  // nullptr: active_kernels()
};

namespace ops::detail {
// The kernels' Exec for a call: ctx's settings (or the process defaults),
// and its workspace when the call may keep scratch there.
kernels::Exec exec_for(const Context* ctx, bool with_scratch);
// The back end a call runs on: ctx's choice, else active_kernels().
const kernels::KernelTable& kernels_for(const Context* ctx);
}  // namespace ops::detail

}  // namespace tokpos
