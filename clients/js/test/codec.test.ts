// The codec: round trips of all 16 types (ours and msgpackr's bytes both ways), the
// tolerance of the Python decoder (DECISIONS.md rows 8-25), typed errors, strict encoding.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { encode } from "@msgpack/msgpack";
import { Unpackr, pack } from "msgpackr";

import {
  DecodeError,
  EncodeError,
  type Envelope,
  MessageType,
  PacketTooLargeError,
  ValidationError,
  decodeEnvelope,
  encodeEnvelope,
} from "../src/index";

const CONV = "conv_V1StGXR8_Z5jdHi6B-myT";
const NOW = 1_764_000_000_123; // > 2**32: msgpackr writes it as float64

/** One conformant body per type. */
const BODIES: Record<number, Record<string, unknown>> = {
  1: { id: "err_1", conversationId: CONV, code: 101, message: "bad", severity: 1, recoverable: true, originatingId: "3" },
  2: { id: "msg_u", conversationId: CONV, content: "6 x 7?", previousId: "msg_a0", timestamp: NOW, attachments: { a: [1, 2] } },
  3: { id: "msg_a", conversationId: CONV, content: "42", previousId: "msg_u", timestamp: NOW, state: "complete" },
  4: { conversationId: CONV, trackSid: "TR_1", format: "audio/opus 48kHz", duration: 20, seq: 1, isLast: false, timestamp: NOW },
  5: { id: "rs_1", conversationId: CONV, previousId: "msg_u", content: "think", stepIndex: 1, totalSteps: 3 },
  6: { id: "toolreq_1", toolName: "calculator", parameters: { expr: "6*7" }, execution: "server", conversationId: CONV, previousId: "msg_u", timeoutMs: 30000 },
  7: { requestId: "toolreq_1", success: true, result: { value: 42 }, id: "toolres_1", conversationId: CONV },
  8: { conversationId: CONV, acknowledgedStanzaId: 4, acknowledgedMessageId: "msg_u", lastSeenStanzaId: 4, notes: "n", success: true },
  9: { id: "msg_t", conversationId: CONV, text: "hello", previousId: "msg_a", final: true, confidence: 0.5, language: "en-US" },
  10: { conversationId: CONV, targetId: "msg_a", reason: "user_clicked_stop", stopType: "generation" },
  11: { conversationId: CONV, targetId: "msg_u", mode: "edit", newContent: "6 x 8?" },
  12: { conversationId: CONV, lastSequenceSeen: 42, clientVersion: "x/1", device: "web", features: ["streaming"], enableReordering: false, lastStanzaMap: { a: 1 }, preferredLanguage: "en" },
  13: { id: "msg_a", previousId: "msg_u", conversationId: CONV, answerType: "text", plannedSentenceCount: 2 },
  14: { id: "memtr_1", conversationId: CONV, previousId: "msg_u", memoryId: "mem_1", action: "retrieved", content: "likes tea", memoryType: "user_preference", confidence: 0.25, metadata: { tags: ["x"] } },
  15: { id: "cmt_1", conversationId: CONV, targetId: null, authorRole: "user", content: "nice", rating: 5, commentType: "note", timestamp: NOW },
  16: { previousId: "msg_a", conversationId: CONV, sequence: 1, text: "The answer is 42.", id: "sent_1", audio: new Uint8Array([1, 2, 3]), isFinal: true },
};

function env(type: number, body: Record<string, unknown>, stanzaId = -1): Envelope {
  return { stanzaId, conversationId: CONV, type, body } as Envelope;
}

const unpackr = new Unpackr({ int64AsType: "number", mapsAsObjects: true });

test("every type round-trips through our codec and msgpackr's bytes, both ways", () => {
  assert.equal(Object.keys(BODIES).length, 16);
  for (const [code, body] of Object.entries(BODIES)) {
    const e = env(Number(code), body);
    const ours = encodeEnvelope(e);
    assert.deepEqual(decodeEnvelope(ours), e, `type ${code}`);
    const theirs = decodeEnvelope(pack(e));
    if ("audio" in theirs.body) theirs.body.audio = new Uint8Array(theirs.body.audio as Uint8Array); // a Buffer
    assert.deepEqual(theirs, e, `msgpackr -> ours, type ${code}`);
    const back = unpackr.unpack(ours) as Envelope;
    assert.deepEqual({ ...back, body: { ...back.body, ...("audio" in body ? { audio: new Uint8Array(back.body.audio as Uint8Array) } : {}) } }, e, `ours -> msgpackr, type ${code}`);
  }
});

test("nil and msgpackr's undefined are absent; unknown keys are dropped", () => {
  const got = decodeEnvelope(
    pack({
      stanzaId: -2,
      conversationId: undefined,
      type: 5,
      meta: undefined,
      body: { ...BODIES[5], totalSteps: undefined, encryptedValue: null, surprise: 1 },
    }),
  );
  assert.equal(got.conversationId, "");
  assert.equal("meta" in got, false);
  assert.deepEqual(got.body, { id: "rs_1", conversationId: CONV, previousId: "msg_u", content: "think", stepIndex: 1 });
  assert.throws(
    () => decodeEnvelope(pack(env(5, { ...BODIES[5], content: undefined }))),
    (e: unknown) => e instanceof ValidationError && /missing required field `content`/.test(e.message),
  );
  // Commentary targetId undefined: the whole conversation.
  assert.equal((decodeEnvelope(pack(env(15, { ...BODIES[15], targetId: undefined }))).body as { targetId: unknown }).targetId, null);
});

test("aliases map to their primary keys (the primary key wins)", () => {
  const step = decodeEnvelope(pack(env(5, { id: "rs", conversationId: CONV, messageId: "msg_a", content: "c", sequence: 0 })));
  assert.deepEqual([step.body.previousId, step.body.stepIndex], ["msg_a", 1]);
  const both = decodeEnvelope(pack(env(5, { ...BODIES[5], messageId: "other", sequence: 7 })));
  assert.deepEqual([both.body.previousId, both.body.stepIndex], ["msg_u", 1]);
  const err = decodeEnvelope(pack(env(1, { id: "", conversationId: CONV, code: 202, content: "gone", severity: "Warning", recoverable: false, originatingId: 17 })));
  assert.deepEqual(err.body, { id: "", conversationId: CONV, code: 202, message: "gone", severity: 1, recoverable: false, originatingId: "17" });
  const t = decodeEnvelope(pack(env(9, { id: "t", conversationId: CONV, text: "x", isFinal: true })));
  assert.equal((t.body as { final?: boolean }).final, true);
  const r = decodeEnvelope(pack(env(7, { requestId: "q", success: false, data: [1], error: "boom" })));
  assert.deepEqual(r.body, { requestId: "q", success: false, result: [1], errorMessage: "boom" });
  const m = decodeEnvelope(pack(env(14, { id: "m", conversationId: CONV, messageId: "msg_u", memoryId: "x", usage: "injected", content: "c", relevance: 1 })));
  assert.deepEqual([m.body.previousId, (m.body as { action: string }).action, (m.body as { confidence: number }).confidence], ["msg_u", "injected", 1]);
});

test("integral floats are ints; fractions, bools and ranges are refused", () => {
  const floats = pack({ stanzaId: -3, type: 2, body: { ...BODIES[2], timestamp: NOW } });
  assert.ok(floats.includes(0xcb)); // msgpackr wrote Date.now() as a float64
  assert.equal((decodeEnvelope(floats).body as { timestamp: number }).timestamp, NOW);
  // Every number as a float64 (head and body), as some encoders write them.
  const allFloats = encode(env(5, BODIES[5], -4), { forceIntegerToFloat: true });
  assert.ok(allFloats.includes(0xcb));
  assert.deepEqual(decodeEnvelope(allFloats), env(5, BODIES[5], -4));
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ stepIndex: 1.5 }, /Expected `int`, got `float` - at `\$\.body\.stepIndex`/],
    [{ stepIndex: true }, /Expected `int`, got `bool`/],
    [{ stepIndex: 2 ** 31 }, /<= 2147483647/],
    [{ stepIndex: "1" }, /Expected `int`, got `str`/],
    [{ content: 5 }, /Expected `str`, got `int` - at `\$\.body\.content`/],
  ];
  for (const [change, why] of bad) {
    assert.throws(() => decodeEnvelope(pack(env(5, { ...BODIES[5], ...change }))), (e: unknown) => e instanceof ValidationError && why.test(e.message));
  }
  assert.throws(() => decodeEnvelope(pack(env(6, { ...BODIES[6], execution: "maybe" }))), ValidationError);
  assert.throws(() => decodeEnvelope(pack(env(12, { features: ["a", null] }))), ValidationError);
  assert.throws(() => decodeEnvelope(pack({ stanzaId: 1.5, type: 5, body: BODIES[5] })), /stanzaId/);
});

test("decode errors are typed: not MessagePack, not an envelope, unknown types skipped", () => {
  assert.throws(() => decodeEnvelope(new Uint8Array([0xc1])), DecodeError);
  assert.throws(() => decodeEnvelope(new Uint8Array([...pack(env(5, BODIES[5])), 0x00])), DecodeError);
  assert.throws(() => decodeEnvelope(pack([1, 2])), ValidationError);
  assert.throws(() => decodeEnvelope(pack({ type: 5, body: BODIES[5] })), /missing required field `stanzaId`/);
  assert.throws(() => decodeEnvelope(pack({ stanzaId: 1, type: 5, body: "x" })), ValidationError);
  assert.throws(() => decodeEnvelope(pack({ stanzaId: 1, type: 5, body: BODIES[5], meta: new Map([[1, "x"]]) })), /meta keys/);
  const unknown = decodeEnvelope(pack({ stanzaId: -9, type: 18, body: { anything: [1] } }));
  assert.deepEqual([unknown.type, unknown.body], [18, { anything: [1] }]);
  assert.ok(new ValidationError("x") instanceof DecodeError);
});

test("encoding is strict: literals, ranges, size", () => {
  assert.throws(() => encodeEnvelope(env(6, { ...BODIES[6], execution: "maybe" })), EncodeError);
  assert.throws(() => encodeEnvelope(env(5, BODIES[5], 2 ** 31)), EncodeError);
  assert.throws(() => encodeEnvelope(env(5, { ...BODIES[5], stepIndex: undefined })), /missing required field `stepIndex`/);
  assert.throws(() => encodeEnvelope(env(5, { ...BODIES[5], content: "x".repeat(16000) })), PacketTooLargeError);
  // Aliases are read, never written; unknown keys are not sent.
  const bytes = encodeEnvelope(env(5, { ...BODIES[5], sequence: 3, extra: 1 } as Record<string, unknown>));
  assert.deepEqual(Object.keys((unpackr.unpack(bytes) as Envelope).body).sort(), Object.keys(BODIES[5]).sort());
  assert.equal(MessageType.AssistantSentence, 16);
});

test("every client envelope of tests/protocol/msgpackr.mjs (msgpackr's plain pack) decodes", () => {
  const script = fileURLToPath(new URL("../../../tests/protocol/msgpackr.mjs", import.meta.url));
  const out = execFileSync(process.execPath, [script, "pack"], { encoding: "utf8" });
  const { cases } = JSON.parse(out) as { cases: { name: string; hex: string }[] };
  assert.ok(cases.length >= 10);
  for (const c of cases) {
    const got = decodeEnvelope(Buffer.from(c.hex, "hex"));
    assert.ok(Object.values(got.body).every((v) => v !== undefined), c.name);
  }
});
