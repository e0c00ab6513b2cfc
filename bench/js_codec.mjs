// The JS package's codec against plain MessagePack: @alicia/reasoning's decodeEnvelope /
// encodeEnvelope (validated, tolerant, typed) vs @msgpack/msgpack's plain `decode` /
// `encode` of the same envelopes (no validation), in one Node process.
//
// Run: node bench/js_codec.mjs [--n 1000] [--rounds 15]   (about 10 s; a smoke run uses
// --n 50 --rounds 2). Needs the package built (scripts/setup, or npm run build).
//
// The corpus is `n` ReasoningStep envelopes as the worker sends them (300-character
// reasoning text from a seeded vocabulary, NanoID-shaped ids, server stanzaIds, stepIndex
// 1..8 per chain). A round times one pass over the corpus for each candidate, the
// candidates interleaved (ours, plain, ours, plain, ...) so that drift hits both; each
// figure is the best round. Caveat: a shared 2-core machine, rates move between runs.
//
// Last line: RESULT decode_vs_plain=<x> encode_vs_plain=<x>, the package's time over
// plain's time for the same bytes (< 1: the package is faster; target <= 2).

import { decode, encode } from "@msgpack/msgpack";
import { decodeEnvelope, encodeEnvelope } from "@alicia/reasoning";

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}
const N = arg("n", 1000);
const ROUNDS = arg("rounds", 15);

// A seeded generator (mulberry32), so every run times the same corpus.
let seed = 20250101;
function random() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const WORDS = (
  "the user asks about a restaurant near the station so I should check the opening hours first then " +
  "compare prices and distance maybe search the database for italian places with good reviews if none " +
  "match relax the filter to include pizza or pasta and consider dietary constraints mentioned earlier"
).split(" ");
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
const id = (prefix) => `${prefix}_${Array.from({ length: 21 }, () => ALPHABET[Math.floor(random() * 64)]).join("")}`;
function text(chars) {
  let out = "";
  while (out.length < chars) out += `${WORDS[Math.floor(random() * WORDS.length)]} `;
  return out.slice(0, chars);
}

const conversationId = id("conv");
let userMessage = id("msg");
const envelopes = [];
for (let i = 0; i < N; i++) {
  if (i % 8 === 0) userMessage = id("msg");
  envelopes.push({
    stanzaId: -(i + 1),
    conversationId,
    type: 5,
    body: { id: id("rs"), conversationId, previousId: userMessage, content: text(300), stepIndex: (i % 8) + 1 },
  });
}
const packets = envelopes.map((e) => encodeEnvelope(e));
// Same bytes both ways: plain decode reads the package's packets, and the objects match.
if (JSON.stringify(decode(packets[0])) !== JSON.stringify(decodeEnvelope(packets[0]))) {
  throw new Error("the package and plain decode disagree");
}

const candidates = {
  decode_ours: () => {
    for (const p of packets) decodeEnvelope(p);
  },
  decode_plain: () => {
    for (const p of packets) decode(p);
  },
  encode_ours: () => {
    for (const e of envelopes) encodeEnvelope(e);
  },
  encode_plain: () => {
    for (const e of envelopes) encode(e);
  },
};
const best = Object.fromEntries(Object.keys(candidates).map((k) => [k, Infinity]));
for (let r = 0; r < ROUNDS + 1; r++) {
  for (const [name, run] of Object.entries(candidates)) {
    const t0 = process.hrtime.bigint();
    run();
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    if (r > 0) best[name] = Math.min(best[name], s); // round 0 warms the JIT up
  }
}
console.log(`node ${process.version}, ${N} ReasoningStep envelopes of ${packets[0].length} bytes, best of ${ROUNDS} rounds`);
for (const [name, s] of Object.entries(best)) {
  console.log(`${name.padEnd(13)} ${Math.round(N / s).toLocaleString("en")} ops/s  (${((s / N) * 1e6).toFixed(2)} us/op)`);
}
const ratio = (a, b) => (best[a] / best[b]).toFixed(2);
console.log(`RESULT decode_vs_plain=${ratio("decode_ours", "decode_plain")} encode_vs_plain=${ratio("encode_ours", "encode_plain")}`);
