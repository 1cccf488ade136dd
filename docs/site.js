// Reader-facing fixes loaded on every page of the site (see tests/test_docs_site.py).
(function () {
  "use strict";
  function ready(fn) {
    if (document.readyState !== "loading") fn(); else document.addEventListener("DOMContentLoaded", fn);
  }

  // 1. Menu and contents buttons. The theme binds its handlers to the first `.primary-toggle` and
  //    `.secondary-toggle` of the page, which are hidden copies in the top bar; every other copy (the visible
  //    ones in the article header) passes its click on to that first one.
  function forwardToggles(selector) {
    const all = Array.from(document.querySelectorAll(selector));
    all.slice(1).forEach(function (button) {
      button.addEventListener("click", function (event) {
        event.preventDefault();
        event.stopImmediatePropagation();
        all[0].click();
      }, true);
    });
  }

  // 2. A link chosen in the chapter list or the page contents (opened as a dialog on small screens)
  //    closes the dialog, so that the page scrolls to the section instead of staying behind it.
  function closeDialogsOnLink() {
    document.querySelectorAll("#pst-primary-sidebar-modal, #pst-secondary-sidebar-modal").forEach(function (dialog) {
      dialog.addEventListener("click", function (event) {
        const link = event.target.closest("a[href]");
        if (link && dialog.open) {
          dialog.close();
        }
      });
    });
  }

  // 3. Display equations and tables wider than their column scroll inside a box that says so.
  function markScrollers() {
    const boxes = document.querySelectorAll(".bd-article mjx-container[display='true'], .bd-article table");
    boxes.forEach(function (el) {
      let box = el.parentElement;
      if (!box.classList.contains("scroll-box")) {
        box = document.createElement("div");
        box.className = "scroll-box";
        el.parentNode.insertBefore(box, el);
        box.appendChild(el);
        el.addEventListener("scroll", function () {
          box.classList.toggle("at-end", el.scrollLeft + el.clientWidth >= el.scrollWidth - 2);
        }, {passive: true});
      }
      const wide = el.scrollWidth > el.clientWidth + 1;
      box.classList.toggle("scrolls-x", wide);
      box.classList.toggle("at-end", wide && el.scrollLeft + el.clientWidth >= el.scrollWidth - 2);
    });
  }

  // 4. Search results: a snippet shows words, not LaTeX source.
  function readableSnippets() {
    // searchtools.js declares `const Search`: a global binding, but not a property of window
    if (typeof Search === "undefined" || !Search.htmlToText || Search.htmlToText.patched) return;
    const original = Search.htmlToText;
    Search.htmlToText = function (html, anchor) {
      const doc = new DOMParser().parseFromString(html, "text/html");
      doc.querySelectorAll("div.math, .MathJax, mjx-container, .headerlink, script, style").forEach(function (e) { e.remove(); });
      doc.querySelectorAll("span.math").forEach(function (e) { e.textContent = plainMath(e.textContent); });
      return original.call(this, doc.documentElement.outerHTML, anchor);
    };
    Search.htmlToText.patched = true;
  }
  const SYMBOLS = {alpha: "α", beta: "β", epsilon: "ε", varepsilon: "ε", theta: "θ", lambda: "λ", sqrt: "√",
                   cdot: "·", times: "×", le: "≤", leq: "≤", ge: "≥", geq: "≥", infty: "∞", sum: "Σ", to: "→",
                   ldots: "…", dots: "…", approx: "≈", in: "∈", neq: "≠", top: "ᵀ"};
  function plainMath(tex) {
    return tex.replace(/^\\\(|\\\)$/g, "")
      .replace(/\\(?:mathrm|text|mathbf|operatorname|mathit)\s*/g, "")
      .replace(/\\([a-zA-Z]+)/g, function (m, name) { return SYMBOLS[name] || name; })
      .replace(/[{}]/g, "").replace(/\s+/g, " ").trim();
  }

  ready(function () {
    forwardToggles(".primary-toggle");
    forwardToggles(".secondary-toggle");
    closeDialogsOnLink();
    readableSnippets();
    markScrollers();
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(markScrollers);
    }
    let timer = null;
    window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(markScrollers, 150); });
  });
  window.markScrollers = markScrollers;
})();
