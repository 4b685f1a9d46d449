"""tokpos.torch: the lesson's embedding modules as torch.nn.Modules.

    Embedding, embedding           torch.nn.Embedding / F.embedding's contract on tokpos's kernels
    TokenEmbedding                 (V, D) token table, ids -> (B, T, D)
    LearnedPositionalEmbedding     (L, D) trained position table
    SinusoidalPositionalEmbedding  (L, D) fixed table, a buffer (no parameters)
    EmbeddingComposer              token rows + position rows in one fused kernel
    RotaryEmbedding                RoPE of queries and keys (apply_rope, a function too)
    apply_rope_tables              q and k rotated by given cos and sin (transformers' apply_rotary_pos_emb)
    VocabParallelEmbedding         one rank's shard of a token table (torch.distributed)
    VocabParallelComposer          shard rows + position rows across ranks

Every forward runs tokpos's compiled kernels on the tensors' own memory (no
copies). Autograd goes through custom operators in the "tokpos" namespace
(torch.ops.tokpos.compose, .compose_backward, .token_grad_rows,
.apply_rope, .apply_rope_tables), registered
with torch.library.custom_op, so the modules work under autograd and under
torch.compile(fullgraph=True), and each op passes torch.library.opcheck.

Every op and module also works under fake tensors (FakeTensorMode, as
torch.compile and torch.export trace), meta tensors (a meta result of the
right shape; modules built with device="meta", under torch.device("meta")
or FakeTensorMode from shapes alone), forward-mode AD (torch.autograd.forward_ad,
torch.func.jvp: the tangent through the same kernels) and torch.func (grad,
vmap, jacrev, hessian), or raises an error naming what it does not support.

Gradients are accumulated in float32 in a fixed order: each table row sums
its contributions in increasing (b, t) order, bitwise identical for any
thread count (tokpos.set_num_threads) and equal to torch.nn.Embedding's
where torch sums in the same order. A table of another dtype (bfloat16,
float16) gets its gradient computed in float32 and rounded once.

When no gradient is needed (grad mode off, or no table requires grad) and
the call is not being compiled, forward calls the kernel directly, skipping
the operator dispatch: the decode step of a generation loop costs one kernel
call plus an output allocation.

Only CPU tensors are computed on (meta ones give meta results, another
device is a ValueError naming it); ids are int32 or int64, tables float32,
bfloat16 or float16. tokpos.torch needs torch >= 2.4
(torch.library.custom_op); importing it with an older torch raises
ImportError naming both versions.

This module only re-exports; the code lives in private modules:
_torch_ops (the custom ops and the one way into the kernel),
_torch_modules (the embedding modules), _torch_embedding (Embedding and
embedding, torch.nn.Embedding's contract, float64 tables included),
_torch_rope (RoPE) and _parallel (the vocab-parallel modules).
"""

# _torch_ops first: it checks torch's version before anything uses a newer API.
from . import _torch_ops  # noqa: F401, I001
from ._torch_embedding import Embedding, embedding
from ._torch_modules import (
    EmbeddingComposer,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEmbedding,
    TokenEmbedding,
)
from ._torch_rope import RotaryEmbedding, apply_rope, apply_rope_tables
from ._parallel import VocabParallelComposer, VocabParallelEmbedding

__all__ = [
    "Embedding",
    "EmbeddingComposer",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "SinusoidalPositionalEmbedding",
    "TokenEmbedding",
    "VocabParallelComposer",
    "VocabParallelEmbedding",
    "apply_rope",
    "apply_rope_tables",
    "embedding",
]
