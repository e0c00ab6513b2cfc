// The Alicia data-channel protocol v1 codec (PROTOCOL.md §1-§3): MessagePack envelopes
// {stanzaId, conversationId, type, meta?, body}, one per reliable data packet on topic
// "alicia". Decoding is as tolerant as the Python decoder (protocol/DECISIONS.md): nil
// and msgpackr's `undefined` (ext 0, payload 00) count as absent, alias keys are mapped to
// primary keys, unknown keys are dropped, integral floats are ints, severity names are
// read; everything else that is ill-typed is a ValidationError naming the field. Encoding
// is strict: primary keys only, ranges and literal values checked (EncodeError), at most
// MAX_PACKET_BYTES per envelope (PacketTooLargeError).

import { Decoder, Encoder, ExtData, ExtensionCodec } from "@msgpack/msgpack";

import type { Body, BodyOf, Envelope, MessageTypeCode } from "./messages";
import { MessageType, TYPE_NAMES } from "./messages";

/** Topic of every protocol packet on the LiveKit data channel. */
export const DATA_TOPIC = "alicia";
/** Largest encoded envelope, in bytes (DECISIONS.md "Size"). */
export const MAX_PACKET_BYTES = 15 * 1024;

/** Base of every codec error; `code`/`severity`/`recoverable` as an ErrorMessage says them. */
export class ProtocolError extends Error {
  code = 101;
  severity = 1;
  recoverable = true;
}
/** Bytes that are not a MessagePack envelope. */
export class DecodeError extends ProtocolError {}
/** A MessagePack envelope with a missing, ill-typed or out-of-range field. */
export class ValidationError extends DecodeError {}
/** Something the receiver would refuse; not sent. */
export class EncodeError extends ProtocolError {
  code = 501;
  severity = 2;
}
/** An envelope above MAX_PACKET_BYTES. */
export class PacketTooLargeError extends EncodeError {}

for (const cls of [ProtocolError, DecodeError, ValidationError, EncodeError, PacketTooLargeError]) {
  Object.defineProperty(cls.prototype, "name", { value: cls.name });
}

// --- field tables -----------------------------------------------------------------------
// One string per body type: `key:kind`, `!` = required. Kinds: s str, b bool, a any,
// m map, l list of str, f float 0..1, x bin, n str-or-nil (required, written as nil),
// i int32, I int64, w uint16, u uint32, U uint64, v severity (0..3 or its name),
// e literal (values by key in LITERALS).
const FIELDS: Record<number, string> = {
  1: "id:s! conversationId:s! code:i! message:s! severity:v! recoverable:b! originatingId:s",
  2: "id:s! conversationId:s! content:s! previousId:s timestamp:I attachments:a",
  3: "id:s! conversationId:s! content:s! previousId:s timestamp:I state:s",
  4: "conversationId:s! trackSid:s! format:s! duration:u seq:u isLast:b timestamp:U",
  5: "id:s! conversationId:s! previousId:s! content:s! stepIndex:i! totalSteps:i encryptedValue:s",
  6: "id:s! toolName:s! parameters:m! execution:e! conversationId:s previousId:s timeoutMs:i",
  7: "requestId:s! success:b! result:a errorCode:s errorMessage:s id:s conversationId:s",
  8: "conversationId:s! acknowledgedStanzaId:i acknowledgedMessageId:s lastSeenStanzaId:i notes:s success:b",
  9: "id:s! conversationId:s! text:s! previousId:s final:b confidence:f language:s",
  10: "conversationId:s! targetId:s reason:s stopType:e",
  11: "conversationId:s! targetId:s! mode:e! newContent:s",
  12: "conversationId:s lastSequenceSeen:i lastStanzaMap:m clientVersion:s preferredLanguage:s device:s features:l enableReordering:b",
  13: "id:s! previousId:s! conversationId:s! answerType:e plannedSentenceCount:i additionalContext:a",
  14: "id:s! conversationId:s! previousId:s! memoryId:s! action:s! content:s! memoryType:s confidence:f metadata:m",
  15: "id:s! conversationId:s! targetId:n! authorRole:e! content:s! rating:i commentType:s timestamp:I",
  16: "previousId:s! conversationId:s! sequence:i! text:s! id:s audio:x isFinal:b sentiment:a tone:a",
};

/** Closed value sets (DECISIONS.md "Closed value sets"). */
const LITERALS: Record<string, readonly (string | number)[]> = {
  execution: ["server", "client", "either"],
  stopType: ["generation", "speech", "all"],
  mode: ["edit", "regenerate", "continue", "retry"],
  answerType: ["text", "voice", "text+voice", "visual"],
  authorRole: ["user", "assistant", "moderator"],
  severity: [0, 1, 2, 3],
};

const SEVERITY_NAMES: Record<string, number> = { info: 0, warning: 1, error: 2, critical: 3 };

const INT_RANGES: Record<string, [number, number]> = {
  i: [-(2 ** 31), 2 ** 31 - 1],
  I: [-(2 ** 63), 2 ** 63 - 1024], // the largest doubles within int64 / uint64
  w: [0, 2 ** 16 - 1],
  u: [0, 2 ** 32 - 1],
  U: [0, 2 ** 64 - 2048],
  v: [0, 3],
};

const zeroBased = (v: unknown): unknown => (typeof v === "number" ? v + 1 : v);
/** Alias key → [primary key, value transform if any], by type (PROTOCOL.md §3 "Aliases"). */
const ALIASES: Record<number, [string, string, ((v: unknown) => unknown)?][]> = {
  1: [["content", "message"]],
  4: [
    ["sequence", "seq"],
    ["durationMs", "duration"],
  ],
  5: [
    ["messageId", "previousId"],
    ["sequence", "stepIndex", zeroBased],
  ],
  6: [["messageId", "previousId"]],
  7: [
    ["data", "result"],
    ["error", "errorMessage"],
  ],
  9: [["isFinal", "final"]],
  14: [
    ["messageId", "previousId"],
    ["relevance", "confidence"],
    ["usage", "action"],
  ],
  15: [
    ["messageId", "targetId"],
    ["previousId", "targetId"],
    ["commentaryType", "commentType"],
  ],
};

type Field = [key: string, kind: string, required: boolean];
const SPECS: Record<number, Field[]> = {};
for (const [code, text] of Object.entries(FIELDS)) {
  SPECS[Number(code)] = text.split(" ").map((f) => {
    const [key, kind] = f.split(":");
    return [key, kind.replace("!", ""), kind.endsWith("!")];
  });
}

// --- MessagePack layer ------------------------------------------------------------------

const NON_STR_KEY = "\u0000";
const extensions = new ExtensionCodec();
extensions.register({
  type: 0,
  // msgpackr's `undefined` (ext 0, payload exactly 00) reads as nil; other ext 0 stay ExtData.
  decode: (data: Uint8Array) => (data.length === 1 && data[0] === 0 ? null : new ExtData(0, data)),
  encode: () => null,
});
const decoder = new Decoder({
  extensionCodec: extensions,
  // Non-str map keys: ignored in bodies, refused in meta (DECISIONS.md rows 18, "Unknown keys").
  mapKeyConverter: (k: unknown) => (typeof k === "string" ? k : NON_STR_KEY + String(k)),
});
const encoder = new Encoder({ ignoreUndefined: true });

// --- validation -------------------------------------------------------------------------

function typeName(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "number") return Number.isInteger(v) ? "int" : "float";
  if (typeof v === "string") return "str";
  if (typeof v === "boolean") return "bool";
  if (v instanceof Uint8Array) return "bytes";
  if (v instanceof ExtData) return "ext";
  if (Array.isArray(v)) return "array";
  return "object";
}

function isMap(v: unknown): v is Record<string, unknown> {
  return (
    typeof v === "object" &&
    v !== null &&
    !Array.isArray(v) &&
    !(v instanceof Uint8Array) &&
    !(v instanceof ExtData) &&
    !(v instanceof Date)
  );
}

/** Why `v` does not fit `kind` (undefined if it fits). */
function misfit(key: string, kind: string, v: unknown): string | undefined {
  let want: string;
  switch (kind) {
    case "s":
    case "n":
      if (typeof v === "string") return undefined;
      want = "str";
      break;
    case "b":
      if (typeof v === "boolean") return undefined;
      want = "bool";
      break;
    case "a":
      return undefined;
    case "m":
      if (isMap(v)) return undefined;
      want = "object";
      break;
    case "l":
      if (Array.isArray(v) && v.every((x) => typeof x === "string")) return undefined;
      want = "array of str";
      break;
    case "x":
      if (v instanceof Uint8Array) return undefined;
      want = "bytes";
      break;
    case "f":
      if (typeof v === "number" && v >= 0 && v <= 1) return undefined;
      want = "float 0.0-1.0";
      break;
    case "e":
      if (LITERALS[key].includes(v as string)) return undefined;
      return `Invalid enum value ${JSON.stringify(v)}`;
    default: {
      const [lo, hi] = INT_RANGES[kind];
      if (typeof v === "number" && Number.isInteger(v)) {
        if (v >= lo && v <= hi) return undefined;
        return `Expected \`int\` >= ${lo} and <= ${hi}`;
      }
      want = "int";
    }
  }
  return `Expected \`${want}\`, got \`${typeName(v)}\``;
}

/** The body of a known type, normalised (decode) or checked (encode); throws `Err`. */
function checkBody(
  code: number,
  raw: Record<string, unknown>,
  lenient: boolean,
  Err: typeof ValidationError | typeof EncodeError,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const name = TYPE_NAMES[code];
  for (const [key, kind, required] of SPECS[code]) {
    let v = raw[key];
    if (v == null && lenient) {
      for (const [alias, primary, fix] of ALIASES[code] ?? []) {
        if (primary === key && raw[alias] != null) {
          v = fix ? fix(raw[alias]) : raw[alias];
          break;
        }
      }
    }
    if (v == null) {
      if (kind === "n") out[key] = null;
      else if (required) throw new Err(`${name}: missing required field \`${key}\` - at \`$.body\``);
      continue;
    }
    if (lenient) {
      if (kind === "v" && typeof v === "string") v = SEVERITY_NAMES[v.toLowerCase()] ?? v;
      else if (key === "originatingId" && typeof v === "number" && Number.isInteger(v)) v = String(v);
    }
    const why = misfit(key, kind, v);
    if (why) throw new Err(`${name}: ${why} - at \`$.body.${key}\``);
    out[key] = v;
  }
  return out;
}

/** An envelope field `v` of `kind` (see FIELDS), or `Err` naming it. */
function field<T = number>(v: unknown, kind: string, what: string, Err: typeof ValidationError | typeof EncodeError): T {
  const why = misfit("", kind, v);
  if (why) throw new Err(`Envelope: ${v == null ? `missing required field \`${what}\`` : why} - at \`$.${what}\``);
  return v as T;
}

/** Decode one packet. Throws DecodeError (not MessagePack) or ValidationError (not an
 * envelope, or a field that does not fit); an unknown `type` is kept with its raw body. */
export function decodeEnvelope(data: Uint8Array): Envelope {
  let raw: unknown;
  try {
    raw = decoder.decode(data);
  } catch (err) {
    throw new DecodeError(`not a MessagePack envelope: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!isMap(raw)) throw new ValidationError(`Envelope: Expected \`object\`, got \`${typeName(raw)}\` - at \`$\``);
  const stanzaId = field(raw.stanzaId, "i", "stanzaId", ValidationError);
  const type = field(raw.type, "w", "type", ValidationError);
  const conversationId = field<string>(raw.conversationId ?? "", "s", "conversationId", ValidationError);
  const meta = raw.meta ?? undefined;
  if (meta !== undefined) {
    field<Record<string, unknown>>(meta, "m", "meta", ValidationError);
    for (const k in meta) {
      if (k.startsWith(NON_STR_KEY)) throw new ValidationError("Envelope: meta keys must be str - at `$.meta`");
    }
  }
  let body = raw.body;
  if (body == null) throw new ValidationError("Envelope: missing required field `body` - at `$`");
  if (SPECS[type]) {
    if (!isMap(body)) {
      throw new ValidationError(`${TYPE_NAMES[type]}: Expected \`object\`, got \`${typeName(body)}\` - at \`$.body\``);
    }
    body = checkBody(type, body, true, ValidationError);
  }
  const env: Envelope = { stanzaId, conversationId, type: type as MessageTypeCode, body: body as Body };
  if (meta !== undefined) env.meta = meta as Record<string, unknown>;
  return env;
}

/** Encode one envelope (primary keys only, absent fields omitted). Throws EncodeError for
 * what the receiver would refuse and PacketTooLargeError above MAX_PACKET_BYTES. */
export function encodeEnvelope(env: Envelope): Uint8Array<ArrayBuffer> {
  field(env.stanzaId, "i", "stanzaId", EncodeError);
  field(env.type, "w", "type", EncodeError);
  const code = env.type as number;
  let body: unknown = env.body;
  if (SPECS[code]) {
    if (!isMap(body)) throw new EncodeError(`${TYPE_NAMES[code]}: body is not an object`);
    body = checkBody(code, body, false, EncodeError);
  }
  const out: Record<string, unknown> = {
    stanzaId: env.stanzaId,
    conversationId: env.conversationId ?? "",
    type: code,
    body,
  };
  if (env.meta != null) out.meta = env.meta;
  let bytes: Uint8Array<ArrayBuffer>;
  try {
    bytes = encoder.encode(out);
  } catch (err) {
    throw new EncodeError(`not encodable: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (bytes.length > MAX_PACKET_BYTES) {
    throw new PacketTooLargeError(`envelope of ${bytes.length} bytes exceeds ${MAX_PACKET_BYTES}`);
  }
  return bytes;
}

/** A typed envelope for `body` of message type `type` (helper for senders). */
export function envelope<T extends MessageTypeCode>(
  type: T,
  stanzaId: number,
  conversationId: string,
  body: BodyOf<T>,
  meta?: Record<string, unknown>,
): Envelope<T> {
  const env: Envelope<T> = { stanzaId, conversationId, type, body };
  if (meta) env.meta = meta;
  return env;
}

/** True if `env` carries message type `type` (narrows its body). */
export function isType<T extends MessageTypeCode>(env: Envelope, type: T): env is Envelope<T> {
  return env.type === type;
}

export { MessageType };
