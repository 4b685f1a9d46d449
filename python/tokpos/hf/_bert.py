"""tokpos.hf for the BERT/RoBERTa family: BertEmbeddings' and
RobertaEmbeddings' word + token type + position sum as ONE tokpos call
(tokpos::compose_typed), then the model's own LayerNorm and dropout.

Every BertEmbeddings and RobertaEmbeddings inside the model is patched
(BertModel, RobertaModel and their heads; a sentence-transformers MiniLM is
a BertModel). Each gets a forward that mirrors transformers' own, with the
three lookups and two additions replaced by one call that adds the rows in
the model's order, (word + token_type) + position, each addition in
float32: the sum before LayerNorm, and so the hidden states, are bitwise
equal to the unpatched model's. The LayerNorm stays the model's
nn.LayerNorm (tokpos's fused LayerNorm takes its statistics in double, which
is not bitwise torch's). RoBERTa's padding-aware position ids, (cumsum(ids
!= pad) + cache_length) * (ids != pad) + pad, come from
tokpos.roberta_position_ids. The three nn.Embedding modules and their
Parameters stay where they are: parameter count, state_dict keys,
save_pretrained and resize_token_embeddings are unchanged. The gradients of
the three tables are each summed per row in increasing (b, t) order, as
torch's embedding backward sums them, and BERT's shared (1, T) position
row's is summed over B by torch first, as its broadcast add's backward
does: bitwise equal for rows with at most 64 sources. A row with more (the
token type table's row 0 once a batch has more than 64 tokens of type 0,
a frequent word) is summed by tokpos in blocks of 64, by torch one at a
time, and the two differ by rounding only (tests: within 4 eps of the sum
of the absolute terms). padding_idx rows (the word table's, RoBERTa's
position table's) get no gradient, as nn.Embedding's.

Where the fused call does not apply, the model's own code runs:
inputs_embeds given instead of input_ids, tables or ids not on the CPU,
tables other than float32 (the fused kernel's only dtype), an embedding
with max_norm, scale_grad_by_freq or sparse gradients, or an embedding
that is no longer an nn.Embedding.

The fused forwards apply where the installed BertEmbeddings.forward,
RobertaEmbeddings.forward and RobertaEmbeddings'
create_position_ids_from_input_ids (which tokpos.roberta_position_ids
stands in for) have the sources they mirror (their fingerprints recorded
in _sources.RECORDED), whatever the transformers version. Where one
differs, the three embeddings of each such module become
tokpos.torch.Embedding modules instead (exact, unfused; _fallback) and a
warning names the version; where they are not nn.Embedding modules either,
patch raises RuntimeError and the model is left untouched.
"""

from __future__ import annotations

from types import MethodType

import torch
from torch import nn

from .. import _torch_ops, _torch_typed
from ..positions import roberta_position_ids
from . import _fallback, _sources

FAMILY = "BERT/RoBERTa"
WHERE = "tokpos.hf BERT embedding"
TABLES = ("word_embeddings", "token_type_embeddings", "position_embeddings")


def _fusable(embedding, *indices) -> bool:
    return (
        type(embedding) is nn.Embedding
        and embedding.max_norm is None
        and not embedding.scale_grad_by_freq
        and not embedding.sparse
        and embedding.weight.dtype == torch.float32
        and embedding.weight.device.type == "cpu"
        and all(i.device.type == "cpu" and i.dtype in _torch_ops._INDEX_CODES for i in indices)
    )


def _broadcast(index, B: int, T: int, shared_row: bool = False):
    """index as the contiguous (B, T) tensor the kernel reads (or, with
    shared_row, a (1, T) row as it is), or None when it is not (B, T) or a
    (1, T) row broadcast over B."""
    if index.dim() != 2 or index.shape[1] != T or index.shape[0] not in (1, B):
        return None
    if shared_row and index.shape[0] == 1:
        return index.contiguous()
    return index.expand(B, T).contiguous()


def embed_sum(self, input_ids, token_type_ids, position_ids, inputs_embeds):
    """(word(input_ids) + token_type(token_type_ids)) + position(position_ids)
    of a Bert/RobertaEmbeddings, (B, T, D): one tokpos call where it computes
    the same bits, else the model's own lookups and additions."""
    word, types, positions = (getattr(self, n) for n in TABLES)
    if inputs_embeds is None and input_ids.dim() == 2:
        B, T = input_ids.shape
        type_ids = _broadcast(token_type_ids, B, T)
        # a (1, T) position row stays one row: its gradient is summed over B
        # as the model's broadcast add sums it
        pos_ids = _broadcast(position_ids, B, T, shared_row=True)
        if (
            type_ids is not None
            and pos_ids is not None
            and _fusable(word, input_ids)
            and _fusable(types, type_ids)
            and _fusable(positions, pos_ids)
            and types.padding_idx is None
        ):
            return _torch_typed.compose_typed(
                input_ids.contiguous(),
                word.weight,
                type_ids,
                types.weight,
                positions.weight,
                pos_ids,
                -1 if word.padding_idx is None else word.padding_idx,
                -1 if positions.padding_idx is None else positions.padding_idx,
                WHERE,
            )
    if inputs_embeds is None:
        inputs_embeds = word(input_ids)
    embeddings = inputs_embeds + types(token_type_ids)
    return embeddings + positions(position_ids)


def _default_token_types(self, position_ids, batch_size, seq_length, input_shape):
    """The model's token type ids when none are given: its zero buffer,
    gathered at the positions (transformers' code, both classes)."""
    if hasattr(self, "token_type_ids"):
        buffered = self.token_type_ids.to(position_ids.device).expand(position_ids.shape[0], -1)
        buffered = torch.gather(buffered, dim=1, index=position_ids)
        return buffered.expand(batch_size, seq_length)
    return torch.zeros(input_shape, dtype=torch.long, device=self.position_ids.device)


def bert_forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, cache_length=0):
    """BertEmbeddings.forward as recorded (_sources.RECORDED), the sum by embed_sum."""
    if input_ids is not None:
        input_shape = input_ids.size()
    else:
        input_shape = inputs_embeds.size()[:-1]

    batch_size, seq_length = input_shape

    if position_ids is None:
        position_ids = self.position_ids[:, cache_length : seq_length + cache_length]

    if token_type_ids is None:
        token_type_ids = _default_token_types(self, position_ids, batch_size, seq_length, input_shape)

    embeddings = embed_sum(self, input_ids, token_type_ids, position_ids, inputs_embeds)
    embeddings = self.LayerNorm(embeddings)
    embeddings = self.dropout(embeddings)
    return embeddings


def roberta_forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, cache_length=0):
    """RobertaEmbeddings.forward as recorded (_sources.RECORDED), the padding-aware
    position ids by tokpos.roberta_position_ids (CPU ids), the sum by embed_sum."""
    if position_ids is None:
        if input_ids is not None and input_ids.device.type == "cpu":
            position_ids = roberta_position_ids(input_ids, self.padding_idx, cache_length)
        elif input_ids is not None:
            position_ids = self.create_position_ids_from_input_ids(input_ids, self.padding_idx, cache_length)
        else:
            position_ids = self.create_position_ids_from_inputs_embeds(inputs_embeds, self.padding_idx)

    if input_ids is not None:
        input_shape = input_ids.size()
    else:
        input_shape = inputs_embeds.size()[:-1]

    batch_size, seq_length = input_shape

    if token_type_ids is None:
        token_type_ids = _default_token_types(self, position_ids, batch_size, seq_length, input_shape)

    embeddings = embed_sum(self, input_ids, token_type_ids, position_ids, inputs_embeds)
    embeddings = self.LayerNorm(embeddings)
    embeddings = self.dropout(embeddings)
    return embeddings


def plan(model) -> _fallback.Plan | None:
    """What patch does to model (nothing changed yet), or None when model
    holds no BertEmbeddings or RobertaEmbeddings; RuntimeError when neither
    the fused forwards nor the fallback apply."""
    from transformers.models.bert.modeling_bert import BertEmbeddings
    from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

    bert_path, roberta_path, roberta_positions = _sources.MIRRORED[FAMILY]
    forwards = {BertEmbeddings.forward: bert_forward, RobertaEmbeddings.forward: roberta_forward}
    mirrors = {BertEmbeddings.forward: [bert_path], RobertaEmbeddings.forward: [roberta_path, roberta_positions]}
    found = [(name, m) for name, m in model.named_modules() if type(m).forward in forwards]
    if not found:
        return None
    result = _fallback.Plan(FAMILY)
    fused, unfused = [], {}
    for name, m in found:
        prefix = f"{name}." if name else ""
        result.names += [prefix + t for t in TABLES]
        forward = forwards[type(m).forward]
        changed = _sources.differing(FAMILY, mirrors[type(m).forward])
        if getattr(m.forward, "__func__", None) is forward or not changed:
            fused.append((m, forward))
            continue
        why = _fallback.changed_sources(FAMILY, changed)
        result.replace_tables(m, TABLES, prefix, why)
        unfused.setdefault(why, type(m).__name__)
    for why, cls in unfused.items():
        result.unfused.append((f"{cls}'s word + token type + position sum", why))

    def fuse():
        for m, forward in fused:
            if getattr(m.forward, "__func__", None) is not forward:
                m.forward = MethodType(forward, m)

    result.steps.insert(0, fuse)
    return result


def patch(model) -> list[str] | None:
    """Patch every BertEmbeddings and RobertaEmbeddings in model (itself
    included); the names of the replaced modules (each one's word, token
    type and position embeddings), or None when model holds neither. One
    already patched keeps its patch and is named again; a subclass with its
    own forward is not touched. The fused forward where the mirrored sources
    are the recorded ones, else tokpos.torch.Embedding modules and a warning
    (plan)."""
    result = plan(model)
    return None if result is None else result.apply()
