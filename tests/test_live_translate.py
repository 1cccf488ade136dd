"""The translator that runs in the page (docs/live/), in Debian's Chromium driven by Playwright, against the package:
the same token ids and text as `SubwordVocab`, the same greedy and beam translations as `Translator` on the CPU in
float32, the same attention weights as `capture_attention`; the page fetches no weights before the reader presses
Translate, keeps them for the next visit, and answers bad input with a message. A missing Chromium or site build is a
failure, never a skip."""
import json

import pytest
import torch

from annotated_transformer.fast import capture_attention
from annotated_transformer.data import BOS, EOS, load_multi30k
from annotated_transformer.decoding import Translator, beam_search, greedy_decode_cached, shipped_model_dir
from annotated_transformer.model import subsequent_mask
from annotated_transformer.subwords import readable_pieces

from conftest import SITE, opened, script

GREEDY_SENTENCES = 100  # test2016 sentences translated by both
GREEDY_TIE = 1e-3  # a differing greedy word is allowed only where the package's two candidates are this close in logit
SENTENCE = "Ein schwarzer Hund springt über einen Baumstamm."  # the box's sentence on the home page


@pytest.fixture(scope="module")
def translator():
    return Translator.from_checkpoint(shipped_model_dir(), device="cpu")  # float32 on the CPU


@pytest.fixture(scope="module")
def js(site_url, browser):
    "A page with transformer.js imported and the site's copy of the model loaded, as `window.live`."
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(site_url + "index.html", wait_until="networkidle")
    page.evaluate("""async (base) => {
        const T = await import(base + "_static/live/transformer.js");
        const get = async (name) => new TextDecoder().decode(await (await fetch(base + "_static/live/model/" + name)).arrayBuffer());
        const weights = await (await fetch(base + "_static/live/model/model.safetensors")).arrayBuffer();
        const tokenizer = new T.SubwordTokenizer(JSON.parse(await get("tokenizer.json")));
        const model = new T.Transformer(JSON.parse(await get("config.json")).model, T.readSafetensors(weights));
        window.live = { T, tokenizer, translator: new T.Translator(model, tokenizer) };
    }""", site_url)
    yield page
    assert not errors, errors
    page.close()


def test_token_ids_and_text_match_the_package(js, translator):
    "Every test2016 sentence (both languages) and some awkward strings get the ids `SubwordVocab` gives, and back the same text."
    vocab = translator.src_vocab
    pairs = load_multi30k("test")
    awkward = ["  leading and trailing  ", "a  b", "Hallo,Welt!!", "x<unk>y <s>z </s>", "Straße — „Anführung“ …",
               "Cafe\u0301 am Meer", "猫 ist da", "tab\there", "Zeile\nzwei", "", "   ", "C'est l'été.", "100% (ca. 5 €)"]
    texts = [de for de, _ in pairs] + [en for _, en in pairs] + awkward
    assert len(pairs) >= 1000
    got = js.evaluate("texts => texts.map(t => live.tokenizer.encode(t))", texts)
    expected = [vocab.encode_text(t) for t in texts]
    wrong = [(t, g, e) for t, g, e in zip(texts, got, expected) if g != e]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first: {wrong[:3]}"
    ids = [vocab.encode_text(en) for _, en in pairs[:300]] + [[BOS, 200, 300, EOS, 400], [2, 50, 2, 60]]
    decoded = js.evaluate("ids => ids.map(i => live.tokenizer.decode(i))", ids)
    assert decoded == [vocab.decode_text(i) for i in ids]
    pieces = [vocab.tokens_of(i) for i in ids[:50]]
    assert js.evaluate("p => p.map(x => live.T.readablePieces(x))", pieces) == [readable_pieces(p) for p in pieces]


def test_greedy_and_beam_translations_match_the_package(js, translator):
    """The first GREEDY_SENTENCES test2016 sentences, greedy: the same text as `Translator.translate(beam_size=1)`
    for all but at most 2; where one differs, the package's own logits for the two words must be within GREEDY_TIE."""
    german = [de for de, _ in load_multi30k("test")[:GREEDY_SENTENCES]]
    expected = translator.translate(german, beam_size=1)
    got = js.evaluate("s => s.map(x => { const r = live.translator.translate(x, {beamSize: 1}); return [r.text, r.outIds]; })", german)
    differ = [i for i, (text, _) in enumerate(got) if text != expected[i]]
    assert len(differ) <= 2, f"{len(differ)} translations differ: {[(german[i], got[i][0], expected[i]) for i in differ]}"
    model = translator.model
    for i in differ:  # a near-tie between two words: the package's logits at the first differing word
        src = torch.tensor([translator.encode(german[i])])
        mask = torch.ones(1, 1, src.size(1), dtype=torch.bool)
        py = greedy_decode_cached(model, src, mask, src.size(1) + 51, BOS, EOS, translator.banned)[0, 1:].tolist()
        js_ids = got[i][1] + [EOS]
        k = next(k for k, (a, b) in enumerate(zip(py, js_ids)) if a != b)
        tgt = torch.tensor([[BOS] + py[:k]])
        with torch.no_grad():
            logits = model.generator.proj(model.decode(model.encode(src, mask), mask, tgt, subsequent_mask(k + 1))[0, -1])
        gap = float(logits[py[k]] - logits[js_ids[k]])
        assert 0 <= gap < GREEDY_TIE, f"sentence {i}: word {k} differs with a logit gap of {gap} ({german[i]!r})"
    got = js.evaluate("s => s.map(x => live.translator.translate(x, {beamSize: 4}).text)", german[:5])
    assert got == translator.translate(german[:5], beam_size=4)  # beam search: the same text for the first five


def test_attention_matches_capture_attention(js, translator):
    "Every layer and head of the three kinds of attention, for one sentence and its translation, within 1e-3."
    src_ids = translator.encode(SENTENCE)
    out = js.evaluate("""s => { const r = live.translator.translate(s, {beamSize: 1}); const a = live.translator.attention(r.srcIds, r.outIds);
        const plain = w => w.map(layer => layer.map(head => head.map(row => Array.from(row))));
        return {outIds: r.outIds, srcTokens: a.srcTokens, tgtTokens: a.tgtTokens,
                weights: Object.fromEntries(Object.entries(a.weights).map(([k, w]) => [k, plain(w)]))}; }""", SENTENCE)
    model = translator.model
    src, tgt = torch.tensor([src_ids]), torch.tensor([[BOS] + out["outIds"]])
    with torch.no_grad(), capture_attention(model):
        model(src, tgt, torch.ones(1, 1, src.size(1), dtype=torch.bool), subsequent_mask(tgt.size(1)))
        expected = {"encoder": [l.self_attn.attn[0] for l in model.encoder.layers],
                    "decoder_self": [l.self_attn.attn[0] for l in model.decoder.layers],
                    "decoder_src": [l.src_attn.attn[0] for l in model.decoder.layers]}
    assert len(out["srcTokens"]) == src.size(1) and len(out["tgtTokens"]) == tgt.size(1)
    for kind, layers in expected.items():
        assert len(out["weights"][kind]) == len(layers)
        for n, want in enumerate(layers):  # (heads, queries, keys)
            heads = out["weights"][kind][n]
            got = torch.zeros_like(want)
            for h, rows in enumerate(heads):
                for q, row in enumerate(rows):  # decoder self-attention: only the visible keys; the rest are 0
                    got[h, q, :len(row)] = torch.tensor(row)
            assert (got - want).abs().max() < 1e-3, f"{kind} layer {n}: max difference {(got - want).abs().max()}"


def watch(page, requests):
    page.on("request", lambda r: requests.append(r.url))
    page.add_init_script("""new MutationObserver(() => {
        for (const s of document.querySelectorAll('.lt-status')) (window.statuses = window.statuses || []).push(s.textContent);
    }).observe(document, {subtree: true, childList: true, characterData: true});""")


def test_page_loads_no_weights_until_translate_then_keeps_them(site_url, browser, translator):
    context = browser.new_context()
    page = context.new_page()
    requests, problems = [], []
    watch(page, requests)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.goto(site_url + "index.html", wait_until="networkidle")
    box = page.locator(".live-translate")
    assert box.locator("textarea").input_value() == SENTENCE
    live = [u for u in requests if "/_static/live/" in u]  # the box itself: a small script and its style, nothing more
    assert sorted(u.rsplit("/", 1)[1] for u in live) == ["live.css", "live.js"], live
    assert sum((SITE / "_static" / "live" / name).stat().st_size for name in ("live.css", "live.js")) < 40_000
    box.locator(".lt-button").click()
    page.wait_for_selector(".lt-heatmap", timeout=120000)
    assert box.locator(".lt-output").inner_text() == translator.translate(SENTENCE, beam_size=1)
    assert any(u.endswith("/live/model/model.safetensors") for u in requests)
    assert any("Downloading" in s for s in page.evaluate("window.statuses")), "no download progress shown"
    assert any(w.url.endswith("/_static/live/worker.js") for w in page.workers), "the model does not run in a worker"
    # all heads of the last layer's encoder-decoder attention, each cell with the notebooks' tooltip
    config = translator.model.config
    assert box.locator(".lt-heatmap").count() == config.h
    box.locator(".lt-cell").nth(12).hover()
    tip = box.locator(".lt-tooltip")
    tip.wait_for(state="visible", timeout=5000)
    text = tip.inner_text()
    assert "query (target)" in text and "key (source)" in text and "weight" in text
    box.locator("select[aria-label=attention]").select_option("encoder")
    box.locator("select[aria-label=head]").select_option("3")
    assert box.locator(".lt-heatmap").count() == 1
    assert f"encoder layer {config.N - 1} head 3" in box.locator(".lt-heatmap").text_content()
    # the weights stay in the browser: another visit translates with the network gone
    page.close()
    page = context.new_page()
    page.goto(site_url + "26_pretrained.html", wait_until="networkidle")
    context.set_offline(True)
    box = page.locator(".live-translate")
    box.locator("textarea").fill(SENTENCE)
    box.locator(".lt-button").click()
    page.wait_for_selector(".lt-heatmap", timeout=120000)
    assert box.locator(".lt-output").inner_text() == translator.translate(SENTENCE, beam_size=1)
    context.set_offline(False)
    context.close()
    assert not problems, problems


def test_bad_input_gets_a_message_in_the_page(site_url, browser):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    requests = []
    watch(page, requests)
    page.goto(site_url + "index.html", wait_until="networkidle")
    box = page.locator(".live-translate")
    status = box.locator(".lt-status.lt-problem")
    cases = [("   ", "German"), ("猫が庭で寝ています。", "Latin"),
             (" ".join(["Ein Hund läuft schnell über die grüne Wiese."] * 12), "tokens")]
    for text, message in cases:
        box.locator("textarea").fill(text)
        box.locator(".lt-button").click()
        status.wait_for(state="visible", timeout=60000)
        assert message in status.inner_text(), (text, status.inner_text())
        assert box.locator(".lt-button").is_enabled()
        page.evaluate("document.querySelector('.lt-status').classList.remove('lt-problem')")
    assert not [u for u in requests if u.endswith("model.safetensors")], "weights downloaded for text the model cannot take"
    # a sentence it can take, on a phone: the page gets no wider than the screen
    box.locator("textarea").fill("Zwei Männer stehen vor einem roten Auto.")
    box.locator(".lt-button").click()
    page.wait_for_selector(".lt-heatmap", timeout=120000)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
    page.close()


def test_docs_build_refuses_a_model_that_does_not_match_its_manifest(tmp_path, monkeypatch, model_copy):
    build_docs, model = script("tools/build_docs.py"), model_copy
    monkeypatch.setattr(build_docs, "LIVE_MODEL", model)
    build_docs.live_translator(tmp_path / "ok")  # the shipped files pass
    assert json.loads((tmp_path / "ok" / "live" / "model" / "manifest.json").read_text()) == json.loads((model / "manifest.json").read_text())
    assert (tmp_path / "ok" / "live" / "transformer.js").exists()
    config = json.loads((model / "config.json").read_text())
    config["model"]["h"] = 4
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit, match="config.json"):
        build_docs.live_translator(tmp_path / "bad")


def test_weights_that_do_not_match_the_manifest_are_refused_in_the_page(site_url, browser):
    "A damaged download (one byte changed) is caught by the SHA-256 of manifest.json and named in the page."
    weights = bytearray((SITE / "_static" / "live" / "model" / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    with opened(browser) as page:
        page.route("**/live/model/model.safetensors", lambda route: route.fulfill(status=200, body=bytes(weights)))
        page.goto(site_url + "index.html", wait_until="networkidle")
        page.locator(".lt-button").click()
        status = page.locator(".lt-status.lt-problem")
        status.wait_for(state="visible", timeout=60000)
        assert "manifest.json" in status.inner_text()
        assert page.locator(".lt-heatmap").count() == 0 and page.locator(".lt-button").is_enabled()


def test_decoding_stops_at_the_length_limit_as_the_package(js, translator):
    "Limits shorter than the translation: greedy stops after max_len tokens and beam search ends every beam at its limit, as in Python."
    model, german = translator.model, load_multi30k("test")[0][0]
    src_ids = translator.encode(german)
    src = torch.tensor([src_ids])
    mask = torch.ones(1, 1, src.size(1), dtype=torch.bool)
    for max_len in (2, 3, 5):
        got = js.evaluate("([s, m]) => live.T.greedyDecode(live.translator.model, s, m, live.T.UNK)", [src_ids, max_len])
        assert got == greedy_decode_cached(model, src, mask, max_len, BOS, EOS, translator.banned)[0].tolist()
        assert len(got) == max_len and EOS not in got
    for limit in (1, 2, 4):  # output tokens allowed, </s> included: the limit is len(src) + max_extra
        max_extra = limit - len(src_ids)
        got = js.evaluate("([s, m]) => live.T.beamSearch(live.translator.model, s, {maxExtra: m, banned: live.T.UNK}).ids",
                          [src_ids, max_extra])
        expected = beam_search(model, src, mask, 4, 0.6, max_extra, banned=translator.banned)[0][0]
        assert got == expected and len(got) == limit - 1
