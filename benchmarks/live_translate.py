"""Speed of the translator that runs in the documentation site (docs/live/), in headless Chromium.

The files the docs build puts in `_static/live/` (the scripts and the shipped model, checked against its
manifest) are served on 127.0.0.1, and a page drives the real Web Worker (worker.js) with messages, as the
translation box does. Measured:

* model load: from the first message to the first result, less that sentence's own time: the vocabulary,
  the weights (downloaded from 127.0.0.1, SHA-256 checked, float16 -> float32), once with an empty cache and once
  from the Cache API (a later visit);
* time per sentence, from message to result (decoding plus the attention maps of every layer and head), over the
  first --sentences test2016 sentences greedy and the first --beam-sentences with beam search (4 beams).

Writes benchmarks/results_live.json (atomically); the docs build renders it under the translation box.

Usage: python benchmarks/live_translate.py [--sentences 100] [--beam-sentences 20]
"""
import argparse
import functools
import http.server
import importlib.util
import json
import os
import platform
import statistics
import tempfile
import threading
from pathlib import Path

from annotated_transformer.data import load_multi30k

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results_live.json"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>benchmark</title></head><body><script>
window.ask = (message) => new Promise((resolve) => {
  const started = performance.now();
  window.worker.onmessage = (e) => {
    if (["result", "problem", "error"].includes(e.data.type)) resolve({...e.data, wall: performance.now() - started});
  };
  window.worker.postMessage(message);
});
window.worker = new Worker("_static/live/worker.js", {type: "module"});
</script></body></html>"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def summary(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {"sentences": len(ms), "mean_ms": round(statistics.mean(ms), 1), "median_ms": round(statistics.median(ms), 1),
            "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1), "max_ms": round(ms[-1], 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=100, help="test2016 sentences translated greedily")
    ap.add_argument("--beam-sentences", type=int, default=20, help="test2016 sentences translated with beam search")
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("build_docs", ROOT / "tools" / "build_docs.py")
    build_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_docs)
    german = [de for de, _ in load_multi30k("test")]
    load_before = os.getloadavg()[0]
    from playwright.sync_api import sync_playwright
    with tempfile.TemporaryDirectory() as d:
        site = Path(d)
        build_docs.live_translator(site / "_static")
        (site / "bench.html").write_text(PAGE)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/bench.html"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
            context = browser.new_context()
            loads = []
            for visit in ("empty cache", "Cache API"):
                page = context.new_page()
                page.goto(url)
                first = page.evaluate("m => ask(m)", {"type": "translate", "id": 1, "text": german[0], "beamSize": 1,
                                                      "modelUrl": "model/"})
                assert first["type"] == "result", first
                loads.append((first["wall"] - first["ms"]) / 1000)
                if visit == "Cache API":
                    break
                page.close()
            hardware = page.evaluate("navigator.hardwareConcurrency")
            times = {}
            for name, beam, n in (("greedy", 1, args.sentences), ("beam4", 4, args.beam_sentences)):
                walls = []
                for i, text in enumerate(german[:n]):
                    r = page.evaluate("m => ask(m)", {"type": "translate", "id": i + 2, "text": text, "beamSize": beam,
                                                      "modelUrl": "model/"})
                    assert r["type"] == "result", r
                    walls.append(r["wall"])
                times[name] = summary(walls)
                print(name, times[name], flush=True)
            version = browser.version
            browser.close()
        server.shutdown()
    weights = (build_docs.LIVE_MODEL / "model.safetensors").stat().st_size
    results = {"browser": f"headless Chromium {version}", "cpu_cores": os.cpu_count(), "hardware_concurrency": hardware,
               "machine": platform.machine(), "weights_mb": round(weights / 1e6, 1),
               "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],  # 1-minute, before and after: other work on the machine
               "load_s": {"empty_cache": round(loads[0], 2), "cache_api": round(loads[1], 2)}, **times}
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, RESULTS)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
