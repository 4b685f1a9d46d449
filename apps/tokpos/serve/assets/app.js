// tokpos serve: the page's behaviour. Reads the controls, asks the server's
// JSON API (/api/embed, /api/similarity, /api/wavelengths) and draws the
// answers on canvases. Plain JavaScript, no dependencies.
//
// window.tokpos exposes the page's state for tests and the curious:
// renders (completed updates), pending (an update is in flight), errors,
// lastUpdateMs and updateTimes (input event to the end of drawing, in ms),
// lastPhasesMs (that time split into waiting for the answers and drawing).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);

  // ---- the words on the page, one catalogue per language ----------------------
  // Strict JSON between the two marker lines (tests/python/test_serve_page_catalogue.py
  // reads it): every key in both languages, the same {placeholders} in both.
  // Numbers are never written here: they come in through placeholders, so both
  // languages show the same digits.
  // catalogue: begin
  const MESSAGES = {
    "en": {
      "page.title": "tokpos: token ids to (B, T, D)",
      "page.sub": "token ids \u2192 token rows + position rows \u2192 (B, T, D)",
      "status.loading": "loading\u2026",
      "status.done": "T = {T}, D = {D}, L = {L} \u00b7 updated in {ms} ms",
      "controls.aria": "Settings",
      "text.label": "Text",
      "text.help": "Each UTF-8 byte is one token: id = byte + 4 (ids 0\u20133 are reserved).",
      "dim.label": "Width D",
      "dim.help": "Columns of every table; D/2 sin/cos pairs.",
      "context.label": "Context L",
      "context.help": "Rows of the position table; the learned table ends at L.",
      "trained.help": "Set by the trained table {file}: L = {L}, D = {D}.",
      "base.label": "Base",
      "base.help": "Log scale, 10 to 100000: the longest wavelength is about 2\u03c0 \u00d7 base.",
      "layout.label": "Column layout",
      "layout.interleaved": "interleaved (sin, cos, sin, cos, \u2026)",
      "layout.halves": "halves (all sin, then all cos)",
      "layout.t2t": "t2t (tensor2tensor)",
      "layout.help": "Where each sin/cos pair sits in a position row.",
      "positions.legend": "Positions",
      "positions.sinusoidal": "sinusoidal (fixed, no parameters)",
      "positions.learned": "learned (L \u00d7 D table, at initialisation)",
      "positions.trained": "trained ({file})",
      "seed.label": "Seed",
      "facts.aria": "Shapes and parameters",
      "facts.shape": "shape",
      "facts.token": "token table",
      "facts.position": "position table",
      "params.count": "{n} parameters",
      "ids.title": "Token ids",
      "chips.aria": "Token ids, one per byte",
      "chips.empty": "no tokens: type some text",
      "chip.title": "t = {t}: byte {byte} \u2192 id {id}",
      "group.title": "{char}: {n} bytes, t = {first} to {last}",
      "ids.note": "Notice: the same byte always gets the same id, wherever it appears; a character is one to four bytes, grouped under it.",
      "ids.repeat": "Point at a chip or a row, or click a chip to keep it: every token with that id lights up.",
      "lookup.title": "The lookup: token rows + position rows = sum",
      "fig.token": "token rows",
      "fig.position": "position rows",
      "fig.sum": "sum",
      "heat.token.aria": "Heatmap of the token rows",
      "heat.position.aria": "Heatmap of the position rows",
      "heat.sum.aria": "Heatmap of the sum",
      "heat.empty": "no rows",
      "row.token": "t = {t} ('{char}', id {id})",
      "row.position": "position {t}",
      "tip.value": "value = {v}",
      "tip.sum": "token {a} + position {b} = sum {c}",
      "legend.aria": "colour scale from {lo} (blue) through 0 (white) to {hi} (red)",
      "scale.legend": "Colour scale",
      "scale.panel": "one per panel",
      "scale.shared": "one shared by the three panels",
      "scale.sharedFaint": "One shared scale: the token rows look faint because their entries are small, drawn from N(0, \u03c3\u00b2) with \u03c3 \u2248 {std} in these rows (largest |value| {tok}), against position entries up to \u00b1{pos}, {ratio} times larger. Choose one scale per panel to see them.",
      "scale.sharedEven": "One shared scale: token entries (largest |value| {tok}) and position entries (largest |value| {pos}) are of a similar size here, so both show.",
      "scale.panelNote": "One scale per panel: each heatmap spans its own largest |value| (token rows {tok}, position rows {pos}, sum {sum}), so colours do not compare across panels.",
      "lookup.note": "Notice: a repeated character has identical token rows, but its position rows differ, so the sums differ.",
      "offset.title": "Cosine of position rows by offset",
      "offset.aria": "Mean cosine similarity of position rows p and p + k against the offset k",
      "offset.axis": "offset k",
      "offset.mean": "mean cos",
      "offset.note.sinusoidal": "Notice: sinusoidal rows decay smoothly with distance, and the curve depends only on the offset.",
      "offset.note.learned": "Notice: a fresh learned table sits near 0 at every offset but 0: its rows are random, nothing is learned yet.",
      "offset.note.trained": "Notice: a trained table starts high at small offsets and falls with distance, usually faster than the sinusoidal table and not smoothly: training found part of that structure, not a formula.",
      "adjacent.some": "adjacent rows (p, p + 1): mean cos {mean}, from {lo} to {hi} over {n} pairs",
      "adjacent.none": "adjacent rows: none (L = {L})",
      "matrix.title": "Similarity matrix",
      "matrix.aria": "Cosine similarity of every pair of position rows",
      "matrix.omitted": "The matrix is sent for L \u2264 {max} and L \u00d7 L \u00d7 D \u2264 {work} only (here L = {L}, D = {D}).",
      "matrix.note.sinusoidal": "Notice: the bright diagonal bands; nearby positions look alike, and the pattern only depends on the distance.",
      "matrix.note.learned": "Notice: only the diagonal is bright; a fresh learned table's rows are random, so two different positions are nearly orthogonal.",
      "matrix.note.trained": "Notice: a bright band along the diagonal, nearby positions look alike; unlike the sinusoidal matrix it is uneven, the same offset does not give the same cosine everywhere.",
      "bands.title": "Wavelength bands: D and D/2",
      "bands.caption": "One bar per sin/cos pair k: its wavelength in positions, log scale, coloured by decade.",
      "bands.d.aria": "Wavelength of each sin/cos pair at D, log scale",
      "bands.dlist.aria": "Pairs per decade of wavelength at D",
      "bands.half.aria": "Wavelength of each sin/cos pair at D/2, log scale",
      "bands.halflist.aria": "Pairs per decade of wavelength at D/2",
      "bands.pairs": "{n} pairs",
      "bands.pair": "{n} pair",
      "bands.note": "Notice: halving D halves the pairs, yet they still span 2\u03c0 to 2\u03c0 \u00d7 base, so each decade keeps about half as many.",
      "bands.modeNote": "These bands are the sinusoidal table's at this D, for comparison: the table chosen above has no wavelengths.",
      "run.title": "Training run: the learned position table, step by step",
      "run.file": "({file}, {S} snapshots)",
      "run.stepLabel": "Step",
      "run.stepHelp": "Each stop is one snapshot of the run. With the trained positions chosen, the panels below show this step too.",
      "run.tableCaption": "learned position table at this step",
      "run.table.aria": "Heatmap of the learned position table at the chosen step",
      "run.lossCaption": "loss against the step",
      "run.loss.aria": "Training and held-out loss of both position schemes against the step",
      "run.cosCaption": "mean adjacent cosine against the step",
      "run.cos.aria": "Mean cosine of adjacent rows of the learned table against the step",
      "run.legend.trainLearned": "train, learned",
      "run.legend.heldoutLearned": "held-out, learned",
      "run.legend.trainSinusoidal": "train, sinusoidal",
      "run.legend.heldoutSinusoidal": "held-out, sinusoidal",
      "run.legend.learnedCos": "learned table",
      "run.legend.sinusoidalCos": "sinusoidal table (fixed)",
      "run.adjacent": "step {step}: mean adjacent cosine {mean} (sinusoidal table {sin})",
      "run.loss": "step {step}: loss of the learned model: train {tl}, held-out {hl}; of the sinusoidal one: train {ts}, held-out {hs}",
      "run.axis": "step",
      "run.note": "Notice: the first snapshot is the table at initialisation, noise; move the slider to see what training makes of it: whether neighbouring rows grow alike, and how far.",
      "error.unreachable": "cannot reach the tokpos server ({path})",
      "error.http": "HTTP {status} from {path}",
      "error.drawing": "drawing failed: {message}",
      "error.page": "page error: {message}"
    },
    "zh": {
      "page.title": "tokpos\uff1a\u4ece\u8bcd\u5143 id \u5230 (B, T, D)",
      "page.sub": "\u8bcd\u5143 id \u2192 \u8bcd\u5143\u884c + \u4f4d\u7f6e\u884c \u2192 (B, T, D)",
      "status.loading": "\u52a0\u8f7d\u4e2d\u2026",
      "status.done": "T = {T}\uff0cD = {D}\uff0cL = {L} \u00b7 \u672c\u6b21\u66f4\u65b0\u7528\u65f6 {ms} ms",
      "controls.aria": "\u8bbe\u7f6e",
      "text.label": "\u6587\u672c",
      "text.help": "\u6bcf\u4e2a UTF-8 \u5b57\u8282\u5c31\u662f\u4e00\u4e2a\u8bcd\u5143\uff1aid = \u5b57\u8282\u503c + 4\uff08id 0\u20133 \u4fdd\u7559\u4e0d\u7528\uff09\u3002",
      "dim.label": "\u5bbd\u5ea6 D",
      "dim.help": "\u6bcf\u5f20\u8868\u7684\u5217\u6570\uff1b\u5171 D/2 \u5bf9 sin/cos\u3002",
      "context.label": "\u4e0a\u4e0b\u6587\u957f\u5ea6 L",
      "context.help": "\u4f4d\u7f6e\u8868\u7684\u884c\u6570\uff1b\u53ef\u5b66\u4e60\u7684\u8868\u5230\u7b2c L \u884c\u4e3a\u6b62\u3002",
      "trained.help": "\u7531\u8bad\u7ec3\u597d\u7684\u8868 {file} \u51b3\u5b9a\uff1aL = {L}\uff0cD = {D}\u3002",
      "base.label": "\u5e95\u6570 base",
      "base.help": "\u5bf9\u6570\u523b\u5ea6\uff0c10 \u5230 100000\uff1a\u6700\u957f\u7684\u6ce2\u957f\u5927\u7ea6\u662f 2\u03c0 \u00d7 base\u3002",
      "layout.label": "\u5217\u7684\u6392\u5217",
      "layout.interleaved": "interleaved\uff08sin\u3001cos\u3001sin\u3001cos \u2026 \u4ea4\u66ff\uff09",
      "layout.halves": "halves\uff08\u5148\u5168\u662f sin\uff0c\u518d\u5168\u662f cos\uff09",
      "layout.t2t": "t2t\uff08tensor2tensor \u7684\u6392\u6cd5\uff09",
      "layout.help": "\u6bcf\u4e00\u5bf9 sin/cos \u5728\u4f4d\u7f6e\u884c\u91cc\u653e\u5728\u54ea\u4e24\u5217\u3002",
      "positions.legend": "\u4f4d\u7f6e\u7f16\u7801",
      "positions.sinusoidal": "\u6b63\u5f26\u5f0f\uff08\u56fa\u5b9a\u516c\u5f0f\uff0c\u6ca1\u6709\u53c2\u6570\uff09",
      "positions.learned": "\u53ef\u5b66\u4e60\uff08L \u00d7 D \u7684\u8868\uff0c\u521a\u521d\u59cb\u5316\uff09",
      "positions.trained": "\u8bad\u7ec3\u597d\u7684\uff08{file}\uff09",
      "seed.label": "\u968f\u673a\u79cd\u5b50",
      "facts.aria": "\u5f62\u72b6\u4e0e\u53c2\u6570",
      "facts.shape": "\u5f62\u72b6",
      "facts.token": "\u8bcd\u5143\u8868",
      "facts.position": "\u4f4d\u7f6e\u8868",
      "params.count": "{n} \u4e2a\u53c2\u6570",
      "ids.title": "\u8bcd\u5143 id",
      "chips.aria": "\u8bcd\u5143 id\uff0c\u6bcf\u4e2a\u5b57\u8282\u4e00\u4e2a",
      "chips.empty": "\u8fd8\u6ca1\u6709\u8bcd\u5143\uff1a\u8bf7\u8f93\u5165\u4e00\u4e9b\u6587\u5b57",
      "chip.title": "t = {t}\uff1a\u5b57\u8282 {byte} \u2192 id {id}",
      "group.title": "{char}\uff1a{n} \u4e2a\u5b57\u8282\uff0ct = {first} \u5230 {last}",
      "ids.note": "\u6ce8\u610f\uff1a\u540c\u4e00\u4e2a\u5b57\u8282\u4e0d\u7ba1\u51fa\u73b0\u5728\u54ea\u91cc\uff0cid \u90fd\u4e00\u6837\uff1b\u4e00\u4e2a\u5b57\u7b26\u5360\u4e00\u5230\u56db\u4e2a\u5b57\u8282\uff08\u5e38\u89c1\u6c49\u5b57\u5360\u4e09\u4e2a\uff09\uff0c\u8fd9\u4e9b\u5b57\u8282\u5f52\u5728\u8be5\u5b57\u7b26\u4e0b\u9762\u3002",
      "ids.repeat": "\u6307\u5411\u4e00\u4e2a\u5c0f\u5757\u6216\u4e00\u884c\uff08\u70b9\u51fb\u5c0f\u5757\u53ef\u4ee5\u56fa\u5b9a\uff09\uff1aid \u76f8\u540c\u7684\u8bcd\u5143\u4f1a\u4e00\u8d77\u4eae\u8d77\u6765\u3002",
      "lookup.title": "\u67e5\u8868\uff1a\u8bcd\u5143\u884c + \u4f4d\u7f6e\u884c = \u548c",
      "fig.token": "\u8bcd\u5143\u884c",
      "fig.position": "\u4f4d\u7f6e\u884c",
      "fig.sum": "\u548c",
      "heat.token.aria": "\u8bcd\u5143\u884c\u7684\u70ed\u529b\u56fe",
      "heat.position.aria": "\u4f4d\u7f6e\u884c\u7684\u70ed\u529b\u56fe",
      "heat.sum.aria": "\u548c\u7684\u70ed\u529b\u56fe",
      "heat.empty": "\u6ca1\u6709\u884c",
      "row.token": "t = {t}\uff08'{char}'\uff0cid {id}\uff09",
      "row.position": "\u4f4d\u7f6e {t}",
      "tip.value": "\u503c = {v}",
      "tip.sum": "\u8bcd\u5143 {a} + \u4f4d\u7f6e {b} = \u548c {c}",
      "legend.aria": "\u989c\u8272\u523b\u5ea6\uff1a\u4ece {lo}\uff08\u84dd\uff09\u7ecf 0\uff08\u767d\uff09\u5230 {hi}\uff08\u7ea2\uff09",
      "scale.legend": "\u989c\u8272\u523b\u5ea6",
      "scale.panel": "\u6bcf\u4e2a\u9762\u677f\u5404\u7528\u4e00\u4e2a",
      "scale.shared": "\u4e09\u4e2a\u9762\u677f\u5171\u7528\u4e00\u4e2a",
      "scale.sharedFaint": "\u5171\u7528\u4e00\u4e2a\u523b\u5ea6\u65f6\uff0c\u8bcd\u5143\u884c\u51e0\u4e4e\u770b\u4e0d\u51fa\u989c\u8272\uff1a\u5b83\u7684\u6570\u503c\u5f88\u5c0f\uff0c\u6765\u81ea N(0, \u03c3\u00b2)\uff0c\u8fd9\u4e9b\u884c\u91cc \u03c3 \u2248 {std}\uff08\u6700\u5927\u7684 |\u503c| \u662f {tok}\uff09\uff0c\u800c\u4f4d\u7f6e\u884c\u7684\u6570\u503c\u53ef\u8fbe \u00b1{pos}\uff0c\u5927 {ratio} \u500d\u3002\u6539\u6210\u6bcf\u4e2a\u9762\u677f\u5404\u7528\u4e00\u4e2a\u523b\u5ea6\u5c31\u80fd\u770b\u6e05\u3002",
      "scale.sharedEven": "\u5171\u7528\u4e00\u4e2a\u523b\u5ea6\uff1a\u8fd9\u91cc\u8bcd\u5143\u884c\uff08\u6700\u5927 |\u503c| {tok}\uff09\u548c\u4f4d\u7f6e\u884c\uff08\u6700\u5927 |\u503c| {pos}\uff09\u5927\u5c0f\u76f8\u8fd1\uff0c\u4e24\u8005\u90fd\u770b\u5f97\u89c1\u3002",
      "scale.panelNote": "\u6bcf\u4e2a\u9762\u677f\u5404\u7528\u4e00\u4e2a\u523b\u5ea6\uff1a\u6bcf\u5f20\u70ed\u529b\u56fe\u6309\u81ea\u5df1\u6700\u5927\u7684 |\u503c| \u7740\u8272\uff08\u8bcd\u5143\u884c {tok}\uff0c\u4f4d\u7f6e\u884c {pos}\uff0c\u548c {sum}\uff09\uff0c\u6240\u4ee5\u4e0d\u540c\u9762\u677f\u7684\u989c\u8272\u4e0d\u80fd\u76f4\u63a5\u6bd4\u8f83\u3002",
      "lookup.note": "\u6ce8\u610f\uff1a\u91cd\u590d\u51fa\u73b0\u7684\u5b57\u7b26\u7684\u8bcd\u5143\u884c\u5b8c\u5168\u76f8\u540c\uff0c\u4f46\u4f4d\u7f6e\u884c\u4e0d\u540c\uff0c\u6240\u4ee5\u52a0\u8d77\u6765\u7684\u548c\u4e5f\u4e0d\u540c\u3002",
      "offset.title": "\u4f4d\u7f6e\u884c\u7684\u4f59\u5f26\u76f8\u4f3c\u5ea6\u4e0e\u504f\u79fb",
      "offset.aria": "\u4f4d\u7f6e\u884c p \u4e0e p + k \u7684\u5e73\u5747\u4f59\u5f26\u76f8\u4f3c\u5ea6\u968f\u504f\u79fb k \u7684\u53d8\u5316",
      "offset.axis": "\u504f\u79fb k",
      "offset.mean": "\u5e73\u5747 cos",
      "offset.note.sinusoidal": "\u6ce8\u610f\uff1a\u6b63\u5f26\u5f0f\u7684\u884c\u968f\u8ddd\u79bb\u5e73\u6ed1\u5730\u53d8\u5f97\u4e0d\u76f8\u4f3c\uff0c\u66f2\u7ebf\u53ea\u53d6\u51b3\u4e8e\u504f\u79fb\u3002",
      "offset.note.learned": "\u6ce8\u610f\uff1a\u521a\u521d\u59cb\u5316\u7684\u53ef\u5b66\u4e60\u8868\u9664\u4e86\u504f\u79fb 0 \u4ee5\u5916\u90fd\u5728 0 \u9644\u8fd1\uff1a\u884c\u662f\u968f\u673a\u7684\uff0c\u8fd8\u4ec0\u4e48\u90fd\u6ca1\u5b66\u5230\u3002",
      "offset.note.trained": "\u6ce8\u610f\uff1a\u8bad\u7ec3\u597d\u7684\u8868\u5728\u5c0f\u504f\u79fb\u5904\u5f88\u76f8\u4f3c\uff0c\u968f\u8ddd\u79bb\u4e0b\u964d\uff0c\u901a\u5e38\u6bd4\u6b63\u5f26\u5f0f\u964d\u5f97\u5feb\uff0c\u4e5f\u4e0d\u5e73\u6ed1\uff1a\u8bad\u7ec3\u5b66\u5230\u4e86\u4e00\u90e8\u5206\u8fd9\u79cd\u7ed3\u6784\uff0c\u4f46\u4e0d\u662f\u4e00\u4e2a\u516c\u5f0f\u3002",
      "adjacent.some": "\u76f8\u90bb\u884c (p, p + 1)\uff1a\u5e73\u5747 cos {mean}\uff0c\u4ece {lo} \u5230 {hi}\uff0c\u5171 {n} \u5bf9",
      "adjacent.none": "\u76f8\u90bb\u884c\uff1a\u6ca1\u6709\uff08L = {L}\uff09",
      "matrix.title": "\u76f8\u4f3c\u5ea6\u77e9\u9635",
      "matrix.aria": "\u4efb\u610f\u4e24\u884c\u4f4d\u7f6e\u884c\u7684\u4f59\u5f26\u76f8\u4f3c\u5ea6",
      "matrix.omitted": "\u53ea\u6709 L \u2264 {max} \u4e14 L \u00d7 L \u00d7 D \u2264 {work} \u65f6\u624d\u53d1\u9001\u77e9\u9635\uff08\u8fd9\u91cc L = {L}\uff0cD = {D}\uff09\u3002",
      "matrix.note.sinusoidal": "\u6ce8\u610f\uff1a\u660e\u4eae\u7684\u5bf9\u89d2\u6761\u5e26\uff1b\u76f8\u8fd1\u7684\u4f4d\u7f6e\u5f88\u50cf\uff0c\u800c\u4e14\u56fe\u6848\u53ea\u53d6\u51b3\u4e8e\u4e24\u8005\u7684\u8ddd\u79bb\u3002",
      "matrix.note.learned": "\u6ce8\u610f\uff1a\u53ea\u6709\u5bf9\u89d2\u7ebf\u662f\u4eae\u7684\uff1b\u521a\u521d\u59cb\u5316\u7684\u53ef\u5b66\u4e60\u8868\u884c\u662f\u968f\u673a\u7684\uff0c\u4e24\u4e2a\u4e0d\u540c\u4f4d\u7f6e\u51e0\u4e4e\u6b63\u4ea4\u3002",
      "matrix.note.trained": "\u6ce8\u610f\uff1a\u6cbf\u5bf9\u89d2\u7ebf\u6709\u4e00\u6761\u4eae\u5e26\uff0c\u76f8\u8fd1\u7684\u4f4d\u7f6e\u5f88\u50cf\uff1b\u4f46\u548c\u6b63\u5f26\u5f0f\u7684\u77e9\u9635\u4e0d\u540c\uff0c\u5b83\u4e0d\u5747\u5300\uff0c\u540c\u6837\u7684\u504f\u79fb\u5728\u4e0d\u540c\u5730\u65b9\u7ed9\u51fa\u7684 cos \u4e0d\u4e00\u6837\u3002",
      "bands.title": "\u6ce2\u957f\u5206\u6bb5\uff1aD \u4e0e D/2",
      "bands.caption": "\u6bcf\u5bf9 sin/cos\uff08\u7b2c k \u5bf9\uff09\u4e00\u6839\u67f1\uff1a\u5b83\u7684\u6ce2\u957f\uff08\u4ee5\u4f4d\u7f6e\u4e3a\u5355\u4f4d\uff0c\u5bf9\u6570\u523b\u5ea6\uff09\uff0c\u6309\u6570\u91cf\u7ea7\u7740\u8272\u3002",
      "bands.d.aria": "D \u65f6\u6bcf\u5bf9 sin/cos \u7684\u6ce2\u957f\uff0c\u5bf9\u6570\u523b\u5ea6",
      "bands.dlist.aria": "D \u65f6\u6bcf\u4e2a\u6ce2\u957f\u6570\u91cf\u7ea7\u91cc\u7684\u5bf9\u6570",
      "bands.half.aria": "D/2 \u65f6\u6bcf\u5bf9 sin/cos \u7684\u6ce2\u957f\uff0c\u5bf9\u6570\u523b\u5ea6",
      "bands.halflist.aria": "D/2 \u65f6\u6bcf\u4e2a\u6ce2\u957f\u6570\u91cf\u7ea7\u91cc\u7684\u5bf9\u6570",
      "bands.pairs": "{n} \u5bf9",
      "bands.pair": "{n} \u5bf9",
      "bands.note": "\u6ce8\u610f\uff1aD \u51cf\u534a\uff0csin/cos \u7684\u5bf9\u6570\u4e5f\u51cf\u534a\uff0c\u4f46\u5b83\u4eec\u4ecd\u7136\u94fa\u6ee1 2\u03c0 \u5230 2\u03c0 \u00d7 base\uff0c\u6240\u4ee5\u6bcf\u4e2a\u6570\u91cf\u7ea7\u91cc\u5927\u7ea6\u53ea\u5269\u4e00\u534a\u3002",
      "bands.modeNote": "\u8fd9\u4e9b\u6ce2\u957f\u5c5e\u4e8e\u540c\u4e00 D \u4e0b\u7684\u6b63\u5f26\u5f0f\u8868\uff0c\u4ec5\u4f9b\u5bf9\u7167\uff1a\u4e0a\u9762\u9009\u4e2d\u7684\u8868\u6ca1\u6709\u6ce2\u957f\u3002",
      "run.title": "\u8bad\u7ec3\u8fc7\u7a0b\uff1a\u5b66\u4e60\u5f0f\u4f4d\u7f6e\u8868\u4e00\u6b65\u4e00\u6b65\u7684\u53d8\u5316",
      "run.file": "\uff08{file}\uff0c{S} \u4e2a\u5feb\u7167\uff09",
      "run.stepLabel": "\u8bad\u7ec3\u6b65",
      "run.stepHelp": "\u6bcf\u4e00\u683c\u662f\u8bad\u7ec3\u4e2d\u7684\u4e00\u4e2a\u5feb\u7167\u3002\u9009\u4e2d\u201c\u8bad\u7ec3\u597d\u7684\u201d\u4f4d\u7f6e\u7f16\u7801\u65f6\uff0c\u4e0b\u9762\u5404\u4e2a\u9762\u677f\u4e5f\u663e\u793a\u8fd9\u4e00\u6b65\u3002",
      "run.tableCaption": "\u8fd9\u4e00\u6b65\u7684\u5b66\u4e60\u5f0f\u4f4d\u7f6e\u8868",
      "run.table.aria": "\u6240\u9009\u8bad\u7ec3\u6b65\u7684\u5b66\u4e60\u5f0f\u4f4d\u7f6e\u8868\u70ed\u529b\u56fe",
      "run.lossCaption": "\u635f\u5931\u968f\u8bad\u7ec3\u6b65\u7684\u53d8\u5316",
      "run.loss.aria": "\u4e24\u79cd\u4f4d\u7f6e\u7f16\u7801\u7684\u8bad\u7ec3\u635f\u5931\u4e0e\u7559\u51fa\u635f\u5931\u968f\u8bad\u7ec3\u6b65\u7684\u53d8\u5316",
      "run.cosCaption": "\u76f8\u90bb\u4f59\u5f26\u5747\u503c\u968f\u8bad\u7ec3\u6b65\u7684\u53d8\u5316",
      "run.cos.aria": "\u5b66\u4e60\u5f0f\u8868\u76f8\u90bb\u884c\u7684\u5e73\u5747\u4f59\u5f26\u968f\u8bad\u7ec3\u6b65\u7684\u53d8\u5316",
      "run.legend.trainLearned": "\u8bad\u7ec3\u96c6\uff0c\u5b66\u4e60\u5f0f",
      "run.legend.heldoutLearned": "\u7559\u51fa\u96c6\uff0c\u5b66\u4e60\u5f0f",
      "run.legend.trainSinusoidal": "\u8bad\u7ec3\u96c6\uff0c\u6b63\u5f26\u5f0f",
      "run.legend.heldoutSinusoidal": "\u7559\u51fa\u96c6\uff0c\u6b63\u5f26\u5f0f",
      "run.legend.learnedCos": "\u5b66\u4e60\u5f0f\u8868",
      "run.legend.sinusoidalCos": "\u6b63\u5f26\u5f0f\u8868\uff08\u56fa\u5b9a\u4e0d\u53d8\uff09",
      "run.adjacent": "\u7b2c {step} \u6b65\uff1a\u76f8\u90bb\u4f59\u5f26\u5747\u503c {mean}\uff08\u6b63\u5f26\u5f0f\u8868\u4e3a {sin}\uff09",
      "run.loss": "\u7b2c {step} \u6b65\uff1a\u5b66\u4e60\u5f0f\u6a21\u578b\u7684\u635f\u5931\uff1a\u8bad\u7ec3\u96c6 {tl}\uff0c\u7559\u51fa\u96c6 {hl}\uff1b\u6b63\u5f26\u5f0f\u6a21\u578b\uff1a\u8bad\u7ec3\u96c6 {ts}\uff0c\u7559\u51fa\u96c6 {hs}",
      "run.axis": "\u8bad\u7ec3\u6b65",
      "run.note": "\u6ce8\u610f\uff1a\u7b2c\u4e00\u4e2a\u5feb\u7167\u662f\u521a\u521d\u59cb\u5316\u7684\u8868\uff0c\u53ea\u662f\u566a\u58f0\uff1b\u62d6\u52a8\u6ed1\u5757\uff0c\u770b\u8bad\u7ec3\u628a\u5b83\u53d8\u6210\u4ec0\u4e48\u6837\uff1a\u76f8\u90bb\u7684\u884c\u662f\u5426\u53d8\u5f97\u76f8\u50cf\uff0c\u53d8\u4e86\u591a\u5c11\u3002",
      "error.unreachable": "\u8fde\u4e0d\u4e0a tokpos \u670d\u52a1\u5668\uff08{path}\uff09",
      "error.http": "{path} \u8fd4\u56de HTTP {status}",
      "error.drawing": "\u7ed8\u56fe\u5931\u8d25\uff1a{message}",
      "error.page": "\u9875\u9762\u9519\u8bef\uff1a{message}"
    }
  };
  // catalogue: end

  // The language: ?lang= wins, then the choice remembered in localStorage,
  // then the browser's own language.
  const LANG_KEY = "tokpos.lang";
  const storage = (() => {
    try {
      return window.localStorage;
    } catch (e) {
      return null;  // storage refused (a sandboxed frame): the choice is not remembered
    }
  })();
  function initialLang() {
    const asked = new URLSearchParams(window.location.search).get("lang");
    if (asked && asked in MESSAGES) return asked;
    const kept = storage ? storage.getItem(LANG_KEY) : null;
    if (kept && kept in MESSAGES) return kept;
    return (navigator.language || "").toLowerCase().startsWith("zh") ? "zh" : "en";
  }
  let lang = initialLang();

  // The catalogue's text for key, with {name} replaced by params[name].
  function t(key, params = {}) {
    const text = MESSAGES[lang][key];
    if (text === undefined) throw new Error(`no text for ${key} in ${lang}`);
    return text.replace(/\{(\w+)\}/g, (m, name) => (name in params ? String(params[name]) : m));
  }

  // Every element that names a catalogue key gets that key's text.
  function applyStatic() {
    document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
    document.title = t("page.title");
    for (const el of document.querySelectorAll("[data-i18n]")) {
      if (el.tagName !== "TITLE") el.textContent = t(el.dataset.i18n);
    }
    for (const el of document.querySelectorAll("[data-i18n-aria]")) el.setAttribute("aria-label", t(el.dataset.i18nAria));
    for (const b of document.querySelectorAll(".lang button")) b.setAttribute("aria-pressed", String(b.dataset.lang === lang));
  }

  const probe = { renders: 0, pending: false, errors: 0, lastUpdateMs: null, updateTimes: [], messages: MESSAGES };
  window.tokpos = probe;

  // ---- colours -----------------------------------------------------------

  // Diverging blue - white - red, for values in [-m, m].
  const DIVERGING_STOPS = [
    [33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247],
    [253, 219, 199], [239, 138, 98], [178, 24, 43],
  ];
  const LUT = (() => {
    const lut = new Uint8ClampedArray(256 * 3);
    const n = DIVERGING_STOPS.length - 1;
    for (let i = 0; i < 256; i++) {
      const x = (i / 255) * n;
      const k = Math.min(n - 1, Math.floor(x));
      const f = x - k;
      for (let c = 0; c < 3; c++) {
        lut[i * 3 + c] = DIVERGING_STOPS[k][c] * (1 - f) + DIVERGING_STOPS[k + 1][c] * f;
      }
    }
    return lut;
  })();
  const GRADIENT_CSS = "linear-gradient(to right, " +
    DIVERGING_STOPS.map((c) => `rgb(${c[0]},${c[1]},${c[2]})`).join(", ") + ")";

  // One colour per decade of wavelength, the same in both band panels.
  const DECADE_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f"];
  const decadeColour = (e) => DECADE_COLOURS[((e % DECADE_COLOURS.length) + DECADE_COLOURS.length) % DECADE_COLOURS.length];

  // ---- formatting --------------------------------------------------------

  const fmt = (v, digits = 4) => {
    if (!Number.isFinite(v)) return String(v);
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(2);
    return v.toPrecision(digits).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
  };
  // Digits are written the same way in both languages (1,234).
  const int = (v) => (typeof v === "number" ? v.toLocaleString("en-US") : String(v));
  const byteLabel = (id) => {
    const b = id - 4;
    if (b >= 33 && b <= 126) return String.fromCharCode(b);
    if (b === 32) return "\u2423";  // open box: a visible space
    return hex(b);
  };
  const hex = (b) => "0x" + b.toString(16).padStart(2, "0");

  // The bytes (ids - 4) as UTF-8: [{first, count, char}] for each well-formed
  // character of two to four bytes, {first, count: 1, char: null} for every
  // other byte (ASCII, or a byte of invalid UTF-8, shown on its own).
  function utf8Groups(bytes) {
    const groups = [];
    for (let i = 0; i < bytes.length;) {
      const b = bytes[i];
      let n = 0, lo = 0x80, hi = 0xbf;
      if (b >= 0xc2 && b <= 0xdf) n = 2;
      else if (b >= 0xe0 && b <= 0xef) { n = 3; if (b === 0xe0) lo = 0xa0; if (b === 0xed) hi = 0x9f; }
      else if (b >= 0xf0 && b <= 0xf4) { n = 4; if (b === 0xf0) lo = 0x90; if (b === 0xf4) hi = 0x8f; }
      let ok = n > 0 && i + n <= bytes.length;
      for (let k = 1; ok && k < n; k++) {
        const c = bytes[i + k];
        ok = c >= (k === 1 ? lo : 0x80) && c <= (k === 1 ? hi : 0xbf);
      }
      if (ok) {
        groups.push({ first: i, count: n, char: new TextDecoder().decode(new Uint8Array(bytes.slice(i, i + n))) });
        i += n;
      } else {
        groups.push({ first: i, count: 1, char: null });
        i += 1;
      }
    }
    return groups;
  }
  probe.utf8Groups = utf8Groups;
  const SUPERSCRIPT = { "-": "\u207b", 0: "\u2070", 1: "\u00b9", 2: "\u00b2", 3: "\u00b3", 4: "\u2074",
                        5: "\u2075", 6: "\u2076", 7: "\u2077", 8: "\u2078", 9: "\u2079" };
  // 1, 10, 10², 10³, ...
  const decadeLabel = (v) => {
    const e = Math.round(Math.log10(v));
    if (e === 0 || e === 1) return String(10 ** e);
    return "10" + [...String(e)].map((c) => SUPERSCRIPT[c]).join("");
  };

  // ---- controls ----------------------------------------------------------

  const baseValue = () => Number((10 ** Number($("base").value)).toPrecision(3));

  let trained = null;  // GET /api/trained: the table of serve --weights, or null
  let run = null;  // GET /api/run: the training run of serve --weights RUN.safetensors, or null

  // The step the run's slider points at (its value is an index into run.steps).
  function runStep() {
    if (!run) return null;
    const i = Math.min(run.steps.length - 1, Math.max(0, Number($("run-step").value)));
    return run.steps[i];
  }

  function settings() {
    const seed = $("seed").value.trim();
    const positions = document.querySelector('input[name="positions"]:checked').value;
    const fixed = positions === "trained" && trained;
    return {
      text: $("text").value,
      dim: fixed ? trained.dim : Number($("dim").value),
      context: fixed ? trained.context : Number($("context").value),
      base: baseValue(),
      layout: $("layout").value,
      positions,
      seed: seed === "" ? "0" : seed,
      step: runStep(),
    };
  }

  function showControlValues(s) {
    $("dim-value").value = String(s.dim);
    $("context-value").value = String(s.context);
    // A trained table has its own L and D: the sliders rest while it is shown.
    const fixed = s.positions === "trained";
    $("dim").disabled = fixed;
    $("context").disabled = fixed;
    $("dim-help").textContent = fixed ? t("trained.help", { file: trained.file, L: s.context, D: s.dim }) : t("dim.help");
    $("context-help").textContent = fixed ? t("trained.help", { file: trained.file, L: s.context, D: s.dim }) : t("context.help");
    $("base-value").value = int(s.base);
    $("base").setAttribute("aria-valuetext", String(s.base));
    if (run) {
      $("run-step-value").value = String(s.step);
      $("run-step").setAttribute("aria-valuetext", String(s.step));
    }
  }

  // ---- the API -----------------------------------------------------------

  // A 400 answer: the server's message and the parameter it names.
  class ApiError extends Error {
    constructor(message, parameter) {
      super(message);
      this.parameter = parameter || null;
    }
  }

  // The control each API parameter comes from.
  const CONTROL_OF = { text: "text", dim: "dim", context: "context", base: "base", layout: "layout", seed: "seed", step: "run-step" };

  function markInvalid(parameters) {
    for (const [name, id] of Object.entries(CONTROL_OF)) {
      const el = $(id);
      if (parameters.has(name)) el.setAttribute("aria-invalid", "true");
      else el.removeAttribute("aria-invalid");
    }
  }

  const cache = new Map();  // url -> parsed JSON of a successful answer
  const CACHE_LIMIT = 48;

  function query(params) {
    return new URLSearchParams(Object.entries(params).map(([k, v]) => [k, String(v)])).toString();
  }

  async function getJson(url, signal) {
    if (cache.has(url)) return cache.get(url);
    let response;
    try {
      response = await fetch(url, { signal, headers: { Accept: "application/json" } });
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new ApiError(t("error.unreachable", { path: url.split("?")[0] }));
    }
    let body = null;
    try {
      body = await response.json();
    } catch (e) {
      if (e.name === "AbortError") throw e;
    }
    if (!response.ok || body === null) {
      const message = body && typeof body.error === "string" ? body.error : t("error.http", { status: response.status, path: url.split("?")[0] });
      throw new ApiError(message, body && body.parameter);
    }
    cache.set(url, body);
    if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value);
    return body;
  }

  function requests(s) {
    // A trained table's L and D are the file's: not sent (the server would refuse others).
    // A training run's trained table is the snapshot at the slider's step.
    const table = s.positions === "trained"
      ? (run ? { positions: s.positions, step: s.step } : { positions: s.positions })
      : { dim: s.dim, context: s.context, base: s.base, layout: s.layout, positions: s.positions, seed: s.seed };
    const half = Math.max(2, Math.floor(s.dim / 2));
    const urls = {
      embed: "/api/embed?" + query({ text: s.text, ...table }),
      similarity: "/api/similarity?" + query(table),
      waves: "/api/wavelengths?" + query({ dim: s.dim, base: s.base }),
      wavesHalf: "/api/wavelengths?" + query({ dim: half, base: s.base }),
    };
    if (run) urls.runTable = "/api/run/table?" + query({ step: s.step });
    return urls;
  }

  // ---- the update loop: light debounce, the latest input wins ---------------

  let controller = null;
  let sequence = 0;
  let timer = 0;
  let inputAt = 0;
  let last = {};  // the last successful answer of each request, for redraws

  function schedule(event) {
    inputAt = event && event.timeStamp ? event.timeStamp : performance.now();
    showControlValues(settings());
    clearTimeout(timer);
    timer = setTimeout(update, 12);
    probe.pending = true;
  }

  async function update() {
    const mine = ++sequence;
    const started = inputAt || performance.now();
    if (controller) controller.abort();
    controller = new AbortController();
    const signal = controller.signal;
    probe.pending = true;

    const s = settings();
    const urls = requests(s);
    const names = Object.keys(urls);
    const results = await Promise.allSettled(names.map((n) => getJson(urls[n], signal)));
    if (mine !== sequence) return;  // a newer input owns the view now
    const answered = performance.now();

    const messages = [];
    const invalid = new Set();
    const fresh = {};
    results.forEach((r, i) => {
      if (r.status === "fulfilled") fresh[names[i]] = r.value;
      else if (r.reason && r.reason.name !== "AbortError") {
        messages.push(r.reason.message || String(r.reason));
        if (r.reason.parameter) invalid.add(r.reason.parameter);
      }
    });
    markInvalid(invalid);
    try {
      render(s, fresh);
    } catch (e) {
      messages.push(t("error.drawing", { message: e.message }));
    }
    showError([...new Set(messages)]);
    if (messages.length) probe.errors++;

    const done = performance.now();
    const ms = done - started;
    probe.lastPhasesMs = { wait: answered - started, draw: done - answered };
    probe.lastUpdateMs = ms;
    window.lastUpdateMs = ms;
    probe.updateTimes.push(ms);
    if (probe.updateTimes.length > 200) probe.updateTimes.shift();
    probe.renders++;
    probe.pending = false;
    lastStatus = { T: last.embed ? last.embed.ids.length : 0, D: s.dim, L: s.context, ms: ms.toFixed(1) };
    showStatus();
  }

  let lastStatus = null;
  function showStatus() {
    $("status").textContent = lastStatus ? t("status.done", lastStatus) : t("status.loading");
  }

  function showError(messages) {
    const box = $("error");
    if (messages.length === 0) {
      box.hidden = true;
      box.textContent = "";
      return;
    }
    box.textContent = messages.join(" \u2014 ");
    box.hidden = false;
  }

  // ---- rendering -----------------------------------------------------------

  function render(s, fresh) {
    for (const [name, value] of Object.entries(fresh)) last[name] = value;
    shownPositions = s.positions;
    showModeNotes();
    const stale = (panel, name) => document.getElementById(panel).closest(".panel").classList.toggle("stale", !(name in fresh));
    if (fresh.embed) renderEmbed(fresh.embed);
    stale("lookup-title", "embed");
    stale("ids-title", "embed");
    if (fresh.similarity) renderSimilarity(fresh.similarity);
    stale("offset-title", "similarity");
    stale("matrix-title", "similarity");
    if (fresh.waves && fresh.wavesHalf) renderBands(fresh.waves, fresh.wavesHalf);
    stale("bands-title", "waves");
    if (run) {
      if (fresh.runTable) renderRun(fresh.runTable);
      stale("run-title", "runTable");
    }
  }

  // The notes that depend on the positions shown: sinusoidal, learned or trained.
  let shownPositions = "sinusoidal";
  function showModeNotes() {
    const mode = shownPositions in { sinusoidal: 1, learned: 1, trained: 1 } ? shownPositions : "sinusoidal";
    $("offset-note").textContent = t(`offset.note.${mode}`);
    $("matrix-note").textContent = t(`matrix.note.${mode}`);
    $("bands-mode-note").hidden = mode === "sinusoidal";
    $("bands-mode-note").textContent = t("bands.modeNote");
  }

  function redraw() {
    showModeNotes();
    if (last.embed) renderEmbed(last.embed);
    if (last.similarity) renderSimilarity(last.similarity);
    if (last.waves && last.wavesHalf) renderBands(last.waves, last.wavesHalf);
    if (run && last.runTable) renderRun(last.runTable);
  }

  function chip(id, t_) {
    const li = document.createElement("li");
    li.className = "chip";
    li.dataset.t = String(t_);
    li.dataset.id = String(id);
    li.tabIndex = 0;
    li.title = t("chip.title", { t: t_, byte: hex(id - 4), id });
    const idEl = document.createElement("span");
    idEl.className = "chip-id";
    idEl.textContent = String(id);
    const ch = document.createElement("span");
    ch.className = "chip-char";
    ch.textContent = byteLabel(id);
    li.append(idEl, ch);
    return li;
  }

  function renderEmbed(e) {
    const chips = $("chips");
    const frag = document.createDocumentFragment();
    // The bytes of one UTF-8 character sit together under that character.
    for (const g of utf8Groups(e.ids.map((id) => id - 4))) {
      if (g.char === null) {
        frag.append(chip(e.ids[g.first], g.first));
        continue;
      }
      const group = document.createElement("li");
      group.className = "char-group";
      group.title = t("group.title", { char: g.char, n: g.count, first: g.first, last: g.first + g.count - 1 });
      const head = document.createElement("span");
      head.className = "group-char";
      head.textContent = g.char;
      const bytes = document.createElement("ol");
      bytes.className = "group-bytes";
      for (let k = 0; k < g.count; k++) bytes.append(chip(e.ids[g.first + k], g.first + k));
      group.append(head, bytes);
      frag.append(group);
    }
    if (e.ids.length === 0) {
      const li = document.createElement("li");
      li.className = "chips-empty";
      li.textContent = t("chips.empty");
      frag.append(li);
    }
    chips.replaceChildren(frag);

    const [B, T, D] = e.shape;
    $("shape").textContent = `(${B}, ${T}, ${D})`;
    $("lookup-dims").textContent = `(T = ${T}, D = ${D})`;
    const p = e.parameters || {};
    const count = (n) => (typeof n === "number" ? t("params.count", { n: int(n) }) : JSON.stringify(n));
    $("params-token").textContent = count(p.token);
    $("params-position").textContent = count(p.position);

    // The colour scales: one per panel, or one shared (the largest |value| of the three).
    const tok = maxAbs(e.token_rows, D), pos = maxAbs(e.position_rows, D), sum = maxAbs(e.sum, D);
    const shared = document.querySelector('input[name="scale"]:checked').value === "shared";
    const all = Math.max(tok, pos, sum) || 1;
    heatmaps.token.scaleOverride = shared ? all : 0;
    heatmaps.position.scaleOverride = shared ? all : 0;
    heatmaps.sum.scaleOverride = shared ? all : 0;
    showScaleNote(e, D, { tok, pos, sum }, shared);

    currentIds = e.ids;
    heatmaps.token.set(e.token_rows, D, rowLabel(e.ids));
    heatmaps.position.set(e.position_rows, D, (r) => t("row.position", { t: r }));
    heatmaps.sum.set(e.sum, D, rowLabel(e.ids), (r, c) =>
      t("tip.sum", { a: fmt(e.token_rows[r][c], 5), b: fmt(e.position_rows[r][c], 5), c: fmt(e.sum[r][c], 5) }));
    applyHighlight();
  }

  function maxAbs(rows, C) {
    let m = 0;
    for (const row of rows) for (let c = 0; c < C; c++) m = Math.max(m, Math.abs(row[c]));
    return m;
  }

  // Why the token rows look faint under one shared scale, from this answer's numbers.
  function showScaleNote(e, D, m, shared) {
    const note = $("scale-note");
    if (!e.ids.length) {
      note.textContent = "";
      return;
    }
    if (!shared) {
      note.textContent = t("scale.panelNote", { tok: fmt(m.tok, 3), pos: fmt(m.pos, 3), sum: fmt(m.sum, 3) });
      return;
    }
    let s2 = 0, n = 0;
    for (const row of e.token_rows) for (let c = 0; c < D; c++) { s2 += row[c] * row[c]; n++; }
    const std = Math.sqrt(s2 / Math.max(1, n));
    const ratio = m.tok > 0 ? m.pos / m.tok : 0;
    note.textContent = ratio >= 4
      ? t("scale.sharedFaint", { std: fmt(std, 2), tok: fmt(m.tok, 3), pos: fmt(m.pos, 3), ratio: fmt(ratio, 2) })
      : t("scale.sharedEven", { tok: fmt(m.tok, 3), pos: fmt(m.pos, 3) });
  }

  const rowLabel = (ids) => (r) => t("row.token", { t: r, char: byteLabel(ids[r]), id: ids[r] });

  // A canvas sized to its CSS box at the device's pixel ratio.
  function fitCanvas(canvas, cssHeight) {
    const dpr = window.devicePixelRatio || 1;
    const cssWidth = canvas.clientWidth || canvas.width;
    if (cssHeight !== undefined) canvas.style.height = `${cssHeight}px`;
    const h = cssHeight !== undefined ? cssHeight : canvas.clientHeight || canvas.height;
    const w = Math.max(1, Math.round(cssWidth * dpr));
    const hh = Math.max(1, Math.round(h * dpr));
    if (canvas.width !== w) canvas.width = w;
    if (canvas.height !== hh) canvas.height = hh;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { ctx, width: cssWidth, height: h };
  }

  // Paints rows (R x C numbers) as an R x C image, colour from [-scale, scale].
  function paintGrid(rows, C, scale) {
    const R = rows.length;
    const image = document.createElement("canvas");
    image.width = Math.max(1, C);
    image.height = Math.max(1, R);
    const ictx = image.getContext("2d");
    const data = ictx.createImageData(image.width, image.height);
    const px = data.data;
    const k = scale > 0 ? 127.5 / scale : 0;
    let o = 0;
    for (let r = 0; r < R; r++) {
      const row = rows[r];
      for (let c = 0; c < C; c++) {
        let i = Math.round(127.5 + row[c] * k);
        i = i < 0 ? 0 : i > 255 ? 255 : i;
        px[o] = LUT[i * 3];
        px[o + 1] = LUT[i * 3 + 1];
        px[o + 2] = LUT[i * 3 + 2];
        px[o + 3] = 255;
        o += 4;
      }
    }
    ictx.putImageData(data, 0, 0);
    return image;
  }

  function legend(el, scale) {
    el.replaceChildren();
    const lo = document.createElement("span");
    lo.textContent = fmt(-scale, 3);
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.background = GRADIENT_CSS;
    bar.setAttribute("role", "img");
    bar.setAttribute("aria-label", t("legend.aria", { lo: fmt(-scale, 3), hi: fmt(scale, 3) }));
    const hi = document.createElement("span");
    hi.textContent = fmt(scale, 3);
    el.append(lo, bar, hi);
  }

  // A heatmap canvas with hover and keyboard read-out of (row, column, value).
  class Heatmap {
    constructor(canvasId, legendId, { fixedScale = 0, square = false, what = "value", columnLabel = (c) => `d = ${c}` } = {}) {
      this.scaleOverride = 0;  // > 0: this scale instead of the panel's own
      this.marked = new Set();  // rows outlined (the tokens with the highlighted id)
      this.canvas = $(canvasId);
      this.legend = legendId ? $(legendId) : null;
      this.fixedScale = fixedScale;
      this.square = square;
      this.what = what;
      this.columnLabel = columnLabel;
      this.rows = [];
      this.C = 0;
      this.cursor = null;
      this.canvas.addEventListener("mousemove", (ev) => this.hover(ev));
      this.canvas.addEventListener("mouseleave", () => this.hide());
      this.canvas.addEventListener("blur", () => this.hide());
      this.canvas.addEventListener("keydown", (ev) => this.key(ev));
    }

    set(rows, C, rowName, valueText = null) {
      this.rows = rows;
      this.C = C;
      this.rowName = rowName;
      this.valueText = valueText;
      this.cursor = null;
      this.draw();
    }

    draw() {
      const R = this.rows.length;
      let scale = this.fixedScale || this.scaleOverride;
      if (!scale) {
        for (const row of this.rows) for (let c = 0; c < this.C; c++) scale = Math.max(scale, Math.abs(row[c]));
        if (scale === 0) scale = 1;
      }
      this.scale = scale;
      if (this.legend) legend(this.legend, scale);
      const cssWidth = this.canvas.clientWidth || 300;
      // Rows are up to 14 px tall; past 12 rows the map keeps 180 px and rows shrink.
      const cssHeight = this.square ? cssWidth : Math.min(180, Math.max(24, R * 14));
      const { ctx, width, height } = fitCanvas(this.canvas, cssHeight);
      ctx.clearRect(0, 0, width, height);
      if (R === 0 || this.C === 0) {
        ctx.fillStyle = "#5b6475";
        ctx.font = "12px system-ui, sans-serif";
        ctx.fillText(t("heat.empty"), 8, 16);
        this.image = null;
        return;
      }
      this.image = paintGrid(this.rows, this.C, scale);
      this.ctx = ctx;
      this.cssWidth = width;
      this.cssHeight = height;
      this.paint();
    }

    // The painted grid, then an outline around each marked row.
    paint() {
      if (!this.image) return;
      const { ctx, cssWidth: width, cssHeight: height } = this;
      const R = this.rows.length;
      // Nearest-neighbour when cells are at least a pixel, smoothing when many columns share one.
      ctx.imageSmoothingEnabled = this.C > this.canvas.width || R > this.canvas.height;
      ctx.clearRect(0, 0, width, height);
      ctx.drawImage(this.image, 0, 0, width, height);
      const h = height / R;
      ctx.strokeStyle = "#f0a500";
      ctx.lineWidth = 2;
      for (const r of this.marked) if (r < R) ctx.strokeRect(1, r * h + 1, width - 2, Math.max(1, h - 2));
    }

    mark(rows) {
      const same = rows.size === this.marked.size && [...rows].every((r) => this.marked.has(r));
      if (same) return;
      this.marked = rows;
      this.paint();
    }

    cellAt(ev) {
      const rect = this.canvas.getBoundingClientRect();
      const c = Math.floor(((ev.clientX - rect.left) / rect.width) * this.C);
      const r = Math.floor(((ev.clientY - rect.top) / rect.height) * this.rows.length);
      if (r < 0 || c < 0 || r >= this.rows.length || c >= this.C) return null;
      return { r, c };
    }

    hover(ev) {
      const cell = this.cellAt(ev);
      if (!cell) return this.hide();
      this.show(cell, ev.clientX, ev.clientY);
    }

    key(ev) {
      if (!this.rows.length) return;
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      const move = moves[ev.key];
      if (!move) return;
      ev.preventDefault();
      const cur = this.cursor || { r: 0, c: 0 };
      const step = ev.shiftKey ? 8 : 1;
      const r = Math.min(this.rows.length - 1, Math.max(0, cur.r + move[0] * (this.cursor ? step : 0)));
      const c = Math.min(this.C - 1, Math.max(0, cur.c + move[1] * (this.cursor ? step : 0)));
      this.cursor = { r, c };
      const rect = this.canvas.getBoundingClientRect();
      const x = rect.left + ((c + 0.5) / this.C) * rect.width;
      const y = rect.top + ((r + 0.5) / this.rows.length) * rect.height;
      this.show(this.cursor, x, y);
    }

    show({ r, c }, x, y) {
      const v = this.rows[r][c];
      const value = this.valueText ? this.valueText(r, c)
        : this.what === "cos" ? `cos = ${fmt(v, 5)}` : t("tip.value", { v: fmt(v, 5) });
      tooltip.textContent = `${this.rowName(r)}\n${this.columnLabel(c)}\n${value}`;
      tooltip.hidden = false;
      const pad = 14;
      const w = tooltip.offsetWidth;
      const h = tooltip.offsetHeight;
      tooltip.style.left = `${Math.min(window.innerWidth - w - 4, x + pad)}px`;
      tooltip.style.top = `${Math.min(window.innerHeight - h - 4, y + pad)}px`;
      this.canvas.setAttribute("aria-description", tooltip.textContent.replace(/\n/g, ", "));
      hoverRow(this.canvas.id === "matrix" || this.canvas.id === "run-table" ? -1 : r);
    }

    hide() {
      tooltip.hidden = true;
      hoverRow(-1);
    }
  }

  const tooltip = $("tooltip");

  // Repeated tokens light up together: the id under the pointer (a chip or
  // a heatmap row), else the chip clicked last; every chip with that id and
  // every row with it in the three heatmaps.
  let currentIds = [];
  let hoverId = null, selectedId = null, hoverT = -1;
  function hoverRow(r) {
    hoverT = r;
    hoverId = r >= 0 && r < currentIds.length ? currentIds[r] : null;
    applyHighlight();
  }
  function applyHighlight() {
    const id = hoverId !== null ? hoverId : selectedId;
    const rows = new Set();
    currentIds.forEach((x, r) => { if (x === id) rows.add(r); });
    for (const li of document.querySelectorAll("#chips .chip")) {
      li.classList.toggle("hot", id !== null && Number(li.dataset.id) === id);
      li.classList.toggle("current", Number(li.dataset.t) === hoverT);
      li.setAttribute("aria-pressed", String(selectedId !== null && Number(li.dataset.id) === selectedId));
    }
    for (const name of ["token", "position", "sum"]) heatmaps[name].mark(rows);
  }
  const chipOf = (ev) => (ev.target && ev.target.closest ? ev.target.closest("#chips .chip") : null);
  $("chips").addEventListener("mouseover", (ev) => { const c = chipOf(ev); if (c) hoverRow(Number(c.dataset.t)); });
  $("chips").addEventListener("mouseout", (ev) => { if (chipOf(ev)) hoverRow(-1); });
  $("chips").addEventListener("focusin", (ev) => { const c = chipOf(ev); if (c) hoverRow(Number(c.dataset.t)); });
  $("chips").addEventListener("focusout", () => hoverRow(-1));
  function select(ev) {
    const c = chipOf(ev);
    if (!c) return;
    const id = Number(c.dataset.id);
    selectedId = selectedId === id ? null : id;
    applyHighlight();
  }
  $("chips").addEventListener("click", select);
  $("chips").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); select(ev); }
  });

  const heatmaps = {
    token: new Heatmap("heat-token", "legend-token"),
    position: new Heatmap("heat-position", "legend-position"),
    sum: new Heatmap("heat-sum", "legend-sum"),
    matrix: new Heatmap("matrix", "legend-matrix", { fixedScale: 1, square: true, what: "cos", columnLabel: (q) => `q = ${q}` }),
    run: new Heatmap("run-table", "legend-run"),
  };

  // ---- a training run (serve --weights RUN.safetensors) ----------------------

  const RUN_COLOURS = { learned: "#b2182b", sinusoidal: "#1f5fbf" };

  // GET /api/run/table's answer for the slider's step: the table, its
  // adjacent cosine, the losses at that step, and the marker on the charts.
  function renderRun(rt) {
    const i = Math.max(0, run.steps.indexOf(rt.step));
    $("run-table-dims").textContent = `(L = ${rt.context}, D = ${rt.dim})`;
    heatmaps.run.set(rt.table, rt.dim, (p) => t("row.position", { t: p }));
    $("run-adjacent").textContent = t("run.adjacent", {
      step: rt.step, mean: fmt(rt.adjacent_mean, 3), sin: fmt(run.sinusoidal_adjacent_mean, 3) });
    const l = run.losses;
    $("run-loss").textContent = t("run.loss", {
      step: rt.step, tl: fmt(l.train_learned[i], 4), hl: fmt(l.heldout_learned[i], 4),
      ts: fmt(l.train_sinusoidal[i], 4), hs: fmt(l.heldout_sinusoidal[i], 4) });
    drawRunChart($("run-loss-chart"), run.steps, [
      { ys: l.train_learned, colour: RUN_COLOURS.learned },
      { ys: l.heldout_learned, colour: RUN_COLOURS.learned, dashed: true },
      { ys: l.train_sinusoidal, colour: RUN_COLOURS.sinusoidal },
      { ys: l.heldout_sinusoidal, colour: RUN_COLOURS.sinusoidal, dashed: true },
    ], rt.step);
    drawRunChart($("run-cos-chart"), run.steps, [
      { ys: run.adjacent_mean, colour: RUN_COLOURS.learned },
      { ys: run.steps.map(() => run.sinusoidal_adjacent_mean), colour: RUN_COLOURS.sinusoidal, dashed: true },
    ], rt.step);
  }

  // Lines of ys against xs, a vertical marker at x = marker.
  function drawRunChart(canvas, xs, series, marker) {
    const { ctx, width, height } = fitCanvas(canvas, 170);
    ctx.clearRect(0, 0, width, height);
    const left = 44, right = 10, top = 8, bottom = 30;
    const w = width - left - right, h = height - top - bottom;
    let lo = Infinity, hi = -Infinity;
    for (const s of series) for (const v of s.ys) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    const pad = hi > lo ? 0.06 * (hi - lo) : Math.max(0.05, Math.abs(hi) * 0.05);
    lo -= pad; hi += pad;
    const x0 = xs[0], x1 = xs.length > 1 ? xs[xs.length - 1] : xs[0] + 1;
    const X = (x) => left + ((x - x0) / (x1 - x0)) * w;
    const Y = (y) => top + ((hi - y) / (hi - lo)) * h;
    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    const ystep = niceStep(hi - lo, 4);
    for (let y = Math.ceil(lo / ystep) * ystep; y <= hi + 1e-12; y += ystep) {
      ctx.strokeStyle = "#e3e6ec";
      ctx.beginPath();
      ctx.moveTo(left, Math.round(Y(y)) + 0.5);
      ctx.lineTo(left + w, Math.round(Y(y)) + 0.5);
      ctx.stroke();
      ctx.fillStyle = "#5b6475";
      ctx.fillText(fmt(Math.abs(y) < ystep * 1e-6 ? 0 : y, 3), left - 6, Y(y));
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const xstep = niceStep(x1 - x0, 6);
    for (let x = Math.ceil(x0 / xstep) * xstep; x <= x1 + 1e-9; x += xstep) ctx.fillText(String(x), X(x), top + h + 4);
    ctx.fillText(t("run.axis"), left + w / 2, top + h + 16);
    ctx.strokeStyle = "#f0a500";
    ctx.lineWidth = 2;
    ctx.beginPath();
    ctx.moveTo(X(marker), top);
    ctx.lineTo(X(marker), top + h);
    ctx.stroke();
    for (const s of series) {
      ctx.strokeStyle = s.colour;
      ctx.lineWidth = 1.8;
      ctx.setLineDash(s.dashed ? [6, 4] : []);
      ctx.beginPath();
      s.ys.forEach((y, k) => (k ? ctx.lineTo(X(xs[k]), Y(y)) : ctx.moveTo(X(xs[k]), Y(y))));
      ctx.stroke();
    }
    ctx.setLineDash([]);
  }

  function showRunInfo() {
    $("run-panel").hidden = !run;
    if (run) $("run-file").textContent = t("run.file", { file: run.file, S: run.steps.length });
  }

  // by_offset {offsets: [k...], mean_cosine: [...]} as [[k, mean cosine], ...].
  function offsetSeries(b) {
    if (!b || !Array.isArray(b.mean_cosine)) return [];
    return b.mean_cosine.map((v, i) => [b.offsets ? b.offsets[i] : i, v]);
  }

  function renderSimilarity(sim) {
    drawOffsetChart($("offset-chart"), offsetSeries(sim.by_offset));
    const adj = sim.adjacent || [];
    if (adj.length) {
      let sum = 0, lo = Infinity, hi = -Infinity;
      for (const v of adj) { sum += v; lo = Math.min(lo, v); hi = Math.max(hi, v); }
      $("adjacent").textContent = t("adjacent.some", { mean: fmt(sum / adj.length, 3), lo: fmt(lo, 3), hi: fmt(hi, 3), n: adj.length });
    } else {
      $("adjacent").textContent = t("adjacent.none", { L: sim.config ? sim.config.context : 1 });
    }
    const m = sim.matrix;
    const canvas = $("matrix");
    if (Array.isArray(m) && m.length) {
      canvas.hidden = false;
      $("legend-matrix").hidden = false;
      $("matrix-missing").hidden = true;
      $("matrix-dims").textContent = `(${m.length} \u00d7 ${m.length})`;
      heatmaps.matrix.set(m, m.length, (p) => `p = ${p}`);
    } else {
      canvas.hidden = true;
      $("legend-matrix").hidden = true;
      $("matrix-missing").hidden = false;
      // The server's reason is English (the API is one language); the page says it in its own.
      $("matrix-missing").textContent = t("matrix.omitted", {
        max: 512, work: "2\u00b2\u2079", L: sim.config ? sim.config.context : "?", D: sim.config ? sim.config.dim : "?" });
      $("matrix-missing").title = sim.matrix_omitted || "";
      $("matrix-dims").textContent = "";
    }
  }

  function niceStep(span, target) {
    const raw = span / Math.max(1, target);
    const p = 10 ** Math.floor(Math.log10(raw));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function drawOffsetChart(canvas, series) {
    const { ctx, width, height } = fitCanvas(canvas, 200);
    ctx.clearRect(0, 0, width, height);
    const left = 40, right = 10, top = 10, bottom = 30;
    const w = width - left - right, h = height - top - bottom;
    const maxX = series.length ? Math.max(1, series[series.length - 1][0]) : 1;
    const X = (x) => left + (x / maxX) * w;
    const Y = (y) => top + ((1 - y) / 2) * h;
    ctx.font = "11px system-ui, sans-serif";
    ctx.strokeStyle = "#d9dde5";
    ctx.fillStyle = "#5b6475";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const y of [-1, -0.5, 0, 0.5, 1]) {
      ctx.beginPath();
      ctx.moveTo(left, Y(y) + 0.5);
      ctx.lineTo(left + w, Y(y) + 0.5);
      ctx.strokeStyle = y === 0 ? "#9aa3b2" : "#e3e6ec";
      ctx.stroke();
      ctx.fillText(String(y), left - 6, Y(y));
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const step = niceStep(maxX, 6);
    for (let x = 0; x <= maxX + 1e-9; x += step) ctx.fillText(String(x), X(x), top + h + 4);
    ctx.fillText(t("offset.axis"), left + w / 2, top + h + 16);
    ctx.save();
    ctx.translate(10, top + h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(t("offset.mean"), 0, -4);
    ctx.restore();
    if (!series.length) return;
    ctx.strokeStyle = "#1f5fbf";
    ctx.lineWidth = 1.8;
    ctx.beginPath();
    series.forEach(([x, y], i) => (i ? ctx.lineTo(X(x), Y(y)) : ctx.moveTo(X(x), Y(y))));
    ctx.stroke();
    if (series.length <= 80) {
      ctx.fillStyle = "#1f5fbf";
      for (const [x, y] of series) {
        ctx.beginPath();
        ctx.arc(X(x), Y(y), 2, 0, 2 * Math.PI);
        ctx.fill();
      }
    }
  }

  function renderBands(waves, half) {
    const n = waves.wavelengths.length;
    const allMax = Math.max(...waves.wavelengths, ...half.wavelengths, 10);
    const decades = [0, Math.ceil(Math.log10(allMax) - 1e-9)];
    const dim = waves.config ? waves.config.dim : Number($("dim").value);
    $("bands-d-dim").textContent = String(dim);
    $("bands-half-dim").textContent = String(Math.max(2, Math.floor(dim / 2)));
    drawBands($("bands-d"), waves.wavelengths, n, decades);
    drawBands($("bands-half"), half.wavelengths, n, decades);
    $("pairs-d").textContent = t("bands.pairs", { n });
    $("pairs-half").textContent = t("bands.pairs", { n: half.wavelengths.length });
    bandList($("bands-d-list"), waves.bands);
    bandList($("bands-half-list"), half.bands);
  }

  // One bar per pair, height log10(wavelength); the x axis spans D's pairs in both panels.
  function drawBands(canvas, wl, pairsAxis, [e0, e1]) {
    const { ctx, width, height } = fitCanvas(canvas, 118);
    ctx.clearRect(0, 0, width, height);
    const left = 40, right = 10, top = 6, bottom = 16;
    const w = width - left - right, h = height - top - bottom;
    const Y = (v) => top + h - ((Math.log10(v) - e0) / (e1 - e0)) * h;
    ctx.font = "11px system-ui, sans-serif";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    const labelEvery = h / Math.max(1, e1 - e0) < 16 ? 2 : 1;
    for (let e = e0; e <= e1; e++) {
      ctx.strokeStyle = "#e3e6ec";
      ctx.beginPath();
      ctx.moveTo(left, Math.round(Y(10 ** e)) + 0.5);
      ctx.lineTo(left + w, Math.round(Y(10 ** e)) + 0.5);
      ctx.stroke();
      if ((e - e0) % labelEvery !== 0) continue;
      ctx.fillStyle = "#5b6475";
      ctx.fillText(decadeLabel(10 ** e), left - 6, Y(10 ** e));
    }
    const bw = w / Math.max(1, pairsAxis);
    wl.forEach((v, k) => {
      ctx.fillStyle = decadeColour(Math.floor(Math.log10(v)));
      const y = Y(v);
      ctx.fillRect(left + k * bw + (bw > 3 ? 0.5 : 0), y, Math.max(0.8, bw - (bw > 3 ? 1 : 0)), top + h - y);
    });
    ctx.fillStyle = "#5b6475";
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const step = niceStep(pairsAxis, 6);
    for (let k = 0; k <= pairsAxis; k += step) ctx.fillText(String(k), left + k * bw, top + h + 3);
  }

  function bandList(ul, bands) {
    const frag = document.createDocumentFragment();
    for (const b of bands || []) {
      const li = document.createElement("li");
      const sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = decadeColour(Math.round(Math.log10(b.lower)));
      li.append(sw, `[${decadeLabel(b.lower)}, ${decadeLabel(b.upper)}): ${b.pairs === 1 ? t("bands.pair", { n: 1 }) : t("bands.pairs", { n: b.pairs })}`);
      frag.append(li);
    }
    ul.replaceChildren(frag);
  }

  // ---- wiring --------------------------------------------------------------

  const form = $("controls");
  form.addEventListener("input", schedule);
  form.addEventListener("submit", (ev) => ev.preventDefault());

  let resizeTimer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(redraw, 60);
  });

  // Errors anywhere on the page land in the error area, never only in the console.
  window.addEventListener("error", (ev) => {
    showError([t("error.page", { message: ev.message })]);
    ev.preventDefault();
  });
  window.addEventListener("unhandledrejection", (ev) => {
    showError([t("error.page", { message: ev.reason && ev.reason.message ? ev.reason.message : ev.reason })]);
    ev.preventDefault();
  });

  // The language switch: every label, note, legend and tooltip is redrawn in it.
  function setLang(next) {
    if (!(next in MESSAGES) || next === lang) return;
    lang = next;
    if (storage) storage.setItem(LANG_KEY, lang);
    // An explicit ?lang= in the address follows the choice, so a reload keeps it.
    const url = new URL(window.location.href);
    if (url.searchParams.has("lang")) {
      url.searchParams.set("lang", lang);
      history.replaceState(null, "", url);
    }
    tooltip.hidden = true;
    applyLang();
    redraw();
  }
  function applyLang() {
    applyStatic();
    showTrainedChoice();
    showControlValues(settings());
    showStatus();
    showModeNotes();
    showRunInfo();
  }
  for (const b of document.querySelectorAll(".lang button")) b.addEventListener("click", () => setLang(b.dataset.lang));

  $("scale-field").addEventListener("change", () => { if (last.embed) renderEmbed(last.embed); });

  function showTrainedChoice() {
    $("trained-choice").hidden = !trained;
    if (trained) $("trained-label").textContent = t("positions.trained", { file: trained.file });
  }

  // serve --weights: a "trained" choice for its table; for a training run,
  // the run's panel and its slider over the steps (at the last step).
  async function loadTrained() {
    try {
      const info = await getJson("/api/trained");
      trained = info && info.trained ? info.trained : null;
    } catch (e) {
      trained = null;  // an older server: no trained choice
    }
    try {
      const info = await getJson("/api/run");
      run = info && info.run ? info.run : null;
    } catch (e) {
      run = null;  // an older server: no run
    }
    if (run) {
      const slider = $("run-step");
      slider.max = String(run.steps.length - 1);
      slider.value = String(run.steps.length - 1);
      slider.addEventListener("input", schedule);
    }
    showTrainedChoice();
    showRunInfo();
  }

  applyLang();
  loadTrained().finally(() => {
    showControlValues(settings());
    schedule();
  });
})();
