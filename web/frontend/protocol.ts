// The Alicia protocol v1 as the web debug page needs it (see PROTOCOL.md in the docs):
// MessagePack envelopes {stanzaId, conversationId, type, meta?, body}, one per reliable
// data packet on the "alicia" topic. nil values count as absent; a few alias keys seen
// in other implementations are accepted on receipt.

import { decode, encode } from "@msgpack/msgpack";

export const DATA_TOPIC = "alicia";
export const CLIENT_VERSION = "alicia-web/0.1.0";

export const MessageType = {
  ErrorMessage: 1,
  UserMessage: 2,
  AssistantMessage: 3,
  AudioChunk: 4,
  ReasoningStep: 5,
  ToolUseRequest: 6,
  ToolUseResult: 7,
  Acknowledgement: 8,
  Transcription: 9,
  ControlStop: 10,
  ControlVariation: 11,
  Configuration: 12,
  StartAnswer: 13,
  MemoryTrace: 14,
  Commentary: 15,
  AssistantSentence: 16,
} as const;

export type Body = Record<string, unknown>;

export interface Envelope {
  stanzaId: number;
  conversationId: string;
  type: number;
  meta?: Record<string, unknown>;
  body: Body;
}

export class ProtocolError extends Error {}

/** Features this page announces: streamed answers, and reasoning steps when shown. */
export function featuresFor(showReasoning: boolean): string[] {
  return showReasoning ? ["streaming", "reasoning_step_display"] : ["streaming"];
}

export function encodeEnvelope(env: Envelope): Uint8Array<ArrayBuffer> {
  // A copy into a plain ArrayBuffer, as publishData wants.
  return new Uint8Array(encode(env, { ignoreUndefined: true }));
}

/** Decode one packet; throws ProtocolError for anything that is not an envelope. */
export function decodeEnvelope(data: Uint8Array): Envelope {
  let raw: unknown;
  try {
    raw = decode(data);
  } catch (err) {
    throw new ProtocolError(`not MessagePack: ${String(err)}`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new ProtocolError("envelope is not a map");
  }
  const m = raw as Record<string, unknown>;
  if (!Number.isInteger(m.stanzaId) || !Number.isInteger(m.type)) {
    throw new ProtocolError("envelope lacks stanzaId/type");
  }
  const body = m.body;
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ProtocolError("body is not a map");
  }
  const clean: Body = {};
  for (const [k, v] of Object.entries(body as Body)) {
    if (v !== null && v !== undefined) clean[k] = v;
  }
  return {
    stanzaId: m.stanzaId as number,
    conversationId: typeof m.conversationId === "string" ? m.conversationId : "",
    type: m.type as number,
    meta: (m.meta as Record<string, unknown> | undefined) ?? undefined,
    body: clean,
  };
}

/** First present key among `keys`, as a string. */
export function str(body: Body, ...keys: string[]): string | undefined {
  for (const k of keys) {
    const v = body[k];
    if (typeof v === "string") return v;
  }
  return undefined;
}

/** First present key among `keys`, as a number. */
export function num(body: Body, ...keys: string[]): number | undefined {
  for (const k of keys) {
    const v = body[k];
    if (typeof v === "number") return v;
  }
  return undefined;
}

/** The step index, accepting the 0-based `sequence` alias. */
export function stepIndexOf(body: Body): number | undefined {
  const idx = num(body, "stepIndex");
  if (idx !== undefined) return idx;
  const seq = num(body, "sequence");
  return seq === undefined ? undefined : seq + 1;
}

const ALPHABET = "useandom-26T198340PX75pxJACKVERYMINDBUSHWOLF_GQZbfghjklqvwyzrict";

/** `<prefix>_<21 URL-safe random characters>` (NanoID alphabet). */
export function newId(prefix: string): string {
  const bytes = crypto.getRandomValues(new Uint8Array(21));
  let out = "";
  for (const b of bytes) out += ALPHABET[b & 63];
  return `${prefix}_${out}`;
}
