// Private to the ops layer: what a Context holds, and the kernels' view of it.
#pragma once

#include "kernels/kernels.h"
#include "tokpos/ops.h"

namespace tokpos {

struct Context::Scratch {
  kernels::Workspace ws;
};

// What the ops read of a Context that the public API does not show.
struct ContextAccess {
  static const kernels::KernelTable* backend(const Context& c) {
    return static_cast<const kernels::KernelTable*>(c.backend_);
  }
};

namespace ops::detail {
// The kernels' Exec for a call: ctx's settings (or the process defaults).
// A forward passes no workspace; a backward passes ctx's (kept between
// calls), or none, and the kernel then allocates its own.
kernels::Exec exec_for(const Context* ctx, kernels::Workspace* ws = nullptr);
// A backward's workspace: ctx's, or nullptr without a Context.
kernels::Workspace* workspace_of(Context* ctx);
// The back end a call runs on: ctx's choice, else active_kernels().
const kernels::KernelTable& kernels_for(const Context* ctx);
}  // namespace ops::detail

}  // namespace tokpos
