// Charts that fit their column and follow the colour theme. Loaded after the Vega bundle, only on pages with
// charts. The charts saved in the notebooks call the global `vegaEmbed(element, spec, options)`; this wraps it:
//   * the chart is drawn, measured, and drawn again smaller while it is wider than its column: a single view
//     gets a narrower plot (heatmaps keep their cell shape), a column of views narrows each view, a row of views
//     wraps into a grid, and on a narrow column legends move under the plot and long titles wrap;
//   * line charts answer the pointer anywhere near the line: the nearest point is highlighted and its tooltip
//     shown (the bare line is only 2 px to hover);
//   * in the dark theme the chart is drawn in light ink on a transparent background, with a dark tooltip;
//   * charts are drawn again when the theme changes or their column no longer holds them.
(function () {
  "use strict";
  const vegaEmbed = window.vegaEmbed;
  if (!vegaEmbed) return;

  // Dark theme: light text and axes, no background card.
  const DARK = {background: "transparent", title: {color: "#e3e3e3", subtitleColor: "#c8c8c8"},
                axis: {labelColor: "#c8c8c8", titleColor: "#e3e3e3", domainColor: "#9a9a9a", tickColor: "#9a9a9a", gridColor: "#474747"},
                legend: {labelColor: "#c8c8c8", titleColor: "#e3e3e3"}, header: {labelColor: "#c8c8c8", titleColor: "#e3e3e3"},
                view: {stroke: "#5a5a5a"}, style: {"guide-label": {fill: "#c8c8c8"}, "guide-title": {fill: "#e3e3e3"}}};

  function embed(el, spec, options) {
    return vegaEmbed(el, spec, Object.assign({}, options, {actions: false, renderer: "svg",
                                                         tooltip: {theme: dark() ? "dark" : "light"}}));
  }
  const dark = function () { return document.documentElement.dataset.theme === "dark"; };
  const clone = function (x) { return JSON.parse(JSON.stringify(x)); };
  const charts = [];

  function isUnit(s) { return s && s.mark !== undefined && !s.layer; }
  function markType(s) { return typeof s.mark === "string" ? s.mark : s.mark.type; }

  // A line with a tooltip becomes a layer: the line, and invisible points that show the nearest one on hover.
  function nearestHover(s) {
    if (!isUnit(s) || markType(s) !== "line" || !s.encoding || !s.encoding.tooltip) return s;
    const enc = s.encoding;
    const lineEnc = Object.assign({}, enc); delete lineEnc.tooltip;
    const out = {};
    for (const k in s) if (k !== "mark" && k !== "encoding" && k !== "params") out[k] = s[k];
    out.layer = [
      {mark: s.mark, encoding: lineEnc, params: s.params},
      {mark: {type: "point", filled: true, size: 70},
       encoding: Object.assign({}, enc, {opacity: {condition: {param: "nearest", value: 1, empty: false}, value: 0}}),
       params: [{name: "nearest", select: {type: "point", on: "pointermove", nearest: true, clear: "pointerout"}}]}];
    if (!out.layer[0].params) delete out.layer[0].params;
    return out;
  }

  function units(s) { return s.hconcat || s.vconcat || s.concat || [s]; }

  function wrapTitle(t, chars) {
    if (!t) return t;
    const text = typeof t === "string" ? t : t.text;
    if (typeof text !== "string" || text.length <= chars) return t;
    const lines = [""];
    text.split(" ").forEach(function (w) {
      const last = lines[lines.length - 1];
      if (last && (last + " " + w).length > chars) lines.push(w); else lines[lines.length - 1] = last ? last + " " + w : w;
    });
    return typeof t === "string" ? lines : Object.assign({}, t, {text: lines});
  }

  // Adapt a spec to a column `avail` px wide, given that the last drawing was `drawn` px wide.
  function shrink(s, drawn, avail) {
    const over = drawn - avail + 4;
    if (s.hconcat || s.concat) {
      const views = s.hconcat || s.concat;
      const cols = Math.min(s.concat ? (s.columns || views.length) : views.length, views.length);
      const each = drawn / cols;  // one view with its axes, title and share of the legend
      const plot = views[0].width || each;
      // narrower views while they keep 70% of their width; else wrap into fewer columns (shrunk to fit if needed)
      if (plot - over / cols >= 0.7 * plot) {
        views.forEach(function (v) { scaleUnit(v, over / cols); });
        return s;
      }
      let fit = Math.max(1, Math.floor(avail / each));
      if (fit < views.length && plot - (each - avail / (fit + 1)) >= 0.7 * plot) fit += 1;
      delete s.hconcat; s.concat = views; s.columns = fit;
      const excess = each - avail / fit + 4;
      if (excess > 0) views.forEach(function (v) { scaleUnit(v, excess); });
      return s;
    }
    if (s.vconcat) {  // a column of views: each spans the width, so each gives up the whole excess
      s.vconcat.forEach(function (v) { scaleUnit(v, over); });
      return s;
    }
    scaleUnit(s, over);
    return s;
  }
  function scaleUnit(v, over) {
    if (typeof v.width !== "number") return;
    const w = Math.max(60, v.width - over);
    if (typeof v.height === "number" && v.layer === undefined && markType(v) === "rect") {
      v.height = Math.max(40, Math.round(v.height * w / v.width));
    }
    v.width = Math.round(w);
  }

  function prepare(spec, avail) {
    let s = clone(spec);
    s.config = Object.assign({}, s.config);
    if (s.hconcat) s.hconcat = s.hconcat.map(nearestHover);
    else if (s.vconcat) s.vconcat = s.vconcat.map(nearestHover);
    else s = Object.assign(nearestHover(s), {config: s.config});
    if (avail < 560) {
      // under the plot, as many columns of entries as fit (a gradient legend lies flat)
      s.config.legend = Object.assign({orient: "bottom", direction: "horizontal", columns: Math.max(1, Math.floor(avail / 190)),
                                       labelLimit: avail - 40}, s.config.legend);
      const chars = Math.max(20, Math.floor(avail / 7.5));
      s.title = wrapTitle(s.title, chars);
      units(s).forEach(function (v) { v.title = wrapTitle(v.title, Math.max(12, Math.floor((v.width || avail) / 6))); });
    }
    s.autosize = {type: "pad", resize: true};  // the drawing grows to hold a legend placed under the plot
    if (dark()) {
      Object.keys(DARK).forEach(function (k) {
        s.config[k] = typeof DARK[k] === "object" ? Object.assign({}, DARK[k], s.config[k]) : DARK[k];
      });
    }
    return s;
  }

  // The chart's own width in CSS px (not the width it may be squeezed to by a max-width rule).
  function drawnWidth(el) {
    const g = el.querySelector("svg, canvas");
    if (!g) return 0;
    if (g.tagName.toLowerCase() === "svg") return parseFloat(g.getAttribute("width")) || g.getBoundingClientRect().width;
    return parseFloat(g.style.width) || g.width / (window.devicePixelRatio || 1);
  }

  async function draw(c) {
    const avail = Math.floor(c.el.getBoundingClientRect().width);
    if (!avail) return;
    c.avail = avail;
    delete c.el.dataset.fitted;
    const options = c.options;
    let s = prepare(c.spec, avail);
    if (c.result) c.result.finalize();
    c.result = await embed(c.el, s, options);
    for (let i = 0; i < 4; i++) {
      const w = drawnWidth(c.el);
      if (w <= avail + 1) break;
      s = shrink(s, w, avail);
      c.result.finalize();
      c.result = await embed(c.el, s, options);
    }
    c.drawn = drawnWidth(c.el);
    c.el.dataset.fitted = String(c.drawn <= avail + 1);
    return c.result;
  }

  // Draws one at a time per chart: a redraw asked for while one runs waits for it.
  function redraw(c) {
    c.queue = (c.queue || Promise.resolve()).then(function () { return draw(c); }).catch(function (e) { console.warn(e); });
    return c.queue;
  }
  const resized = new ResizeObserver(function (entries) {
    entries.forEach(function (entry) {
      const c = charts.find(function (x) { return x.el === entry.target; });
      if (!c || c.avail === undefined) return;
      const width = Math.floor(entry.target.getBoundingClientRect().width);
      // again when the chart no longer fits, or when the column has grown enough to show it larger
      if (width < c.drawn - 1 || width > c.avail + 40) redraw(c);
    });
  });

  window.vegaEmbed = function (el, spec, options) {
    if (typeof el === "string") el = document.querySelector(el);
    const c = {el: el, spec: spec, options: options || {}};
    charts.push(c);
    // the column's final width is known once the page (and its sidebars) has been parsed
    const start = document.readyState === "loading"
      ? new Promise(function (ok) { document.addEventListener("DOMContentLoaded", ok); }) : Promise.resolve();
    c.queue = start;
    return redraw(c).then(function (r) { resized.observe(el); return r; });
  };

  new MutationObserver(function () { charts.forEach(redraw); })
    .observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
})();
