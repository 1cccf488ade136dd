// The "translate your own sentence" box of the documentation site.
//
// Every <div class="live-translate"> on a page becomes a text box, a Translate button, the English
// output and the attention of every layer and head, drawn like the notebooks' attention charts
// (`viz.attention_heatmap`: rows = queries, columns = keys, the "oranges" colour scale, a tooltip with
// the two tokens and the weight). Nothing heavy is loaded with the page: the model runs in a Web Worker
// (worker.js + transformer.js) that is started, and downloads the weights, on the first Translate.
// The attention is drawn as plain SVG, so the page needs no chart library.
//
// Attributes of the placeholder: data-sentence (the German sentence shown first).

const HERE = import.meta.url;
const MODEL_URL = new URL("model/", HERE).href;
const KINDS = {  // viz.KINDS, with the axis titles of viz._axes
  decoder_src: { label: "Encoder-decoder attention", rows: "query (target)", cols: "key (source)" },
  encoder: { label: "Encoder self-attention", rows: "query (source)", cols: "key (source)" },
  decoder_self: { label: "Decoder self-attention", rows: "query (target)", cols: "key (target)" },
};
// ColorBrewer's 9-class Oranges, the stops of Vega's "oranges" scheme
const ORANGES = ["#fff5eb", "#fee6ce", "#fdd0a2", "#fdae6b", "#fd8d3c", "#f16913", "#d94801", "#a63603", "#7f2704"];
const SVG = "http://www.w3.org/2000/svg";

let worker = null, nextId = 0;
const pending = new Map();  // message id -> handler of the worker's replies

function startWorker() {
  if (worker) return worker;
  worker = new Worker(new URL("worker.js", HERE), { type: "module" });
  worker.onmessage = (event) => pending.get(event.data.id)?.(event.data);
  worker.onerror = (event) => {
    for (const handler of pending.values()) handler({ type: "error", text: event.message || "the model's worker failed to start" });
    pending.clear();
    worker = null;
  };
  return worker;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

function svg(tag, attrs = {}, text = null) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

function colour(t) {  // t in [0, 1] -> a colour of the oranges scale, interpolated between its stops
  const x = Math.min(Math.max(t, 0), 1) * (ORANGES.length - 1), i = Math.min(Math.floor(x), ORANGES.length - 2), f = x - i;
  const rgb = (hex) => [1, 3, 5].map((j) => parseInt(hex.slice(j, j + 2), 16));
  const a = rgb(ORANGES[i]), b = rgb(ORANGES[i + 1]);
  return `rgb(${a.map((v, j) => Math.round(v + f * (b[j] - v))).join(",")})`;
}

// Width in px of a label, roughly (the SVG is laid out before it is in the page).
const labelWidth = (labels) => 7 * Math.max(1, ...labels.map((l) => [...l].length));

// One head's attention as an SVG heatmap: matrix[query] = weights over the visible keys (the rest are 0).
function heatmap(matrix, rowLabels, colLabels, { title, rowTitle, colTitle, cell, domain, tooltip }) {
  const left = labelWidth(rowLabels) + 24, top = title ? 22 : 6;
  const width = colLabels.length * cell, height = rowLabels.length * cell;
  const bottom = Math.ceil(labelWidth(colLabels) * 0.72) + 26;
  const root = svg("svg", { class: "lt-heatmap", width: left + width + 8, height: top + height + bottom, role: "img",
                            "aria-label": `${title}: ${rowTitle} against ${colTitle}` });
  if (title) root.append(svg("text", { x: left, y: 14, class: "lt-title" }, title));
  const [lo, hi] = domain;
  matrix.forEach((row, i) => colLabels.forEach((_, j) => {
    const w = j < row.length ? row[j] : 0;
    const rect = svg("rect", { x: left + j * cell, y: top + i * cell, width: cell, height: cell,
                               fill: colour(hi > lo ? (w - lo) / (hi - lo) : 0), class: "lt-cell" });
    rect.dataset.tip = JSON.stringify([[rowTitle, rowLabels[i]], [colTitle, colLabels[j]], ["weight", w.toFixed(4)]]);
    root.append(rect);
  }));
  rowLabels.forEach((l, i) => root.append(svg("text", { x: left - 4, y: top + i * cell + cell / 2, class: "lt-label lt-row" }, l)));
  colLabels.forEach((l, j) => {
    const x = left + j * cell + cell / 2, y = top + height + 4;
    root.append(svg("text", { x, y, class: "lt-label lt-col", transform: `rotate(-45 ${x} ${y})` }, l));
  });
  root.append(svg("text", { x: left + width / 2, y: top + height + bottom - 4, class: "lt-axis" }, colTitle));
  const ry = top + height / 2;
  root.append(svg("text", { x: 10, y: ry, class: "lt-axis", transform: `rotate(-90 10 ${ry})` }, rowTitle));
  root.addEventListener("pointerover", tooltip.show);
  root.addEventListener("pointerdown", tooltip.show);  // a tap on a phone
  root.addEventListener("pointerleave", tooltip.hide);
  return root;
}

function legend([lo, hi]) {  // the colour scale of the charts, "weight" from lo to hi
  const stops = ORANGES.map((c, i) => `${c} ${(100 * i) / (ORANGES.length - 1)}%`).join(", ");
  return el("div", { class: "lt-legend" }, el("span", { text: "weight" }), el("span", { text: lo.toFixed(2) }),
            el("span", { class: "lt-ramp", style: `background: linear-gradient(to right, ${stops})` }), el("span", { text: hi.toFixed(2) }));
}

function makeTooltip(box) {
  const tip = el("div", { class: "lt-tooltip", role: "tooltip", hidden: "" });
  box.append(tip);
  return {
    show(event) {
      const cell = event.target.closest?.(".lt-cell");
      if (!cell) return;
      tip.replaceChildren(...JSON.parse(cell.dataset.tip).map(([k, v]) => el("div", {}, el("b", { text: k + ": " }), v)));
      tip.hidden = false;
      const a = cell.getBoundingClientRect(), b = box.getBoundingClientRect();
      const x = Math.min(a.right - b.left + 6, box.clientWidth - tip.offsetWidth - 4);
      tip.style.left = `${Math.max(0, x)}px`;
      tip.style.top = `${a.bottom - b.top + 6}px`;
    },
    hide() { tip.hidden = true; },
  };
}

function option(value, text, selected = false) {
  const o = el("option", { value, text });
  o.selected = selected;
  return o;
}

// The attention of every layer and head of one translation, with the selectors of the notebooks' charts.
function attentionView(result) {
  const box = el("div", { class: "lt-attention" });
  const kind = el("select", { "aria-label": "attention" }, ...Object.entries(KINDS).map(([k, v], i) => option(k, v.label, i === 0)));
  const layer = el("select", { "aria-label": "layer" },
                   ...Array.from({ length: result.layers }, (_, i) => option(i, `layer ${i}`, i === result.layers - 1)));
  const head = el("select", { "aria-label": "head" }, option("all", "all heads", true),
                  ...Array.from({ length: result.heads }, (_, i) => option(i, `head ${i}`)));
  const charts = el("div", { class: "lt-charts" }), tooltip = makeTooltip(box);
  const draw = () => {
    const k = KINDS[kind.value], L = Number(layer.value);
    const rows = kind.value === "encoder" ? result.srcTokens : result.tgtTokens;
    const cols = kind.value === "decoder_self" ? result.tgtTokens : result.srcTokens;
    const heads = head.value === "all" ? [...Array(result.heads).keys()] : [Number(head.value)];
    const perHead = result.weights[kind.value][L];
    const values = heads.flatMap((h) => perHead[h].flatMap((row) => Array.from(row)));
    if (kind.value === "decoder_self" && cols.length > 1) values.push(0);  // the future positions are 0
    const domain = [Math.min(...values), Math.max(...values)];  // one scale for the heads shown, as Vega-Lite's concat
    const cell = heads.length > 1 ? 14 : 18;  // viz.layer_view / viz.attention_heatmap
    tooltip.hide();
    charts.replaceChildren(...heads.map((h) => heatmap(perHead[h], rows, cols, {
      title: heads.length > 1 ? `head ${h}` : `${kind.value} layer ${L} head ${h}`,
      rowTitle: k.rows, colTitle: k.cols, cell, domain, tooltip })), legend(domain));
  };
  for (const s of [kind, layer, head]) s.addEventListener("change", draw);
  box.append(el("div", { class: "lt-selectors" }, kind, layer, head), charts);
  draw();
  return box;
}

function widget(root) {
  const id = `lt-${Math.random().toString(36).slice(2)}`;
  const text = el("textarea", { id: `${id}-text`, rows: "2", spellcheck: "false", lang: "de" });
  text.value = root.dataset.sentence || "Ein schwarzer Hund springt über einen Baumstamm.";
  const decoding = el("select", { "aria-label": "decoding" }, option("1", "greedy", true), option("4", "beam search, 4 beams"));
  const button = el("button", { type: "submit", class: "lt-button", text: "Translate" });
  const progress = el("progress", { max: "1", value: "0", hidden: "" });
  const status = el("p", { class: "lt-status", role: "status", "aria-live": "polite" });
  const output = el("p", { class: "lt-output", lang: "en", "aria-live": "polite" });
  const form = el("form", { class: "lt-form" },
    el("label", { for: text.id, text: "German sentence" }), text,
    el("div", { class: "lt-controls" }, decoding, button, progress));
  const note = el("p", { class: "lt-note", text: "The model runs in your browser. The first Translate downloads its " +
    "weights from this site (once: the browser keeps them), then every step happens on your device. Its code, " },
    el("a", { href: new URL("transformer.js", HERE).href, text: "transformer.js" }), ", follows the chapters.");
  root.replaceChildren(form, note, status, output);
  root.classList.add("lt-ready");
  let attention = null;

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    status.classList.remove("lt-problem");
    if (!text.value.trim()) {  // no worker, no download for an empty box
      status.textContent = "Type a German sentence to translate.";
      status.classList.add("lt-problem");
      return;
    }
    const message = { type: "translate", id: ++nextId, text: text.value, beamSize: Number(decoding.value), modelUrl: MODEL_URL };
    button.disabled = true;
    status.textContent = "Starting…";
    pending.set(message.id, (reply) => {
      if (reply.type === "status") status.textContent = reply.text;
      else if (reply.type === "progress") {
        progress.hidden = false;
        progress.value = reply.total ? reply.loaded / reply.total : 0;
        const mb = (n) => (n / 1e6).toFixed(1);
        status.textContent = `Downloading the model's weights: ${mb(reply.loaded)}${reply.total ? ` of ${mb(reply.total)}` : ""} MB`;
      } else {
        pending.delete(message.id);
        button.disabled = false;
        progress.hidden = true;
        if (reply.type === "result") {
          output.textContent = reply.text || "(an empty translation)";
          const unknown = reply.unknown.length ? ` Not in the vocabulary, read as <unk>: ${reply.unknown.join(" ")}.` : "";
          status.textContent = `${message.beamSize > 1 ? "Beam search" : "Greedy decoding"}: ${reply.outIds.length} tokens ` +
            `in ${Math.round(reply.ms)} ms.${unknown}`;
          attention?.remove();
          attention = attentionView(reply);
          root.append(attention);
        } else {  // "problem" (the reader's text) or "error"
          status.textContent = reply.type === "error" ? `The model could not run: ${reply.text}` : reply.text;
          status.classList.add("lt-problem");
        }
      }
    });
    startWorker().postMessage(message);
  });
}

document.querySelectorAll(".live-translate").forEach(widget);
