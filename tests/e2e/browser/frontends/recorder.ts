// What a page received, as its own code sees it: every data packet (RoomEvent.DataReceived,
// any topic, decoded as UTF-8 text and as MessagePack), every text stream on LiveKit's
// agent topics (lk.transcription, lk.chat) in full, every DataPacket the SDK's engine
// handed to the room (stream headers, chunks and trailers of any topic included, handled
// or not) and the agent's lk.agent.state values. The driver (drive.mjs) also taps the wire
// below the SDK (every RTCDataChannel and WebSocket message). Kept on window.__received.

import { decode } from "@msgpack/msgpack";
import { type Room, RoomEvent } from "livekit-client";

export interface DataRecord {
  from: string;
  topic: string;
  bytes: number;
  text: string;
  /** The payload decoded as MessagePack (JSON), or "" when it is not MessagePack. */
  msgpack: string;
  /** An Alicia envelope's `type` (0 when the payload is not one). */
  type: number;
}

export interface StreamRecord {
  topic: string;
  from: string;
  opened: Record<string, string>;
  text: string;
  chunks: number;
  closed?: Record<string, string>;
}

export interface Received {
  data: DataRecord[];
  /** Every DataPacket of the SDK's engine: its kind ("user", "streamHeader", ...) and
   * its value as JSON (bytes as UTF-8 text). */
  packets: { kind: string; from: string; value: string }[];
  streams: StreamRecord[];
  /** Every lk.agent.state value an agent set, in order (from attribute events). */
  agentStates: string[];
}

declare global {
  interface Window {
    __received?: Received;
  }
}

interface EnginePacket {
  participantIdentity?: string;
  value?: { case?: string; value?: unknown };
}
interface EngineLike {
  on(event: string, listener: (packet: EnginePacket) => void): unknown;
}

const TOPICS = ["lk.transcription", "lk.chat"];

function json(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => {
    if (typeof v === "bigint") return v.toString();
    if (v instanceof Uint8Array) return new TextDecoder().decode(v);
    return v;
  });
}

/** Record what `room` receives (call before it connects). `streams`: also read the text
 * streams of LiveKit's agent topics (a page whose own code reads them says false). */
export function record(room: Room, { streams = true } = {}): Received {
  const received: Received = { data: [], packets: [], streams: [], agentStates: [] };
  window.__received = received;
  // The engine is made with the room; it hands every DataPacket to the room.
  const engine = (room as unknown as { engine?: EngineLike }).engine;
  if (!engine) throw new Error("livekit-client Room without an engine");
  engine.on("dataPacketReceived", (packet: EnginePacket) => {
    received.packets.push({
      kind: packet.value?.case ?? "",
      from: packet.participantIdentity ?? "",
      value: json(packet.value?.value ?? null),
    });
  });
  room.on(RoomEvent.DataReceived, (payload, participant, _kind, topic) => {
    let msgpack = "";
    let type = 0;
    try {
      const value = decode(payload);
      msgpack = json(value);
      const t = (value as { type?: unknown } | null)?.type;
      if (typeof t === "number") type = t;
    } catch {
      // not MessagePack: its text is kept
    }
    received.data.push({
      from: participant?.identity ?? "",
      topic: topic ?? "",
      bytes: payload.byteLength,
      text: new TextDecoder().decode(payload),
      msgpack,
      type,
    });
  });
  room.on(RoomEvent.ParticipantAttributesChanged, (changed, participant) => {
    const state = changed["lk.agent.state"];
    if (state !== undefined && participant.isAgent) received.agentStates.push(state);
  });
  if (streams) {
    for (const topic of TOPICS) {
      room.registerTextStreamHandler(topic, async (reader, info) => {
        const entry: StreamRecord = {
          topic,
          from: info.identity,
          opened: { ...(reader.info.attributes ?? {}) },
          text: "",
          chunks: 0,
        };
        received.streams.push(entry);
        for await (const chunk of reader) {
          entry.text += chunk;
          entry.chunks++;
        }
        entry.closed = { ...(reader.info.attributes ?? {}) };
      });
    }
  }
  return received;
}
