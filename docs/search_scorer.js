// Search ranking (Sphinx's html_search_scorer; Sphinx puts this into language_data.js). Sphinx scores a section
// title by how much of it the query covers, so "Label smoothing (section 5.4)", the section that teaches the
// concept, ranked below a chart's "Label smoothing" and the API entries. A section whose title is the query,
// apart from a trailing "(section ...)" paper reference, comes first, and the one that cites the paper first of all.
var Scorer = {
  score: function (result) {
    const title = result[1], score = result[4], kind = result[6];
    const query = (new URLSearchParams(window.location.search).get("q") || "").toLowerCase().trim();
    const section = String(title).split(" > ").pop().toLowerCase().trim();
    const paper = /\s*\(sections?\s+[0-9][^)]*\)$/;
    if (kind === "title" && query && section.replace(paper, "") === query) {
      return score + (paper.test(section) ? 40 : 30);
    }
    return score;
  },
  // Sphinx's defaults
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: {0: 15, 1: 5, 2: -5},
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};
