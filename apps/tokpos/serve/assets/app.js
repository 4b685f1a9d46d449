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

  const probe = { renders: 0, pending: false, errors: 0, lastUpdateMs: null, updateTimes: [] };
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
  const int = (v) => (typeof v === "number" ? v.toLocaleString("en-US") : String(v));
  const byteLabel = (id) => {
    const b = id - 4;
    if (b >= 33 && b <= 126) return String.fromCharCode(b);
    if (b === 32) return "\u2423";  // open box: a visible space
    return "\\x" + b.toString(16).padStart(2, "0");
  };
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

  function settings() {
    const seed = $("seed").value.trim();
    return {
      text: $("text").value,
      dim: Number($("dim").value),
      context: Number($("context").value),
      base: baseValue(),
      layout: $("layout").value,
      positions: document.querySelector('input[name="positions"]:checked').value,
      seed: seed === "" ? "0" : seed,
    };
  }

  function showControlValues(s) {
    $("dim-value").value = String(s.dim);
    $("context-value").value = String(s.context);
    $("base-value").value = int(s.base);
    $("base").setAttribute("aria-valuetext", String(s.base));
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
  const CONTROL_OF = { text: "text", dim: "dim", context: "context", base: "base", layout: "layout", seed: "seed" };

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
      throw new ApiError(`cannot reach the tokpos server (${url.split("?")[0]})`);
    }
    let body = null;
    try {
      body = await response.json();
    } catch (e) {
      if (e.name === "AbortError") throw e;
    }
    if (!response.ok || body === null) {
      const message = body && typeof body.error === "string" ? body.error : `HTTP ${response.status} from ${url.split("?")[0]}`;
      throw new ApiError(message, body && body.parameter);
    }
    cache.set(url, body);
    if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value);
    return body;
  }

  function requests(s) {
    const table = { dim: s.dim, context: s.context, base: s.base, layout: s.layout, positions: s.positions, seed: s.seed };
    const half = Math.max(2, Math.floor(s.dim / 2));
    return {
      embed: "/api/embed?" + query({ text: s.text, ...table }),
      similarity: "/api/similarity?" + query(table),
      waves: "/api/wavelengths?" + query({ dim: s.dim, base: s.base }),
      wavesHalf: "/api/wavelengths?" + query({ dim: half, base: s.base }),
    };
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
      messages.push(`drawing failed: ${e.message}`);
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
    const T = last.embed ? last.embed.ids.length : 0;
    $("status").textContent = `T = ${T}, D = ${s.dim}, L = ${s.context} \u00b7 updated in ${ms.toFixed(1)} ms`;
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
    const stale = (panel, name) => document.getElementById(panel).closest(".panel").classList.toggle("stale", !(name in fresh));
    if (fresh.embed) renderEmbed(fresh.embed);
    stale("lookup-title", "embed");
    stale("ids-title", "embed");
    if (fresh.similarity) renderSimilarity(fresh.similarity);
    stale("offset-title", "similarity");
    stale("matrix-title", "similarity");
    if (fresh.waves && fresh.wavesHalf) renderBands(fresh.waves, fresh.wavesHalf);
    stale("bands-title", "waves");
  }

  function redraw() {
    if (last.embed) renderEmbed(last.embed);
    if (last.similarity) renderSimilarity(last.similarity);
    if (last.waves && last.wavesHalf) renderBands(last.waves, last.wavesHalf);
  }

  function renderEmbed(e) {
    const chips = $("chips");
    const frag = document.createDocumentFragment();
    e.ids.forEach((id, t) => {
      const li = document.createElement("li");
      li.className = "chip";
      li.dataset.t = String(t);
      li.title = `t = ${t}: byte 0x${(id - 4).toString(16).padStart(2, "0")} \u2192 id ${id}`;
      const idEl = document.createElement("span");
      idEl.className = "chip-id";
      idEl.textContent = String(id);
      const ch = document.createElement("span");
      ch.className = "chip-char";
      ch.textContent = byteLabel(id);
      li.append(idEl, ch);
      frag.append(li);
    });
    if (e.ids.length === 0) {
      const li = document.createElement("li");
      li.className = "chips-empty";
      li.textContent = "no tokens: type some text";
      frag.append(li);
    }
    chips.replaceChildren(frag);

    const [B, T, D] = e.shape;
    $("shape").textContent = `(${B}, ${T}, ${D})`;
    $("lookup-dims").textContent = `(T = ${T}, D = ${D})`;
    const p = e.parameters || {};
    $("params-token").textContent = typeof p.token === "number" ? `${int(p.token)} parameters` : JSON.stringify(p.token);
    $("params-position").textContent = typeof p.position === "number" ? `${int(p.position)} parameters` : JSON.stringify(p.position);

    heatmaps.token.set(e.token_rows, D, rowLabel(e.ids));
    heatmaps.position.set(e.position_rows, D, (t) => `position ${t}`);
    heatmaps.sum.set(e.sum, D, rowLabel(e.ids));
  }

  const rowLabel = (ids) => (t) => `t = ${t} ('${byteLabel(ids[t])}', id ${ids[t]})`;

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
    bar.setAttribute("aria-label", `colour scale from ${fmt(-scale, 3)} (blue) through 0 (white) to ${fmt(scale, 3)} (red)`);
    const hi = document.createElement("span");
    hi.textContent = fmt(scale, 3);
    el.append(lo, bar, hi);
  }

  // A heatmap canvas with hover and keyboard read-out of (row, column, value).
  class Heatmap {
    constructor(canvasId, legendId, { fixedScale = 0, square = false, what = "value", columnLabel = (c) => `d = ${c}` } = {}) {
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

    set(rows, C, rowName) {
      this.rows = rows;
      this.C = C;
      this.rowName = rowName;
      this.cursor = null;
      this.draw();
    }

    draw() {
      const R = this.rows.length;
      let scale = this.fixedScale;
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
        ctx.fillText("no rows", 8, 16);
        return;
      }
      const image = paintGrid(this.rows, this.C, scale);
      // Nearest-neighbour when cells are at least a pixel, smoothing when many columns share one.
      ctx.imageSmoothingEnabled = this.C > this.canvas.width || R > this.canvas.height;
      ctx.drawImage(image, 0, 0, width, height);
      this.cssWidth = width;
      this.cssHeight = height;
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
      tooltip.textContent = `${this.rowName(r)}\n${this.columnLabel(c)}\n${this.what} = ${fmt(v, 5)}`;
      tooltip.hidden = false;
      const pad = 14;
      const w = tooltip.offsetWidth;
      const h = tooltip.offsetHeight;
      tooltip.style.left = `${Math.min(window.innerWidth - w - 4, x + pad)}px`;
      tooltip.style.top = `${Math.min(window.innerHeight - h - 4, y + pad)}px`;
      this.canvas.setAttribute("aria-description", tooltip.textContent.replace(/\n/g, ", "));
      highlightChip(this.canvas.id === "matrix" ? -1 : r);
    }

    hide() {
      tooltip.hidden = true;
      highlightChip(-1);
    }
  }

  const tooltip = $("tooltip");
  let hotChip = null;
  function highlightChip(t) {
    if (hotChip) hotChip.classList.remove("hot");
    hotChip = t >= 0 ? document.querySelector(`#chips .chip[data-t="${t}"]`) : null;
    if (hotChip) hotChip.classList.add("hot");
  }

  const heatmaps = {
    token: new Heatmap("heat-token", "legend-token"),
    position: new Heatmap("heat-position", "legend-position"),
    sum: new Heatmap("heat-sum", "legend-sum"),
    matrix: new Heatmap("matrix", "legend-matrix", { fixedScale: 1, square: true, what: "cos", columnLabel: (q) => `q = ${q}` }),
  };

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
      $("adjacent").textContent = `adjacent rows (p, p + 1): mean cos ${fmt(sum / adj.length, 3)}, from ${fmt(lo, 3)} to ${fmt(hi, 3)} over ${adj.length} pairs`;
    } else {
      $("adjacent").textContent = "adjacent rows: none (L = 1)";
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
      $("matrix-missing").textContent = sim.matrix_omitted || "The matrix is drawn for L \u2264 512.";
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
    ctx.fillText("offset k", left + w / 2, top + h + 16);
    ctx.save();
    ctx.translate(10, top + h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText("mean cos", 0, -4);
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
    const dim = Number($("dim").value);
    $("bands-d-dim").textContent = String(dim);
    $("bands-half-dim").textContent = String(Math.max(2, Math.floor(dim / 2)));
    drawBands($("bands-d"), waves.wavelengths, n, decades);
    drawBands($("bands-half"), half.wavelengths, n, decades);
    $("pairs-d").textContent = `${n} pairs`;
    $("pairs-half").textContent = `${half.wavelengths.length} pairs`;
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
      li.append(sw, `[${decadeLabel(b.lower)}, ${decadeLabel(b.upper)}): ${b.pairs} ${b.pairs === 1 ? "pair" : "pairs"}`);
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
    showError([`page error: ${ev.message}`]);
    ev.preventDefault();
  });
  window.addEventListener("unhandledrejection", (ev) => {
    showError([`page error: ${ev.reason && ev.reason.message ? ev.reason.message : ev.reason}`]);
    ev.preventDefault();
  });

  showControlValues(settings());
  schedule();
})();
