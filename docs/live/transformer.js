// The shipped German-to-English Transformer, run in the browser.
//
// This file computes what the Python package computes, from the text in to the text out:
//   the subword vocabulary (`subwords.py`)                  -> SubwordTokenizer
//   the checkpoint files (`checkpoint.py`)               -> readSafetensors, sha256Hex
//   the layers (`layers.py`)                             -> linear, layerNorm, feedForward, positionalEncoding
//   attention (`attention.py`)                           -> attention, MultiHeadAttention
//   the model (`model.py`)                               -> Transformer (encoder, decoder, generator)
//   decoding (`decoding.py`)                             -> greedyDecode, beamSearch, Translator
//   the attention pictures (`viz.py`)                    -> Transformer.attentionWeights, readablePieces
//
// Plain JavaScript, no library: a Float32Array holds a matrix row by row, and every matrix product
// is written out as loops. An inference runtime (ONNX Runtime Web, TensorFlow.js) would need a graph
// exported from PyTorch and a download of its own, and would hide the chapters inside it; this model
// is small enough for loops a reader can follow (their speed is measured by
// benchmarks/live_translate.py and shown under the translation box). Sums are taken in double
// precision and stored in float32, so the numbers agree with PyTorch's float32 to about 1e-6, and
// greedy outputs are the same token for token unless two candidate words are about that close.
// The module has no DOM code: it runs in a Web Worker (worker.js) and in Node.

export const SPECIALS = ["<s>", "</s>", "<blank>", "<unk>"];  // ids 0-3, as in `data.py`
export const BOS = 0, EOS = 1, PAD = 2, UNK = 3;

// ---------------------------------------------------------------------------------------------
// Subwords (subwords.py): one byte-pair-encoding vocabulary for both languages.
// `tokenizer.json` is the Hugging Face `tokenizers` file the package saves. Its pipeline:
// special tokens are cut out of the raw text first, each remaining piece is NFC-normalized,
// spaces become "▁" (and every piece gets a leading "▁"), the text is split before each "▁" and
// around each punctuation character, and each of those words is split into characters that the
// BPE merges glue back together, lowest merge rank first.
// ---------------------------------------------------------------------------------------------

const META = "\u2581";  // "▁", the word-start marker
// Python's str.strip() removes these (str.isspace); JavaScript's trim() knows a slightly different set
const PY_SPACE = "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "g");
// `tokenizers` isolates a character that is ASCII punctuation or in a Unicode punctuation category (P*)
const PUNCTUATION = /[!-\/:-@\[-`{-~]|\p{P}/u;

export class SubwordTokenizer {
  constructor(spec) {  // the parsed tokenizer.json
    const model = spec.model;
    if (model.type !== "BPE") throw new Error(`tokenizer.json: expected a BPE model, got ${model.type}`);
    this.vocab = new Map(Object.entries(model.vocab));  // piece -> id
    for (const t of spec.added_tokens) this.vocab.set(t.content, t.id);
    this.pieceOf = [];  // id -> piece
    for (const [piece, id] of this.vocab) this.pieceOf[id] = piece;
    this.special = spec.added_tokens.map((t) => t.content);
    this.unk = this.vocab.get(model.unk_token);
    this.ranks = new Map();  // "left right" -> rank of that merge (lower = learnt earlier = applied first)
    model.merges.forEach((m, rank) => this.ranks.set(Array.isArray(m) ? m.join(" ") : m, rank));
    SPECIALS.forEach((s, i) => {
      if (this.pieceOf[i] !== s) throw new Error(`tokenizer.json: token ${i} should be ${s}, is ${this.pieceOf[i]}`);
    });
  }

  get size() { return this.pieceOf.length; }

  // The words of one piece of text between special tokens: "▁Ein", "▁Hund", "." ...
  preTokenize(text) {
    text = text.normalize("NFC").replaceAll(" ", META);
    if (!text.startsWith(META)) text = META + text;  // prepend_scheme "always"
    const words = [];
    for (const chunk of text.split(new RegExp(`(?=${META})`, "u"))) {  // "▁" starts a new word
      let word = "";
      for (const ch of chunk) {  // code points, as Rust's chars
        if (PUNCTUATION.test(ch)) {  // punctuation stands alone
          if (word) words.push(word);
          words.push(ch);
          word = "";
        } else word += ch;
      }
      if (word) words.push(word);
    }
    return words;
  }

  // Byte-pair encoding of one word: start from characters, merge the adjacent pair of lowest rank until none is left.
  bpe(word) {
    let parts = Array.from(word);
    for (;;) {
      let best = -1, bestRank = Infinity;
      for (let i = 0; i + 1 < parts.length; i++) {
        const rank = this.ranks.get(parts[i] + " " + parts[i + 1]);
        if (rank !== undefined && rank < bestRank) { best = i; bestRank = rank; }
      }
      if (best < 0) break;
      parts.splice(best, 2, parts[best] + parts[best + 1]);
    }
    return parts.map((p) => this.vocab.get(p) ?? this.unk);  // a character never seen in training is <unk>
  }

  // SubwordVocab.encode_text: ids of a raw sentence, no <s>/</s>.
  encode(text) {
    text = text.replace(STRIP, "");
    const ids = [];
    let start = 0;
    while (start < text.length) {  // cut out special tokens written in the text (leftmost, then longest)
      let at = -1, found = null;
      for (const s of this.special) {
        const i = text.indexOf(s, start);
        if (i >= 0 && (at < 0 || i < at || (i === at && s.length > found.length))) { at = i; found = s; }
      }
      const end = at < 0 ? text.length : at;
      if (end > start) for (const word of this.preTokenize(text.slice(start, end))) ids.push(...this.bpe(word));
      if (at < 0) break;
      ids.push(this.vocab.get(found));
      start = at + found.length;
    }
    return ids;
  }

  // `data.kept_ids`: up to the first </s>, without <s> and <blank>.
  keptIds(ids) {
    const out = [];
    for (const i of ids) {
      if (i === EOS) break;
      if (i !== BOS && i !== PAD) out.push(i);
    }
    return out;
  }

  tokensOf(ids) { return this.keptIds(ids).map((i) => this.pieceOf[i]); }

  // SubwordVocab.decode_text: pieces joined, "▁" back to spaces (the first piece's "▁" dropped).
  decode(ids) {
    return this.tokensOf(ids).map((p, i) => p.replaceAll(META, i === 0 ? "" : " ")).join("");
  }
}

// `subwords.readable_pieces`: "▁dog" -> "dog", a continuation "er" -> "##er", a lone "▁" -> "␣".
export function readablePieces(pieces) {
  return pieces.map((p) => {
    if (p === META) return "\u2423";
    if (p.startsWith(META)) return p.slice(1);
    if (/^[\p{L}\p{N}]/u.test(p)) return "##" + p;  // Python's str.isalnum on the first character
    return p;
  });
}

// ---------------------------------------------------------------------------------------------
// Checkpoints (checkpoint.py): the checkpoint. model.safetensors is an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}}, then the raw little-endian numbers. The shipped
// weights are float16; like `load_model`, we compute in float32.
// ---------------------------------------------------------------------------------------------

let HALF = null;  // all 65536 float16 values as float32, built once
function halfTable() {
  if (HALF) return HALF;
  HALF = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    HALF[h] = exp === 0 ? sign * frac * 2 ** -24  // subnormal
      : exp === 31 ? (frac ? NaN : sign * Infinity)
      : sign * (1 + frac / 1024) * 2 ** (exp - 15);
  }
  return HALF;
}

export function readSafetensors(buffer) {  // ArrayBuffer -> {name: {shape, data: Float32Array}}
  const view = new DataView(buffer);
  if (buffer.byteLength < 8) throw new Error("model.safetensors is too short to be a safetensors file");
  const headerLength = Number(view.getBigUint64(0, true));
  if (8 + headerLength > buffer.byteLength) throw new Error("model.safetensors: the header runs past the end of the file");
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 8, headerLength)));
  const base = 8 + headerLength, tensors = {};
  for (const [name, info] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [begin, end] = info.data_offsets, count = info.shape.reduce((a, b) => a * b, 1);
    const data = new Float32Array(count);
    if (info.dtype === "F16") {
      const table = halfTable(), raw = new DataView(buffer, base + begin, end - begin);
      for (let i = 0; i < count; i++) data[i] = table[raw.getUint16(2 * i, true)];
    } else if (info.dtype === "F32") {
      const raw = new DataView(buffer, base + begin, end - begin);
      for (let i = 0; i < count; i++) data[i] = raw.getFloat32(4 * i, true);
    } else throw new Error(`model.safetensors: tensor ${name} has dtype ${info.dtype}; expected F16 or F32`);
    tensors[name] = { shape: info.shape, data };
  }
  return tensors;
}

// The SHA-256 that `checkpoint.sha256_of` writes into manifest.json, as hex.
export async function sha256Hex(buffer) {
  const digest = await crypto.subtle.digest("SHA-256", buffer);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

// ---------------------------------------------------------------------------------------------
// Building blocks (layers.py): the layers. A "matrix" is {rows, cols, data} with data a Float32Array, row by row.
// ---------------------------------------------------------------------------------------------

function matrix(rows, cols) { return { rows, cols, data: new Float32Array(rows * cols) }; }

// nn.Linear: y = x W^T + b, W of shape (out, in) as PyTorch stores it.
export function linear(x, W, b) {
  const [out, inp] = W.shape, y = matrix(x.rows, out), w = W.data, bias = b.data, xd = x.data, yd = y.data;
  for (let r = 0; r < x.rows; r++) {
    const xo = r * inp;
    for (let j = 0; j < out; j++) {
      const wo = j * inp;
      let s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // four running sums: the loop is the whole cost of the model
      let k = 0;
      for (; k + 3 < inp; k += 4) {
        s0 += xd[xo + k] * w[wo + k];
        s1 += xd[xo + k + 1] * w[wo + k + 1];
        s2 += xd[xo + k + 2] * w[wo + k + 2];
        s3 += xd[xo + k + 3] * w[wo + k + 3];
      }
      for (; k < inp; k++) s0 += xd[xo + k] * w[wo + k];
      yd[r * out + j] = s0 + s1 + s2 + s3 + bias[j];
    }
  }
  return y;
}

// Section 3.1's layer normalization as the package writes it: a * (x - mean) / (std + eps) + b,
// with the UNBIASED standard deviation (divide by n - 1) and eps added to the std, not the variance.
export function layerNorm(x, a, b, eps = 1e-6) {
  const n = x.cols, y = matrix(x.rows, n);
  for (let r = 0; r < x.rows; r++) {
    let mean = 0;
    for (let k = 0; k < n; k++) mean += x.data[r * n + k];
    mean /= n;
    let sq = 0;
    for (let k = 0; k < n; k++) sq += (x.data[r * n + k] - mean) ** 2;
    const std = Math.fround(Math.sqrt(sq / (n - 1)));
    for (let k = 0; k < n; k++) y.data[r * n + k] = a.data[k] * Math.fround(x.data[r * n + k] - mean) / (std + eps) + b.data[k];
  }
  return y;
}

function add(x, y) {  // the residual connection's x + sublayer(x)
  const z = matrix(x.rows, x.cols);
  for (let i = 0; i < z.data.length; i++) z.data[i] = x.data[i] + y.data[i];
  return z;
}

// Equation 2: FFN(x) = max(0, x W1 + b1) W2 + b2, on every position separately.
export function feedForward(x, p) {
  const h = linear(x, p.w1, p.b1);
  for (let i = 0; i < h.data.length; i++) if (h.data[i] < 0) h.data[i] = 0;
  return linear(h, p.w2, p.b2);
}

// Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), in double, stored in float32.
export function positionalEncoding(position, d) {
  const pe = new Float32Array(d);
  for (let i = 0; i < d; i += 2) {
    const omega = Math.exp(i * -(Math.log(10000) / d));
    pe[i] = Math.sin(position * omega);
    pe[i + 1] = Math.cos(position * omega);
  }
  return pe;
}

// ---------------------------------------------------------------------------------------------
// Attention (attention.py): attention.
// ---------------------------------------------------------------------------------------------

// Equation 1 for ONE head and ONE query: softmax(q K^T / sqrt(d_k)) V. `q` and `out` are d_model wide,
// `keys` and `values` are lists of d_model-wide rows; this head reads and writes columns
// [offset, offset + dk) of each. A key that may not be attended to (a future position) is simply
// left out of the lists: the package's score of -1e9 gives it a weight of exactly 0 as well.
// Returns the weights over the keys (they sum to 1).
export function attention(q, keys, values, offset, dk, out) {
  const scale = Math.sqrt(dk), scores = new Float64Array(keys.length);
  let max = -Infinity;
  for (let j = 0; j < keys.length; j++) {
    let s = 0;
    for (let k = offset; k < offset + dk; k++) s += q[k] * keys[j][k];
    scores[j] = s / scale;
    if (scores[j] > max) max = scores[j];
  }
  let total = 0;  // softmax over the keys, shifted by the largest score so that exp cannot overflow
  for (let j = 0; j < keys.length; j++) total += (scores[j] = Math.exp(scores[j] - max));
  const weights = new Float32Array(keys.length);
  for (let j = 0; j < keys.length; j++) weights[j] = scores[j] / total;
  for (let k = offset; k < offset + dk; k++) {  // the weighted average of the values
    let s = 0;
    for (let j = 0; j < keys.length; j++) s += weights[j] * values[j][k];
    out[k] = s;
  }
  return weights;
}

function rowsOf(x) {  // a matrix as a list of row views (no copy)
  return Array.from({ length: x.rows }, (_, r) => x.data.subarray(r * x.cols, (r + 1) * x.cols));
}

// Section 3.2.2: multi-head attention. W^Q, W^K, W^V project, h heads attend in parallel on d_k
// columns each, their outputs side by side go through W^O.
export class MultiHeadAttention {
  constructor(p, h) { this.p = p; this.h = h; }  // p: the four linears (q, k, v, o) of one attention block

  projectKeys(x) { return rowsOf(linear(x, this.p.k.w, this.p.k.b)); }
  projectValues(x) { return rowsOf(linear(x, this.p.v.w, this.p.v.b)); }

  // queries: (n, d_model); keys/values: projected rows; visible(i): how many keys query i may see.
  // Returns the output (n, d_model) and the weights [head][query] -> Float32Array over the visible keys.
  attend(queries, keys, values, visible = () => keys.length) {
    const q = linear(queries, this.p.q.w, this.p.q.b), d = q.cols, dk = d / this.h;
    const heads = matrix(q.rows, d), weights = Array.from({ length: this.h }, () => []);
    for (let i = 0; i < q.rows; i++) {
      const n = visible(i), qi = q.data.subarray(i * d, (i + 1) * d), oi = heads.data.subarray(i * d, (i + 1) * d);
      const k = n === keys.length ? keys : keys.slice(0, n), v = n === values.length ? values : values.slice(0, n);
      for (let head = 0; head < this.h; head++) {
        weights[head].push(attention(qi, k, v, head * dk, dk, oi));
      }
    }
    return { out: linear(heads, this.p.o.w, this.p.o.b), weights };
  }

  forward(x, memory = x, visible) {  // self-attention when memory is x
    return this.attend(x, this.projectKeys(memory), this.projectValues(memory), visible);
  }
}

// ---------------------------------------------------------------------------------------------
// The model (model.py): the model.
// ---------------------------------------------------------------------------------------------

export class Transformer {
  constructor(config, tensors) {  // config: the "model" object of config.json; tensors: readSafetensors(...)
    const c = (this.config = config);
    const t = (name) => {
      if (!tensors[name]) throw new Error(`model.safetensors has no tensor ${name}`);
      return tensors[name];
    };
    const lin = (prefix) => ({ w: t(prefix + ".weight"), b: t(prefix + ".bias") });
    const attn = (prefix) => new MultiHeadAttention(
      { q: lin(prefix + ".linears.0"), k: lin(prefix + ".linears.1"), v: lin(prefix + ".linears.2"), o: lin(prefix + ".linears.3") }, c.h);
    const norm = (prefix) => ({ a: t(prefix + ".a_2"), b: t(prefix + ".b_2") });
    const ff = (prefix) => ({ w1: t(prefix + ".w_1.weight"), b1: t(prefix + ".w_1.bias"), w2: t(prefix + ".w_2.weight"), b2: t(prefix + ".w_2.bias") });
    this.encoderLayers = Array.from({ length: c.N }, (_, i) => {
      const p = `encoder.layers.${i}`;
      return { selfAttn: attn(p + ".self_attn"), ff: ff(p + ".feed_forward"), norms: [0, 1].map((j) => norm(`${p}.sublayer.${j}.norm`)) };
    });
    this.decoderLayers = Array.from({ length: c.N }, (_, i) => {
      const p = `decoder.layers.${i}`;
      return { selfAttn: attn(p + ".self_attn"), srcAttn: attn(p + ".src_attn"), ff: ff(p + ".feed_forward"),
               norms: [0, 1, 2].map((j) => norm(`${p}.sublayer.${j}.norm`)) };
    });
    this.encoderNorm = c.pre_norm ? norm("encoder.norm") : null;  // pre-norm stacks end with a LayerNorm
    this.decoderNorm = c.pre_norm ? norm("decoder.norm") : null;
    // Section 3.4: with tie_embeddings one (vocab, d_model) matrix is the source embedding, the target
    // embedding and the output projection; the checkpoint stores it once, as src_embed.
    this.srcEmbed = t("src_embed.0.lut.weight");
    if (this.srcEmbed.shape[0] !== c.src_vocab || this.srcEmbed.shape[1] !== c.d_model) {
      throw new Error(`model.safetensors does not fit config.json: embeddings of shape ${this.srcEmbed.shape}, ` +
                      `expected ${c.src_vocab},${c.d_model}`);
    }
    this.tgtEmbed = c.tie_embeddings ? this.srcEmbed : t("tgt_embed.0.lut.weight");
    this.proj = { w: c.tie_embeddings ? this.srcEmbed : t("generator.proj.weight"), b: t("generator.proj.bias") };
  }

  // SublayerConnection: pre-norm x + f(norm(x)), or the paper's post-norm norm(x + f(x)). No dropout at inference.
  sublayer(x, norm, f) {
    if (this.config.pre_norm) return add(x, f(layerNorm(x, norm.a, norm.b)));
    const y = add(x, f(x));
    return layerNorm(y, norm.a, norm.b);
  }

  // Embeddings * sqrt(d_model) + positional encoding, for ids at positions start, start+1, ...
  embed(table, ids, start = 0) {
    const d = this.config.d_model, x = matrix(ids.length, d), scale = Math.sqrt(d);
    ids.forEach((id, r) => {
      if (!(id >= 0 && id < table.shape[0])) throw new Error(`token id ${id} is outside the vocabulary of ${table.shape[0]} tokens`);
      const pe = positionalEncoding(start + r, d);
      for (let k = 0; k < d; k++) x.data[r * d + k] = Math.fround(table.data[id * d + k] * scale) + pe[k];
    });
    return x;
  }

  // The encoder (section 3.1): N x (self-attention, feed-forward), then the final norm.
  // Returns the memory (src_len, d_model) and, per layer, the self-attention weights [head][query][key].
  encode(srcIds) {
    let x = this.embed(this.srcEmbed, srcIds);
    const attn = [];
    for (const layer of this.encoderLayers) {
      x = this.sublayer(x, layer.norms[0], (y) => {
        const { out, weights } = layer.selfAttn.forward(y);
        attn.push(weights);
        return out;
      });
      x = this.sublayer(x, layer.norms[1], (y) => feedForward(y, layer.ff));
    }
    return { memory: this.encoderNorm ? layerNorm(x, this.encoderNorm.a, this.encoderNorm.b) : x, attn };
  }

  // The decoder run over a whole target prefix at once (teacher forcing), as `EncoderDecoder.decode`
  // with the causal mask of `subsequent_mask`: query i sees keys 0..i. Returns the states and the weights.
  decodeAll(memory, tgtIds) {
    let x = this.embed(this.tgtEmbed, tgtIds);
    const self = [], src = [];
    for (const layer of this.decoderLayers) {
      x = this.sublayer(x, layer.norms[0], (y) => {
        const r = layer.selfAttn.forward(y, y, (i) => i + 1);
        self.push(r.weights);
        return r.out;
      });
      x = this.sublayer(x, layer.norms[1], (y) => {
        const r = layer.srcAttn.forward(y, memory);
        src.push(r.weights);
        return r.out;
      });
      x = this.sublayer(x, layer.norms[2], (y) => feedForward(y, layer.ff));
    }
    return { states: this.decoderNorm ? layerNorm(x, this.decoderNorm.a, this.decoderNorm.b) : x, self, src };
  }

  // `viz.attention_weights`: every layer and head for one sentence pair (tgt = decoder input <s> w1 ... wn).
  attentionWeights(srcIds, tgtIds) {
    const { memory, attn } = this.encode(srcIds);
    const { self, src } = this.decodeAll(memory, tgtIds);
    return { encoder: attn, decoder_self: self, decoder_src: src };  // [layer][head][query] -> weights over keys
  }

  // ---- Decoding (decoding.py): incremental decoding with a key/value cache ----
  // `init_cache`: the source keys and values of every decoder layer are projected once from the memory.
  initCache(memory) {
    return this.decoderLayers.map((layer) => ({
      srcK: layer.srcAttn.projectKeys(memory), srcV: layer.srcAttn.projectValues(memory), selfK: [], selfV: [],
    }));
  }

  // `decode_step`: run the decoder for ONE new position, reusing the keys/values of the earlier ones.
  // The cache is extended in place; returns the decoder's output (1, d_model) for that position.
  decodeStep(token, position, cache) {
    let x = this.embed(this.tgtEmbed, [token], position);
    this.decoderLayers.forEach((layer, i) => {
      const c = cache[i];
      x = this.sublayer(x, layer.norms[0], (y) => {
        c.selfK.push(...layer.selfAttn.projectKeys(y));  // the newest position's key and value join the cache
        c.selfV.push(...layer.selfAttn.projectValues(y));
        return layer.selfAttn.attend(y, c.selfK, c.selfV).out;  // no mask: every cached position is in the past
      });
      x = this.sublayer(x, layer.norms[1], (y) => layer.srcAttn.attend(y, c.srcK, c.srcV).out);
      x = this.sublayer(x, layer.norms[2], (y) => feedForward(y, layer.ff));
    });
    return this.decoderNorm ? layerNorm(x, this.decoderNorm.a, this.decoderNorm.b) : x;
  }

  // The generator's linear layer: scores over the target vocabulary (before log-softmax).
  logits(state) { return linear(state, this.proj.w, this.proj.b).data; }
}

// A cache copied for another beam: the lists are new, the rows (never changed once written) are shared.
function copyCache(cache) {
  return cache.map((c) => ({ srcK: c.srcK, srcV: c.srcV, selfK: c.selfK.slice(), selfV: c.selfV.slice() }));
}

function logSoftmax(logits) {
  let max = -Infinity;
  for (const v of logits) if (v > max) max = v;
  let total = 0;
  for (const v of logits) total += Math.exp(v - max);
  const lse = max + Math.log(total), out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = Math.fround(logits[i] - lse);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding (decoding.py): decoding.
// ---------------------------------------------------------------------------------------------

// `greedy_decode_cached` for one sentence: at each step the single most likely word (never `banned`),
// until </s> or maxLen tokens (the start symbol included). Returns <s> w1 ... (</s>).
export function greedyDecode(model, srcIds, maxLen, banned = null, onToken = null) {
  const { memory } = model.encode(srcIds);
  const cache = model.initCache(memory), ys = [BOS];
  for (let position = 0; position < maxLen - 1; position++) {
    const logits = model.logits(model.decodeStep(ys[ys.length - 1], position, cache));
    if (banned !== null) logits[banned] = -Infinity;
    let next = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i] > logits[next]) next = i;  // first maximum, as torch.argmax
    ys.push(next);
    if (onToken) onToken(ys);
    if (next === EOS) break;
  }
  return ys;
}

// Wu et al. (2016): ((5 + length) / 6) ** alpha, length counting </s>.
export function lengthPenalty(length, alpha) { return ((5 + length) / 6) ** alpha; }

// `beam_search` for one sentence: keep the K best prefixes by summed log-probability divided by
// the length penalty; a finished beam only repeats </s> at no cost; a beam at its length limit
// (source length + maxExtra) must end. Returns the best output ids (no <s>, no </s>) and its score.
export function beamSearch(model, srcIds, { beamSize = 4, alpha = 0.6, maxExtra = 50, banned = null } = {}) {
  const K = beamSize, limit = srcIds.length + maxExtra;
  const { memory } = model.encode(srcIds);
  const first = model.initCache(memory);
  let beams = Array.from({ length: K }, (_, k) => ({
    tokens: [BOS], score: k === 0 ? 0 : -Infinity, length: 0, finished: false, cache: k === 0 ? first : copyCache(first),
  }));
  for (let position = 0; position < limit; position++) {
    const top = [];  // the K best continuations so far, best first
    const consider = (c) => {  // an earlier candidate (row by row, word by word) wins a tie, as topk on the flat index
      if (top.length === K && !(c.ranked > top[K - 1].ranked)) return;
      let at = top.length;
      while (at > 0 && c.ranked > top[at - 1].ranked) at--;
      top.splice(at, 0, c);
      if (top.length > K) top.pop();
    };
    for (const [row, beam] of beams.entries()) {
      const logp = logSoftmax(model.logits(model.decodeStep(beam.tokens[beam.tokens.length - 1], position, beam.cache)));
      if (banned !== null) logp[banned] = -Infinity;
      const forcedEnd = beam.finished || beam.length + 1 >= limit;  // an ended beam, or one at its length limit
      const newLength = beam.length + (beam.finished ? 0 : 1), penalty = lengthPenalty(newLength, alpha);
      for (let word = 0; word < logp.length; word++) {
        let lp = logp[word];
        if (forcedEnd) lp = word !== EOS ? -Infinity : beam.finished ? 0 : logp[EOS];
        const total = beam.score + lp, ranked = total / penalty;
        if (top.length < K || ranked > top[K - 1].ranked) consider({ row, word, total, ranked, newLength });
      }
    }
    const used = new Set();
    beams = top.map(({ row, word, total, newLength }) => {
      const old = beams[row], cache = used.has(row) ? copyCache(old.cache) : old.cache;
      used.add(row);
      return { tokens: [...old.tokens, word], score: total, length: newLength, finished: old.finished || word === EOS, cache };
    });
    if (beams.every((b) => b.finished)) break;
  }
  let best = 0;
  const finalScores = beams.map((b) => b.score / lengthPenalty(b.length, alpha));
  finalScores.forEach((s, k) => { if (s > finalScores[best]) best = k; });
  const seq = beams[best].tokens.slice(1), end = seq.indexOf(EOS);
  return { ids: end >= 0 ? seq.slice(0, end) : seq, score: finalScores[best] };
}

// `Translator`: raw German text -> English text, with the same limits and the same banned <unk>.
export class Translator {
  constructor(model, tokenizer) {
    this.model = model;
    this.tokenizer = tokenizer;
    this.banned = UNK;  // a subword vocabulary can spell any word: <unk> is never written
  }

  encode(sentence) { return [BOS, ...this.tokenizer.encode(sentence), EOS]; }

  // `Translator.too_long`: the source and up to maxExtra output tokens must fit the model's max_len positions.
  tooLong(srcIds, maxExtra = 50) { return srcIds.length + maxExtra > this.model.config.max_len; }

  // One sentence: the English text, the ids on both sides and the attention of every layer and head.
  translate(sentence, { beamSize = 1, alpha = 0.6, maxExtra = 50 } = {}) {
    if (!sentence.replace(STRIP, "")) return { text: "", srcIds: [], outIds: [] };
    const srcIds = this.encode(sentence);
    if (this.tooLong(srcIds, maxExtra)) {
      throw new Error(`the sentence has ${srcIds.length} tokens: with up to ${maxExtra} output tokens more it exceeds ` +
                      `the model's max_len=${this.model.config.max_len}`);
    }
    let outIds;
    if (beamSize === 1) {
      outIds = this.tokenizer.keptIds(greedyDecode(this.model, srcIds, srcIds.length + maxExtra + 1, this.banned).slice(1));
    } else {
      outIds = beamSearch(this.model, srcIds, { beamSize, alpha, maxExtra, banned: this.banned }).ids;
    }
    return { text: this.tokenizer.decode(outIds), srcIds, outIds };
  }

  // The attention pictures of the trained model's page: source <s> pieces </s> against decoder input <s> w1 ... wn.
  attention(srcIds, outIds) {
    const tgtIds = [BOS, ...outIds];
    return {
      srcTokens: ["<s>", ...readablePieces(this.tokenizer.tokensOf(srcIds)), "</s>"],
      tgtTokens: ["<s>", ...readablePieces(this.tokenizer.tokensOf(tgtIds))],
      weights: this.model.attentionWeights(srcIds, tgtIds),
    };
  }
}
