// The Web Worker that runs the model, so that the page stays responsive while it downloads and decodes.
//
// Messages in:  {type: "translate", id, text, beamSize, modelUrl}
// Messages out: {type: "status", id, text}             what is happening now
//               {type: "progress", id, loaded, total}  bytes of the weights downloaded
//               {type: "result", id, ...}              the translation and its attention
//               {type: "problem", id, text}            a message about the reader's input
//               {type: "error", id, text}              anything else that went wrong
//
// The model files are those of the package's `pretrained/multi30k-de-en/` folder, copied next to this
// file by the docs build. Each is checked against the SHA-256 that manifest.json records, and kept in
// the browser's Cache API under its hash: a later visit (or an offline one) reads them from there, and a
// new model (new hashes) is downloaded again.
import { SubwordTokenizer, Transformer, Translator, readSafetensors, sha256Hex, BOS, EOS, UNK } from "./transformer.js";

const CACHE = "annotated-transformer-live";
const MAX_TOKENS = 100;  // TranslationData.encoded keeps training pairs of at most 100 tokens a side: the model saw no longer ones

let loading = null;  // Promise of {tokenizer, translator (null until the weights are loaded)}
const state = { tokenizer: null, translator: null, manifest: null, base: null };

async function openCache() {
  try { return self.caches ? await caches.open(CACHE) : null; } catch { return null; }  // no Cache API: download each time
}

// manifest.json: from the site when it can be reached (it says which files are current), else from the cache.
async function fetchManifest(base) {
  const url = new URL("manifest.json", base).href, cache = await openCache();
  try {
    const response = await fetch(url, { cache: "no-cache" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const text = await response.text();
    if (cache) await cache.put(url, new Response(text));
    return JSON.parse(text);
  } catch (e) {
    const cached = cache && (await cache.match(url));
    if (cached) return JSON.parse(await cached.text());
    throw new Error(`cannot download the model's manifest.json (${e.message})`);
  }
}

// One model file as an ArrayBuffer whose SHA-256 is the manifest's: from the cache, else downloaded.
async function modelFile(name, onProgress) {
  const expected = state.manifest.files[name];
  if (!expected) throw new Error(`manifest.json lists no ${name}`);
  const key = new URL(`${name}?sha256=${expected}`, state.base).href, cache = await openCache();
  const cached = cache && (await cache.match(key));
  if (cached) {
    const buffer = await cached.arrayBuffer();
    if ((await sha256Hex(buffer)) === expected) return buffer;
    await cache.delete(key);  // damaged: download it again
  }
  const response = await fetch(new URL(name, state.base).href, { cache: "no-cache" });
  if (!response.ok) throw new Error(`cannot download ${name}: HTTP ${response.status}`);
  const total = Number(response.headers.get("Content-Length")) || 0, chunks = [];
  let loaded = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    loaded += value.length;
    if (onProgress) onProgress(loaded, total);
  }
  const bytes = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) { bytes.set(c, at); at += c.length; }
  const actual = await sha256Hex(bytes.buffer);
  if (actual !== expected) throw new Error(`${name} is not the file manifest.json describes (SHA-256 ${actual.slice(0, 12)}…, expected ${expected.slice(0, 12)}…)`);
  if (cache) {
    await cache.put(key, new Response(bytes.buffer.slice(0)));
    for (const request of await cache.keys()) {  // an earlier model's copy of this file is not needed any more
      const url = new URL(request.url);
      if (url.href !== key && url.pathname === new URL(key).pathname) await cache.delete(request);
    }
  }
  return bytes.buffer;
}

async function loadTokenizer(base) {
  state.base = base;
  state.manifest = await fetchManifest(base);
  const text = new TextDecoder().decode(await modelFile("tokenizer.json"));
  state.tokenizer = new SubwordTokenizer(JSON.parse(text));
}

async function loadModel(post) {
  const config = JSON.parse(new TextDecoder().decode(await modelFile("config.json"))).model;
  const weights = await modelFile("model.safetensors", (loaded, total) => post({ type: "progress", loaded, total }));
  post({ type: "status", text: "Reading the weights…" });
  state.translator = new Translator(new Transformer(config, readSafetensors(weights)), state.tokenizer);
}

// A message about the reader's text, or null when the model can take it.
function inputProblem(text, srcIds) {
  if (!text.trim()) return "Type a German sentence to translate.";
  const letters = Array.from(text.normalize("NFC")).filter((ch) => /\p{L}/u.test(ch));
  const unknown = letters.filter((ch) => !state.tokenizer.vocab.has(ch));
  if (letters.length && unknown.length * 2 > letters.length) {
    const shown = [...new Set(unknown)].slice(0, 8).join(" ");
    return `The model reads German written in the Latin alphabet; most letters of this text (${shown}) are not in its vocabulary.`;
  }
  if (srcIds.length > MAX_TOKENS) {
    return `This text is ${srcIds.length} tokens long (with <s> and </s>); the model was trained on sentences of at most ` +
           `${MAX_TOKENS} tokens. Shorten it, or translate it one sentence at a time.`;
  }
  return null;
}

async function translate({ id, text, beamSize, modelUrl }) {
  const post = (message) => self.postMessage({ id, ...message });
  if (!text.trim()) return post({ type: "problem", text: inputProblem(text, []) });
  if (!state.tokenizer) {
    post({ type: "status", text: "Loading the vocabulary…" });
    loading = loading || loadTokenizer(new URL(modelUrl, self.location.href).href);
    await loading;
  }
  const srcIds = [BOS, ...state.tokenizer.encode(text), EOS];  // as Translator.encode
  const problem = inputProblem(text, srcIds);
  if (problem) return post({ type: "problem", text: problem });
  if (!state.translator) {
    post({ type: "status", text: "Downloading the model's weights…" });
    await loadModel(post);
  }
  post({ type: "status", text: beamSize > 1 ? `Beam search with ${beamSize} beams…` : "Translating…" });
  const started = performance.now();
  const result = state.translator.translate(text, { beamSize });
  const ms = performance.now() - started;
  const unknown = srcIds.includes(UNK)  // the characters read as <unk>, to name them under the translation
    ? [...new Set(Array.from(text.normalize("NFC")).filter((ch) => !/\s/u.test(ch) && !state.tokenizer.vocab.has(ch)))] : [];
  const attention = state.translator.attention(result.srcIds, result.outIds);
  post({ type: "result", text: result.text, srcIds: result.srcIds, outIds: result.outIds, ms, unknown, ...attention,
         layers: state.translator.model.config.N, heads: state.translator.model.config.h });
}

self.onmessage = async (event) => {
  const message = event.data;
  try {
    if (message.type === "translate") await translate(message);
  } catch (e) {
    loading = state.tokenizer ? loading : null;  // a failed download may be tried again
    self.postMessage({ id: message.id, type: "error", text: String(e && e.message ? e.message : e) });
  }
};
