// msgpackr's plain `pack` / `unpack` (the MessagePack encoder of the original Alicia web
// front end), run by tests/protocol/test_codec_msgpackr.py with node. msgpackr comes from
// the repository's node_modules (resolved from this file, so the working directory is free).
//
//   node msgpackr.mjs pack    prints {"now", "cases": [{"name", "hex", "envelope"}]}: one
//                             or more envelopes per client-to-server type, built as a JS
//                             client builds them (unset optional fields are `undefined`,
//                             timestamps are `Date.now()`), packed with plain `pack`;
//   node msgpackr.mjs unpack  reads a JSON array of hex strings on stdin and prints, for
//                             each, [plain `unpack`, an Unpackr with int64AsType "auto"].
//
// JSON cannot say undefined, bigint or bytes, so such values are tagged:
// {"$undefined": true}, {"$bigint": "<decimal>"}, {"$bin": "<hex>"}.

import { pack, unpack, Unpackr } from "msgpackr";

const CONV = "conv_V1StGXR8_Z5jdHi6B-myT";
const USER_MSG = "msg_u1A2B3C4D5E6F7G8H9I0J";
const ANSWER = "msg_a1A2B3C4D5E6F7G8H9I0J";
const CLIENT_VERSION = "alicia-msgpackr/0.1.0";

function tag(value) {
  if (value === undefined) return { $undefined: true };
  if (typeof value === "bigint") return { $bigint: value.toString() };
  if (value instanceof Uint8Array) return { $bin: Buffer.from(value).toString("hex") };
  if (Array.isArray(value)) return value.map(tag);
  if (value instanceof Map) return tag(Object.fromEntries(value));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, tag(v)]));
  }
  return value;
}

/** The client's traffic, in the order a session sends it. */
function clientTraffic() {
  let stanza = 0;
  let conversationId; // unknown until the server's Configuration reply
  const cases = [];
  const send = (name, type, body, meta) => {
    const envelope = { stanzaId: ++stanza, conversationId, type, meta, body };
    cases.push({ name, hex: Buffer.from(pack(envelope)).toString("hex"), envelope: tag(envelope) });
  };

  send("Configuration/new", 12, {
    conversationId: undefined,
    lastSequenceSeen: undefined,
    lastStanzaMap: undefined,
    clientVersion: CLIENT_VERSION,
    preferredLanguage: undefined,
    device: "web",
    features: ["streaming", "reasoning_step_display"],
    enableReordering: undefined,
  });
  conversationId = CONV;
  send("Configuration/resume", 12, {
    conversationId,
    lastSequenceSeen: 42,
    clientVersion: CLIENT_VERSION,
    device: "web",
    features: undefined,
  });
  send(
    "UserMessage/first",
    2,
    {
      id: USER_MSG,
      conversationId,
      content: "Italian food in NYC?",
      previousId: undefined,
      timestamp: Date.now(),
      attachments: undefined,
    },
    { timestamp: Date.now(), clientVersion: CLIENT_VERSION, "messaging.trace_id": undefined },
  );
  send("UserMessage/next", 2, {
    id: "msg_u2A2B3C4D5E6F7G8H9I0J",
    conversationId,
    content: "And in Boston?",
    previousId: ANSWER,
    timestamp: Date.now(),
  });
  send("ControlStop", 10, {
    conversationId,
    targetId: undefined,
    reason: "user_clicked_stop",
    stopType: undefined,
  });
  send("ControlVariation/regenerate", 11, {
    conversationId,
    targetId: USER_MSG,
    mode: "regenerate",
    newContent: undefined,
  });
  send("ControlVariation/edit", 11, {
    conversationId,
    targetId: USER_MSG,
    mode: "edit",
    newContent: "Italian food in Brooklyn?",
  });
  send("Commentary", 15, {
    id: "cmt_1A2B3C4D5E6F7G8H9I0Jx",
    conversationId,
    targetId: undefined,
    authorRole: "user",
    content: "Great answer",
    rating: 5,
    commentType: "feedback-positive",
    timestamp: Date.now(),
  });
  send("Acknowledgement", 8, {
    conversationId,
    acknowledgedStanzaId: -3,
    acknowledgedMessageId: undefined,
    lastSeenStanzaId: undefined,
    notes: undefined,
    success: true,
  });
  send("AudioChunk", 4, {
    conversationId,
    trackSid: "TR_AMkXYZ123",
    format: "audio/opus 48kHz",
    duration: 20,
    seq: 1,
    isLast: undefined,
    timestamp: Date.now(),
  });
  send("ErrorMessage", 1, {
    id: "err_1A2B3C4D5E6F7G8H9I0Jx",
    conversationId,
    code: 101,
    message: "could not read the tool request",
    severity: 1,
    recoverable: true,
    originatingId: undefined,
  });
  send("ToolUseResult", 7, {
    requestId: "toolreq_1",
    success: true,
    result: { temperature: 21.5, unit: undefined, observedAt: Date.now() },
    errorCode: undefined,
    errorMessage: undefined,
    id: "toolres_1",
    conversationId,
  });
  return cases;
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

const mode = process.argv[2];
if (mode === "pack") {
  const now = Date.now();
  process.stdout.write(JSON.stringify({ now, cases: clientTraffic() }));
} else if (mode === "unpack") {
  // As plain unpack is configured (maps as objects, no records), int64s as numbers when safe.
  const auto = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: "auto" });
  const packets = JSON.parse(await readStdin());
  const read = packets.map((hex) => {
    const data = Buffer.from(hex, "hex");
    return [tag(unpack(data)), tag(auto.unpack(data))];
  });
  process.stdout.write(JSON.stringify(read));
} else {
  process.stderr.write("usage: node msgpackr.mjs pack|unpack\n");
  process.exit(2);
}
