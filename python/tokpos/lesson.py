"""tokpos.lesson: the PyTorch lesson's claim as an experiment.

    train(...)      trains one small byte-level decoder twice, once with a
                    learned position table and once with the sinusoidal one,
                    from the same seed and the same batches, and records the
                    learned table every `every` steps (a TrainingRun)
    TEXTS           the texts that ship with the package (tokpos/data)

The model: ids (B, T) -> tokpos.torch.EmbeddingComposer (TokenEmbedding +
LearnedPositionalEmbedding or SinusoidalPositionalEmbedding) -> `layers`
pre-norm torch.nn.TransformerEncoderLayer blocks under a causal mask
(attention and MLP from plain torch.nn, no dropout) -> LayerNorm -> a Linear
head over the V = 260 byte ids (id = byte + 4, the tokenizer of tokpos
demo). Every parameter except the position table starts the same in both
models (torch.manual_seed(seed) before each is built; the token table from
tokpos's Philox generator at `seed`), and both see the same batches, drawn
once from a torch.Generator seeded with `seed`.

Reproducible bit for bit at a given seed and thread count: the run sets
torch.set_num_threads and tokpos.set_num_threads to `threads`, turns on
torch.use_deterministic_algorithms and restores all three when it ends.

The learned table (L, D) is recorded at step 0 (before any update) and
every `every` steps, and at the last step; the recorded steps are
TrainingRun.steps. At each of them: the training loss (the mean of the
batch losses of the steps since the previous record, each computed before
its update; at step 0 the loss of the first batch) and the held-out loss
(the mean over the held-out windows) of both models. The held-out text is
the last tenth of the text's bytes; the model trains on the rest.

Past L, on the final models: the learned table refuses a position >= L
(tokpos.torch raises IndexError naming it; that message is recorded), the
sinusoidal one extends (a 2L-row table from the same formula, whose first L
rows are the trained model's), and its held-out loss at positions L .. 2L-1
is measured beside the loss at 0 .. L-1 of the same 2L-long windows.

The diagnostics of each snapshot (TrainingRun.diagnostics) are the
tokpos.diagnostics functions: the adjacent cosine, the cosine by offset at
OFFSETS and the relative-position fit at FIT_OFFSETS.

The run file (TrainingRun.save, train(out=...)) is one safetensors file:
metadata "tokpos.run" = "1", "steps", "config" and "beyond" (JSON text),
tensors positions.step_<N> (L, D) for each recorded step,
positions.sinusoidal (L, D) and loss.{train,heldout}.{learned,sinusoidal}
(S,), all float32 (docs/lessons.md describes it; tokpos plot and tokpos
serve --weights read it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from importlib import resources
from typing import Callable

import numpy as np

from . import _core
from . import diagnostics as _diag
from ._arrays import count as _count

__all__ = [
    "DEFAULTS", "FIT_OFFSETS", "OFFSETS", "SCHEMES", "TEXTS", "TrainingRun", "check_output", "check_settings",
    "diagnostics_of", "load_text", "summary", "train",
]

TEXTS = ("positions",)  # tokpos/data/<name>.txt
SCHEMES = ("both", "learned", "sinusoidal")
SCHEME_NAMES = {
    "en": {"learned": "learned", "sinusoidal": "sinusoidal"},
    "zh": {"learned": "可学习", "sinusoidal": "正弦"},
}
OFFSETS = (1, 2, 4, 8, 16, 32, 64)  # the cosine by offset recorded per snapshot (those < L)
FIT_OFFSETS = (1, 8)  # the relative-position fit recorded per snapshot (those < L)
BYTE_OFFSET = 4  # id = byte + 4, the byte tokenizer of tokpos demo
VOCAB = 256 + BYTE_OFFSET
HELDOUT_FRACTION = 0.1

# The defaults: both schemes in about 65 s of CPU time on one core (130 s and 245 s of wall time
# measured on a 2-core machine busy with other builds). One thread by default: two threads on a
# machine whose cores are busy spend most of their time waiting for each other.
DEFAULTS = dict(
    steps=600, every=25, seed=0, threads=1, layers=2, heads=4, dim=64, context=128, batch=16, lr=3e-3,
    text="positions",
)
MAX_STEPS = 1_000_000


def load_text(name: str) -> str:
    """The packaged text `name` (one of TEXTS), without its header comment
    lines (those starting with '#')."""
    if name not in TEXTS:
        raise ValueError(f"text {name!r} is not one of the packaged texts: {', '.join(TEXTS)}")
    raw = resources.files("tokpos").joinpath("data", f"{name}.txt").read_text(encoding="utf-8")
    return "".join(line for line in raw.splitlines(keepends=True) if not line.startswith("#")).lstrip("\n")


@dataclasses.dataclass
class TrainingRun:
    """What train() measured. steps: the recorded steps (S). tables: the
    learned (L, D) float32 table at each. sinusoidal: the fixed (L, D)
    table. loss: {"train"|"heldout": {"learned"|"sinusoidal": (S,) float32}}.
    diagnostics: one dict per step (see diagnostics_of). beyond: what
    happens past L. config: the settings. wall_s: the run's wall time."""

    steps: list
    tables: list
    sinusoidal: np.ndarray
    loss: dict
    diagnostics: list
    sinusoidal_diagnostics: dict
    beyond: dict
    config: dict
    wall_s: float

    def metadata(self) -> dict:
        """The run file's metadata (every value a string, as safetensors requires)."""
        return {
            "tokpos.run": "1",
            "steps": json.dumps(self.steps),
            "config": json.dumps(self.config),
            "beyond": json.dumps(self.beyond),
        }

    def tensors(self) -> list:
        """The run file's tensors, (name, float32 C-contiguous array), in file
        order; a run of one scheme has no run file (ValueError)."""
        trained = sorted(self.loss["train"])
        if trained != ["learned", "sinusoidal"]:
            raise ValueError(f"this run trained {', '.join(trained)} only; the run file needs both schemes")
        out = [(f"positions.step_{s}", np.ascontiguousarray(t, dtype=np.float32))
               for s, t in zip(self.steps, self.tables)]
        out.append(("positions.sinusoidal", np.ascontiguousarray(self.sinusoidal, dtype=np.float32)))
        for split in ("train", "heldout"):
            for scheme in ("learned", "sinusoidal"):
                out.append((f"loss.{split}.{scheme}", np.ascontiguousarray(self.loss[split][scheme], dtype=np.float32)))
        return out

    def save(self, path) -> None:
        """Writes the run file to path, atomically (tokpos's safetensors writer)."""
        _core.write_safetensors(os.fsdecode(path), self.tensors(), self.metadata())

    def to_json(self) -> dict:
        """Everything, as plain JSON values (the tables themselves left out:
        they are in the run file)."""
        return {
            "config": self.config,
            "steps": self.steps,
            "loss": {split: {k: [float(x) for x in v] for k, v in d.items()} for split, d in self.loss.items()},
            "diagnostics": self.diagnostics,
            "sinusoidal_diagnostics": self.sinusoidal_diagnostics,
            "beyond": self.beyond,
            "wall_s": self.wall_s,
        }


def diagnostics_of(table) -> dict:
    """The lesson's diagnostics of one (L, D) table: adjacent cosine (mean,
    std, min, max, over the L - 1 pairs; None for L = 1), cosine_by_offset
    {k: mean cos} for k in OFFSETS below L, relative_fit {k: {relative,
    max_residual}} for k in FIT_OFFSETS below L."""
    L = np.asarray(table).shape[0]
    adj = _diag.adjacent_cosine(table)
    out = {"adjacent_cosine": None}
    if adj.size:
        out["adjacent_cosine"] = {
            "mean": float(adj.mean()), "std": float(adj.std()), "min": float(adj.min()), "max": float(adj.max()),
        }
    ks = [k for k in OFFSETS if k < L]
    by = _diag.cosine_by_offset(table, ks)
    out["cosine_by_offset"] = {str(k): float(v) for k, v in zip(ks, by)}
    out["relative_fit"] = {}
    for k in FIT_OFFSETS:
        if k < L:
            fit = _diag.relative_position_fit(table, k)
            out["relative_fit"][str(k)] = {"relative": float(fit.relative), "max_residual": float(fit.max_residual)}
    return out


def check_settings(*, steps, every, seed, threads, layers, heads, dim, context, batch, lr) -> dict:
    """train()'s settings, each checked (ValueError naming the value and its
    limit), as a dict."""
    steps = _count("steps", steps, 1, MAX_STEPS)
    every = _count("every", every, 1, MAX_STEPS)
    if every > steps:
        raise ValueError(f"every = {every} is larger than steps = {steps}; it must be in [1, steps]")
    seed = _count("seed", seed, 0, (1 << 63) - 1)
    threads = _count("threads", threads, 1, 1024)
    layers = _count("layers", layers, 1, 64)
    heads = _count("heads", heads, 1, 1024)
    dim = _count("dim", dim, 2, 4096)
    if dim % heads != 0:
        raise ValueError(f"dim = {dim} is not a multiple of heads = {heads}")
    if dim % 2 != 0:
        raise ValueError(f"dim = {dim} is odd; the sinusoidal table pairs its columns, so it must be even")
    context = _count("context", context, 2, 65536)
    batch = _count("batch", batch, 1, 65536)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or not 0 < lr <= 1:
        raise ValueError(f"lr = {lr!r} is outside (0, 1]")
    return dict(steps=steps, every=every, seed=seed, threads=threads, layers=layers, heads=heads, dim=dim,
                context=context, batch=batch, lr=float(lr))


def check_output(scheme: str, out):
    """scheme ("both", "learned" or "sinusoidal") and out (None or a path
    whose folder exists; it needs scheme "both"), checked before anything is
    trained: ValueError naming the value. Returns out as a str (or None)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme = {scheme!r} is not one of {', '.join(SCHEMES)}")
    if out is None:
        return None
    out = os.fspath(out)
    if scheme != "both":
        raise ValueError(f"scheme = {scheme!r} trains one model, but the run file ({out}) holds both schemes' "
                         "losses; use scheme 'both' to write it")
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise ValueError(f"out = {out}: the folder {folder} does not exist")
    return out


def _progress_bar(stream, lang: str) -> Callable[[str, int, int], None]:
    """A plain-text progress bar on stream: one line rewritten with '\\r'."""
    t0 = time.perf_counter()
    last = [-1.0]

    def show(label: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if done != total and now - last[0] < 0.2:  # at most five updates a second
            return
        last[0] = now
        width = 30
        filled = width * done // total
        elapsed = now - t0
        name = SCHEME_NAMES[lang][label]
        name += " " * (10 - len(name) - sum(1 for c in name if ord(c) > 0x2E7F))  # CJK: two columns each
        stream.write(f"\r{name} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {elapsed:5.1f} s")
        if done == total:
            stream.write("\n")
        stream.flush()

    return show


def train(
    *,
    steps: int = DEFAULTS["steps"],
    every: int = DEFAULTS["every"],
    seed: int = DEFAULTS["seed"],
    threads: int = DEFAULTS["threads"],
    layers: int = DEFAULTS["layers"],
    heads: int = DEFAULTS["heads"],
    dim: int = DEFAULTS["dim"],
    context: int = DEFAULTS["context"],
    batch: int = DEFAULTS["batch"],
    lr: float = DEFAULTS["lr"],
    text: str = DEFAULTS["text"],
    scheme: str = "both",
    out=None,
    progress=None,
    lang: str = "en",
) -> TrainingRun:
    """Trains the learned-position and the sinusoidal model (see the module's
    docstring) and returns a TrainingRun; with out, also writes the run file
    there. scheme: "both", "learned" or "sinusoidal" (the models trained;
    out needs "both"). progress: None (quiet), True (a
    bar on stderr) or a stream; lang ("en" or "zh") its labels.

    steps >= 1 optimizer steps (AdamW, lr, no weight decay, gradients clipped
    to norm 1), every in [1, steps], dim a multiple of heads and even,
    context L >= 2. text: a name from TEXTS, or the text itself when it is
    not one (at least 10 (2L + 1) bytes: the held-out tenth must hold a
    2L + 1-byte window). Bad values raise ValueError naming them."""
    cfg = check_settings(steps=steps, every=every, seed=seed, threads=threads, layers=layers, heads=heads, dim=dim,
                         context=context, batch=batch, lr=lr)
    out = check_output(scheme, out)
    schemes = ("learned", "sinusoidal") if scheme == "both" else (scheme,)
    if lang not in ("en", "zh"):
        raise ValueError(f"lang = {lang!r} is not 'en' or 'zh'")
    if not isinstance(text, str):
        raise TypeError(
            f"text must be a str (a name from {', '.join(TEXTS)} or the text itself), not {type(text).__name__}"
        )
    name = text if text in TEXTS else "(given)"
    body = load_text(text) if text in TEXTS else text
    data = np.frombuffer(body.encode("utf-8"), dtype=np.uint8).astype(np.int64) + BYTE_OFFSET
    L = cfg["context"]
    n_held = int(len(data) * HELDOUT_FRACTION)
    if n_held < 2 * L + 1:
        raise ValueError(
            f"the text has {len(data)} bytes; context L = {L} needs a held-out tenth of at least 2L + 1 = {2 * L + 1} "
            f"bytes, so a text of at least 10 (2L + 1) = {10 * (2 * L + 1)} bytes"
        )
    cfg["vocab"] = VOCAB
    cfg["text"] = name
    cfg["text_bytes"] = int(len(data))
    cfg["heldout_bytes"] = int(n_held)
    bar = None
    if progress is True:
        bar = _progress_bar(sys.stderr, lang)
    elif progress:
        bar = _progress_bar(progress, lang)

    import torch

    from . import get_num_threads, set_num_threads

    saved = (torch.get_num_threads(), get_num_threads(), torch.are_deterministic_algorithms_enabled())
    torch.set_num_threads(cfg["threads"])
    set_num_threads(cfg["threads"])
    torch.use_deterministic_algorithms(True)
    t0 = time.perf_counter()
    try:
        run = _train(cfg, schemes, torch.from_numpy(data), n_held, bar)
    finally:
        torch.set_num_threads(saved[0])
        set_num_threads(saved[1])
        torch.use_deterministic_algorithms(saved[2])
    run.wall_s = time.perf_counter() - t0
    if out is not None:
        run.save(out)
    return run


def _model(cfg: dict, scheme: str):
    """The decoder with `scheme` positions ("learned" or "sinusoidal"), its
    weights drawn from cfg["seed"]."""
    import torch
    from torch import nn

    from .torch import EmbeddingComposer, LearnedPositionalEmbedding, SinusoidalPositionalEmbedding, TokenEmbedding

    class Decoder(nn.Module):
        """ids (B, T) -> logits (B, T, V), causal."""

        def __init__(self) -> None:
            super().__init__()
            V, D, L, seed = cfg["vocab"], cfg["dim"], cfg["context"], cfg["seed"]
            if scheme == "learned":
                position = LearnedPositionalEmbedding(L, D, seed=seed)
            else:
                position = SinusoidalPositionalEmbedding(L, D)
            self.embed = EmbeddingComposer(TokenEmbedding(V, D, seed=seed), position)
            block = nn.TransformerEncoderLayer(
                D, cfg["heads"], dim_feedforward=4 * D, dropout=0.0, activation="gelu", batch_first=True,
                norm_first=True,
            )
            self.blocks = nn.TransformerEncoder(block, cfg["layers"], enable_nested_tensor=False)
            self.norm = nn.LayerNorm(D)
            self.head = nn.Linear(D, V)

        def forward(self, ids, embed=None):
            x = (embed or self.embed)(ids)
            T = ids.shape[1]
            mask = nn.Transformer.generate_square_subsequent_mask(T)
            return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))

    torch.manual_seed(cfg["seed"])  # the blocks and the head: the same in both models
    return Decoder()


def _windows(ids, length: int):
    """Non-overlapping windows of length + 1 ids from ids: (N, length + 1)."""
    n = (len(ids) - 1) // length
    return ids[: n * length + 1].unfold(0, length + 1, length) if n else ids[:0].reshape(0, length + 1)


def _loss(model, windows, embed=None, positions=None) -> float:
    """Mean next-byte cross-entropy over windows (N, T + 1), at the
    positions slice of each window (all by default)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        logits = model(windows[:, :-1], embed)
        if positions is not None:
            logits, target = logits[:, positions], windows[:, 1:][:, positions]
        else:
            target = windows[:, 1:]
        return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)))


def _train(cfg: dict, schemes: tuple, data, n_held: int, bar) -> TrainingRun:
    import torch
    import torch.nn.functional as F

    from .torch import EmbeddingComposer, SinusoidalPositionalEmbedding

    L, B, S = cfg["context"], cfg["batch"], cfg["steps"]
    train_ids, held_ids = data[: len(data) - n_held], data[len(data) - n_held :]
    held = _windows(held_ids, L)
    # The batches of every step, drawn once: both models see the same data in the same order.
    g = torch.Generator().manual_seed(cfg["seed"])
    starts = torch.randint(0, len(train_ids) - L, (S, B), generator=g)
    offsets = torch.arange(L + 1)
    record = sorted(set(range(0, S + 1, cfg["every"])) | {S})

    models, train_loss, held_loss, tables = {}, {}, {}, []
    for scheme in schemes:
        model = _model(cfg, scheme)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
        train_loss[scheme], held_loss[scheme], pending = [], [], []

        def snapshot(step: int) -> None:
            model.eval()
            if step == 0:
                pending.append(_loss(model, train_ids[starts[0][:, None] + offsets]))
            train_loss[scheme].append(sum(pending) / len(pending))
            pending.clear()
            held_loss[scheme].append(_loss(model, held))
            if scheme == "learned":
                tables.append(model.embed.position.weight.detach().numpy().copy())
            model.train()

        snapshot(0)
        for step in range(1, S + 1):
            batch = train_ids[starts[step - 1][:, None] + offsets]  # (B, L + 1)
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            pending.append(float(loss.detach()))
            if step in record:
                snapshot(step)
            if bar is not None:
                bar(scheme, step, S)
        model.eval()
        models[scheme] = model

    # Past L, on the final models: held-out windows of 2L + 1 bytes.
    long_windows = _windows(held_ids, 2 * L)
    beyond = {}
    if "learned" in models:
        try:
            models["learned"](long_windows[:, :-1])
            beyond["learned"] = {"policy": "read", "message": "",
                                 "loss": _loss(models["learned"], long_windows, None, slice(L, 2 * L))}
        except IndexError as e:  # tokpos.torch's learned table: a position >= L is an error, naming it
            beyond["learned"] = {"policy": "error", "message": str(e), "loss": None}
        beyond["learned"]["windows"] = int(long_windows.shape[0])
    sinusoidal = SinusoidalPositionalEmbedding(L, cfg["dim"]).weight.numpy().copy()
    if "sinusoidal" in models:
        model = models["sinusoidal"]
        # The same formula for 2L rows: its first L rows are the table the model trained with.
        extended = EmbeddingComposer(model.embed.token, SinusoidalPositionalEmbedding(2 * L, cfg["dim"]))
        beyond["sinusoidal"] = {
            "policy": "extend",
            "loss": _loss(model, long_windows, extended, slice(L, 2 * L)),
            "loss_within": _loss(model, long_windows, extended, slice(0, L)),
            "windows": int(long_windows.shape[0]),
        }

    loss = {
        split: {scheme: np.asarray(d[scheme], dtype=np.float32) for scheme in schemes}
        for split, d in (("train", train_loss), ("heldout", held_loss))
    }
    diagnostics = [dict(step=s, **diagnostics_of(t)) for s, t in zip(record, tables)]
    cfg = dict(cfg, schemes=list(schemes))
    return TrainingRun(
        steps=record, tables=tables, sinusoidal=sinusoidal, loss=loss, diagnostics=diagnostics,
        sinusoidal_diagnostics=diagnostics_of(sinusoidal), beyond=beyond, config=cfg, wall_s=0.0,
    )


_SUMMARY = {
    "en": {
        "head": "tokpos train: a {layers}-layer byte-level decoder (D = {dim}, L = {context}, V = {vocab}, "
                "{heads} heads), {steps} steps of {batch} windows on the text \"{text}\" ({text_bytes} bytes, "
                "the last {heldout_bytes} held out), seed {seed}, {threads} thread(s): {wall:.1f} s\n",
        "cols": "  step   train loss {names}   held-out loss {names}"
                "   learned table: adjacent cos, cos k=8, fit(1)\n",
        "beyond": "past L = {L} (positions {L} .. {L2}, {windows} held-out windows of {L2p} bytes):\n",
        "refused": "  {name}: refused: {message}\n",
        "extends": "  {name}: extends: held-out loss {loss:.3f} at positions {L} .. {L2}, "
                   "{within:.3f} at 0 .. {Lm}\n",
        "wrote": "wrote {out}: {n} snapshots of the learned table\n",
    },
    "zh": {
        "head": "tokpos train：{layers} 层的字节级解码器（D = {dim}，L = {context}，V = {vocab}，{heads} 个头），"
                "在文本 \"{text}\"（{text_bytes} 字节，最后 {heldout_bytes} 字节留作验证）上训练 {steps} 步，"
                "每批 {batch} 个窗口，种子 {seed}，{threads} 个线程：{wall:.1f} 秒\n",
        "cols": "  步数   训练损失 {names}   验证损失 {names}   可学习位置表：相邻余弦、k=8 余弦、fit(1)\n",
        "beyond": "超出 L = {L}（位置 {L} .. {L2}，{windows} 个 {L2p} 字节的验证窗口）：\n",
        "refused": "  {name}：拒绝：{message}\n",
        "extends": "  {name}：外推：位置 {L} .. {L2} 的验证损失 {loss:.3f}，位置 0 .. {Lm} 的 {within:.3f}\n",
        "wrote": "已写入 {out}：可学习位置表的 {n} 个快照\n",
    },
}


def summary(run: TrainingRun, lang: str = "en", out=None) -> str:
    """The run as lines of text in lang ("en" or "zh"): the settings, the
    losses and the learned table's diagnostics at each recorded step, what
    happens past L, and the file written (out)."""
    t = _SUMMARY[lang]
    c = run.config
    schemes = c["schemes"]
    names = " / ".join(SCHEME_NAMES[lang][s] for s in schemes)
    lines = [t["head"].format(wall=run.wall_s, **c), t["cols"].format(names=f"({names})")]
    diag = {d["step"]: d for d in run.diagnostics}
    for i, step in enumerate(run.steps):
        tr = " / ".join(f"{run.loss['train'][s][i]:.3f}" for s in schemes)
        he = " / ".join(f"{run.loss['heldout'][s][i]:.3f}" for s in schemes)
        row = f"  {step:>5}   {tr:>15}   {he:>15}"
        d = diag.get(step)
        if d is not None and d["adjacent_cosine"] is not None:
            by8 = d["cosine_by_offset"].get("8")
            fit = d["relative_fit"].get("1")
            row += f"   {d['adjacent_cosine']['mean']:+.3f}"
            row += f" {by8:+.3f}" if by8 is not None else " -"
            row += f" {fit['relative']:.3f}" if fit is not None else " -"
        lines.append(row + "\n")
    L = c["context"]
    windows = run.beyond[schemes[0]]["windows"]
    lines.append(t["beyond"].format(L=L, L2=2 * L - 1, L2p=2 * L + 1, windows=windows))
    for s in schemes:
        b = run.beyond[s]
        name = SCHEME_NAMES[lang][s]
        if b["loss"] is None:
            lines.append(t["refused"].format(name=name, message=b["message"]))
        else:
            lines.append(t["extends"].format(name=name, loss=b["loss"], within=b.get("loss_within", float("nan")),
                                             L=L, L2=2 * L - 1, Lm=L - 1))
    if out is not None:
        lines.append(t["wrote"].format(out=os.fspath(out), n=len(run.steps)))
    return "".join(lines)
