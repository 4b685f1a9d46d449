"""tokpos.hf for the GPT-2 family: GPT2Model's token lookup, position lookup
and their sum as ONE fused tokpos call (tokpos::compose).

Every GPT2Model inside the model is patched (GPT2Model itself, and the
GPT2LMHeadModel, GPT2DoubleHeadsModel, GPT2For... classes whose
`transformer` is one). GPT2Model.forward has no place for a fused call
(it looks up wte, then wpe, then adds), so the patch gives each GPT2Model
instance a forward that mirrors transformers' own line for line, with those
three steps replaced by one compose call on the same two tables. The
modules wte and wpe stay where they are, the same nn.Embedding objects with
the same Parameters: the tie to the LM head (`lm_head.weight is
transformer.wte.weight`), the parameter count, the state_dict keys,
save_pretrained and resize_token_embeddings are unchanged. Position ids are
the model's: computed from the cache length when not given, else the
caller's ((1, T), (T,) or (B, T), as generate() passes them for a
left-padded batch); a (1, T) or (T,) row is broadcast over B.

The sum is one float32 addition per element, rounded once to the tables'
dtype, as torch's add of the two looked-up rows is: the hidden states and
logits are bitwise equal to the unpatched model's. So are the gradients
of a row with at most 64 sources: the token table's are summed per row in
increasing (b, t) order, as torch's embedding backward sums them, and so
are the position table's for (B, T) position ids. A row with more sources
(a token that appears more than 64 times in the batch) is summed by tokpos
in blocks of 64 (a fixed order, the same for any thread count), by torch one
at a time: the two differ by rounding only (tests: within 4 eps of the sum
of the absolute terms). A (1, T) row shared by the batch (the model's own
positions) has its gradient summed over B by torch first, as the unpatched
broadcast add does: torch's reduction over B is not in sequential order for
larger B (from B = 32 on the two orders differ by rounding), so the patch
keeps torch's (_SharedPositions). Under torch.compile the compose op's own
backward runs, whose position gradient is (b, t) ordered: for B >= 32 and a
shared row it can differ from the unpatched model's by that rounding.

Where the fused call does not apply, the model's own code runs: inputs_embeds
given instead of input_ids, tables or ids not on the CPU (tokpos has CPU
kernels only), tables of another dtype than float32, bfloat16 or float16 or
of two dtypes, an embedding with max_norm or scale_grad_by_freq, or a
wte/wpe that is no longer an nn.Embedding.

The fused forward applies where the installed GPT2Model.forward has the
source it mirrors (its fingerprint is recorded in _sources.RECORDED),
whatever the transformers version. Where it differs, wte and wpe become
tokpos.torch.Embedding modules instead (exact, unfused; _fallback) and a
warning names the version; where they are not nn.Embedding modules either,
patch raises RuntimeError and the model is left untouched.
"""

from __future__ import annotations

import functools
from types import MethodType

import torch
from torch import nn

from .. import _torch_ops
from . import _fallback, _sources

FAMILY = "GPT-2"
FORWARD = _sources.MIRRORED[FAMILY][0]
WHERE = "tokpos.hf GPT-2 embedding"


def _fusable(embedding, ids) -> bool:
    """Whether compose computes exactly what embedding(ids) does here."""
    weight = embedding.weight
    return (
        type(embedding) is nn.Embedding
        and embedding.max_norm is None
        and not embedding.scale_grad_by_freq
        and weight.dtype in _torch_ops._TABLE_CODES
        and weight.is_cpu
        and ids.is_cpu
        and ids.dtype in _torch_ops._INDEX_CODES
    )


class _SharedPositions(torch.autograd.Function):
    """compose with one row of positions (T,) shared by every b, whose
    backward gives the position table what GPT2Model's broadcast add gives
    it: torch's sum of d_out over B first (its reduction, in its order),
    then each position row's sum over t. The token table's gradient is
    compose's (each row in increasing (b, t) order, as torch's)."""

    @staticmethod
    def forward(ctx, ids, token_table, pos_table, positions, padding_idx):
        B, T = ids.shape
        ctx.save_for_backward(ids, positions)
        ctx.rows = (token_table.shape[0], pos_table.shape[0])
        ctx.dtypes = (token_table.dtype, pos_table.dtype)
        ctx.padding_idx = padding_idx
        return _torch_ops.compose_kernel(ids, token_table, pos_table, positions.expand(B, T).contiguous(), 0, WHERE)

    @staticmethod
    def backward(ctx, d_out):
        ids, positions = ctx.saved_tensors
        (V, L), (tok_dtype, pos_dtype) = ctx.rows, ctx.dtypes
        d_tok = d_pos = None
        if ctx.needs_input_grad[1]:
            d_tok = _torch_ops._compose_backward_op(d_out, ids, None, 0, V, 0, ctx.padding_idx)[0].to(tok_dtype)
        if ctx.needs_input_grad[2]:
            per_t = d_out.sum(0)
            d_pos = _torch_ops._compose_backward_op(per_t, positions, None, 0, L, 0, -1)[0].to(pos_dtype)
        return None, d_tok, d_pos, None, None


def embed(model, input_ids, position_ids, start=0):
    """wte(input_ids) + wpe(positions) of a GPT2Model, (B, T, D): one compose
    call where it computes the same bits, else the model's own two lookups
    and add. input_ids (B, T); position_ids (B, T), (1, T) or (T,), or None
    for the positions start + t (the model's own when none are given: no
    position tensor is then read)."""
    wte, wpe = model.wte, model.wpe
    B, T = input_ids.shape
    fused = (
        _fusable(wte, input_ids)
        and type(wpe) is nn.Embedding
        and wpe.max_norm is None
        and not wpe.scale_grad_by_freq
        and wpe.padding_idx is None
        and not wpe.sparse
        and wte.weight.dtype == wpe.weight.dtype
        and wpe.weight.is_cpu
    )
    if fused and position_ids is not None:
        fused = (
            position_ids.is_cpu
            and position_ids.dtype in _torch_ops._INDEX_CODES
            and position_ids.dim() in (1, 2)
            and position_ids.shape[-1] == T
            and (position_ids.dim() == 1 or position_ids.shape[0] in (1, B))
        )
    if not fused:
        if position_ids is None:
            position_ids = (torch.arange(T, device=wpe.weight.device) + start).unsqueeze(0)
        return wte(input_ids) + wpe(position_ids).to(wte.weight.device)
    ids = input_ids.contiguous()
    padding_idx = -1 if wte.padding_idx is None else wte.padding_idx
    shared = position_ids is None or position_ids.dim() == 1 or position_ids.shape[0] == 1
    if (
        shared
        and B > 1
        and wpe.weight.requires_grad
        and torch.is_grad_enabled()
        and not wte.sparse
        and not torch.compiler.is_compiling()
    ):
        # torch sums a broadcast row's gradient over B in its own order,
        # which for larger B is not compose's (b, t) order: keep torch's.
        if position_ids is None:
            position_ids = torch.arange(start, start + T)
        return _SharedPositions.apply(ids, wte.weight, wpe.weight, position_ids.reshape(T), padding_idx)
    if position_ids is not None:
        # The kernel reads one position per (b, t): a broadcast row is
        # expanded (B * T int64 values, the only copy).
        position_ids = position_ids.reshape(-1, T).expand(B, T).contiguous()
    return _torch_ops.compose(ids, wte.weight, wpe.weight, position_ids, start, padding_idx, wte.sparse, WHERE)


@functools.cache
def _fused_forward():
    """GPT2Model.forward as recorded (_sources.RECORDED), with the embedding stage
    (wte lookup, wpe lookup, add) replaced by embed(); everything else is
    transformers' own code, under the same decorators."""
    from transformers.models.gpt2 import modeling_gpt2 as g
    from transformers.utils.deprecation import deprecate_kwarg
    from transformers.utils.generic import merge_with_config_defaults
    from transformers.utils.output_capturing import capture_outputs

    @merge_with_config_defaults
    @capture_outputs
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids=None,
        cache=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        use_cache=None,
        **kwargs,
    ):
        kwargs.pop("output_attentions", None)
        kwargs.pop("output_hidden_states", None)

        if input_ids is not None and inputs_embeds is not None:
            raise ValueError("You cannot specify both input_ids and inputs_embeds at the same time")
        elif input_ids is not None:
            self.warn_if_padding_and_no_attention_mask(input_ids, attention_mask)
            input_shape = input_ids.size()
            input_ids = input_ids.view(-1, input_shape[-1])
            batch_size = input_ids.shape[0]
        elif inputs_embeds is not None:
            input_shape = inputs_embeds.size()[:-1]
            batch_size = inputs_embeds.shape[0]
        else:
            raise ValueError("You have to specify either input_ids or inputs_embeds")

        if token_type_ids is not None:
            token_type_ids = token_type_ids.view(-1, input_shape[-1])

        if use_cache:
            if cache is None:
                cache = g.DynamicCache(config=self.config)

            if self.config.add_cross_attention and not isinstance(cache, g.EncoderDecoderCache):
                cache = g.EncoderDecoderCache(cache, g.DynamicCache(config=self.config))

        device = self.wte.weight.device if inputs_embeds is None else inputs_embeds.device
        given_positions = position_ids is not None
        past_seen_tokens = 0
        if position_ids is None:
            past_seen_tokens = cache.get_seq_length() if cache is not None else 0
            position_ids = torch.arange(input_shape[-1], device=device) + past_seen_tokens
            position_ids = position_ids.unsqueeze(0)

        # The one change: the two lookups and their sum as one call (the
        # positions computed above are past_seen_tokens + t, given as such).
        if inputs_embeds is None:
            hidden_states = embed(self, input_ids, position_ids if given_positions else None, past_seen_tokens)
            inputs_embeds = hidden_states  # create_causal_mask reads its shape, dtype and device
        else:
            position_embeds = self.wpe(position_ids)
            hidden_states = inputs_embeds + position_embeds.to(inputs_embeds.device)

        if attention_mask is not None and attention_mask.ndim < 4:
            attention_mask = attention_mask.view(batch_size, -1)

        causal_mask = g.create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            cache=cache,
            position_ids=position_ids,
        )

        if encoder_hidden_states is not None:
            encoder_attention_mask = g.create_bidirectional_mask(
                config=self.config,
                inputs_embeds=inputs_embeds,
                attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )

        if token_type_ids is not None:
            token_type_embeds = self.wte(token_type_ids)
            hidden_states = hidden_states + token_type_embeds

        hidden_states = self.drop(hidden_states)

        output_shape = (-1,) + input_shape[1:] + (hidden_states.size(-1),)

        for i, block in enumerate(self.h):
            hidden_states = block(
                hidden_states,
                cache if not (self.gradient_checkpointing and self.training) else None,
                causal_mask,
                encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                use_cache=use_cache,
                position_ids=position_ids,
                **kwargs,
            )

        hidden_states = self.ln_f(hidden_states)

        hidden_states = hidden_states.view(output_shape)

        cache = cache if use_cache else None
        return g.BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            cache=cache,
        )

    forward.tokpos_fused = True
    return forward


def plan(model) -> _fallback.Plan | None:
    """What patch does to model (nothing changed yet), or None when model
    holds no GPT2Model; RuntimeError when neither the fused forward nor the
    fallback applies."""
    from transformers.models.gpt2.modeling_gpt2 import GPT2Model

    found = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, GPT2Model) and type(m).forward is GPT2Model.forward
    ]
    if not found:
        return None
    result = _fallback.Plan(FAMILY)
    for name, _ in found:
        prefix = f"{name}." if name else ""
        result.names += [f"{prefix}wte", f"{prefix}wpe"]
    patched = [getattr(getattr(m.forward, "__func__", None), "tokpos_fused", False) for _, m in found]
    if all(patched) or _sources.matches(FAMILY, FORWARD):
        def fuse():
            forward = _fused_forward()
            for _, m in found:
                if getattr(m.forward, "__func__", None) is not forward:
                    m.forward = MethodType(forward, m)

        result.steps.append(fuse)
        return result
    why = _fallback.changed_sources(FAMILY, [FORWARD])
    for name, m in found:
        result.replace_tables(m, ("wte", "wpe"), f"{name}." if name else "", why)
    result.unfused.append(("the token and position lookups and their sum", why))
    return result


def patch(model) -> list[str] | None:
    """Patch every GPT2Model in model (itself included); the names of the
    replaced modules (each GPT2Model's wte and wpe), or None when model
    holds no GPT2Model. A GPT2Model already patched keeps its patch and is
    named again; a subclass with its own forward is not touched. The fused
    forward where GPT2Model.forward's source is the recorded one, else
    tokpos.torch.Embedding modules and a warning (plan)."""
    result = plan(model)
    return None if result is None else result.apply()
