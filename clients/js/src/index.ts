// @alicia/reasoning: show a LiveKit agent's reasoning. The Alicia data-channel protocol v1
// codec, the agent-trust rules, turn assembly and a framework-free ReasoningClient for a
// livekit-client Room. The React hook and panel are in "@alicia/reasoning/react".

export {
  DATA_TOPIC,
  DecodeError,
  EncodeError,
  MAX_PACKET_BYTES,
  PacketTooLargeError,
  ProtocolError,
  ValidationError,
  decodeEnvelope,
  encodeEnvelope,
  envelope,
  isType,
} from "./codec";
export * from "./messages";
export { type ReasoningLevel, featuresFor, grantedLevel, newId } from "./ids";
export {
  AGENT_NAME_ATTRIBUTE,
  AgentTrust,
  PROTOCOL_ATTRIBUTE,
  type ParticipantLike,
  ServerSequence,
} from "./trust";
export { type ToolCall, type Turn, TurnAssembler, type TurnEvent, type TurnStatus } from "./turns";
export {
  type AgentState,
  CLIENT_VERSION,
  type ClientEvent,
  type ClientStatus,
  ReasoningClient,
  type ReasoningClientOptions,
  type ReasoningSnapshot,
  type ReasoningState,
} from "./client";
