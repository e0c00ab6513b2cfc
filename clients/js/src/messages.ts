// The 16 body types of the Alicia protocol v1 (PROTOCOL.md §2-§3), camelCase as on the
// wire. Optional fields are absent (never null) after decoding; Commentary `targetId` is
// null for "the whole conversation".

/** Body type codes (PROTOCOL.md §2). */
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

export type MessageTypeName = keyof typeof MessageType;
export type MessageTypeCode = (typeof MessageType)[MessageTypeName];

/** Type code → name. */
export const TYPE_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(MessageType).map(([name, code]) => [code, name]),
);

/** Configuration `features` values (§4.8); unknown strings are kept as they are. */
export const Feature = {
  Streaming: "streaming",
  PartialResponses: "partial_responses",
  AudioOutput: "audio_output",
  PartialTranscripts: "partial_transcripts",
  ReasoningStepDisplay: "reasoning_step_display",
  ReasoningSteps: "reasoning_steps",
  ReasoningSummary: "reasoning_summary",
  ReasoningEncrypted: "reasoning_encrypted",
  ToolUse: "tool_use",
} as const;

export interface ErrorMessage {
  id: string;
  conversationId: string;
  code: number;
  message: string;
  /** 0 info, 1 warning, 2 error, 3 critical. */
  severity: 0 | 1 | 2 | 3;
  recoverable: boolean;
  originatingId?: string;
}
export interface UserMessage {
  id: string;
  conversationId: string;
  content: string;
  previousId?: string;
  timestamp?: number;
  attachments?: unknown;
}
export interface AssistantMessage {
  id: string;
  conversationId: string;
  content: string;
  previousId?: string;
  timestamp?: number;
  /** "complete" or "partial" (a stopped or failed answer) from our worker. */
  state?: string;
}
export interface AudioChunk {
  conversationId: string;
  trackSid: string;
  format: string;
  duration?: number;
  seq?: number;
  isLast?: boolean;
  timestamp?: number;
}
export interface ReasoningStep {
  id: string;
  conversationId: string;
  previousId: string;
  content: string;
  stepIndex: number;
  totalSteps?: number;
  /** The step as JWE compact serialisation, for clients granted only the encrypted value. */
  encryptedValue?: string;
}
export interface ToolUseRequest {
  id: string;
  toolName: string;
  parameters: Record<string, unknown>;
  execution: "server" | "client" | "either";
  conversationId?: string;
  previousId?: string;
  timeoutMs?: number;
}
export interface ToolUseResult {
  requestId: string;
  success: boolean;
  result?: unknown;
  errorCode?: string;
  errorMessage?: string;
  id?: string;
  conversationId?: string;
}
export interface Acknowledgement {
  conversationId: string;
  acknowledgedStanzaId?: number;
  acknowledgedMessageId?: string;
  lastSeenStanzaId?: number;
  notes?: string;
  success?: boolean;
}
export interface Transcription {
  id: string;
  conversationId: string;
  text: string;
  previousId?: string;
  final?: boolean;
  confidence?: number;
  language?: string;
}
export interface ControlStop {
  conversationId: string;
  targetId?: string;
  reason?: string;
  stopType?: "generation" | "speech" | "all";
}
export interface ControlVariation {
  conversationId: string;
  /** The user message (or, for `continue`, the answer) concerned. */
  targetId: string;
  /** `retry` is served as `regenerate`; `continue` continues a stopped or partial answer. */
  mode: "edit" | "regenerate" | "continue" | "retry";
  newContent?: string;
}
export interface Configuration {
  conversationId?: string;
  lastSequenceSeen?: number;
  lastStanzaMap?: Record<string, unknown>;
  clientVersion?: string;
  preferredLanguage?: string;
  device?: string;
  features?: string[];
  enableReordering?: boolean;
}
export interface StartAnswer {
  id: string;
  previousId: string;
  conversationId: string;
  answerType?: "text" | "voice" | "text+voice" | "visual";
  plannedSentenceCount?: number;
  additionalContext?: unknown;
}
export interface MemoryTrace {
  id: string;
  conversationId: string;
  previousId: string;
  memoryId: string;
  action: string;
  content: string;
  memoryType?: string;
  confidence?: number;
  metadata?: Record<string, unknown>;
}
export interface Commentary {
  id: string;
  conversationId: string;
  /** null: the whole conversation. */
  targetId: string | null;
  authorRole: "user" | "assistant" | "moderator";
  content: string;
  rating?: number;
  commentType?: string;
  timestamp?: number;
}
export interface AssistantSentence {
  previousId: string;
  conversationId: string;
  sequence: number;
  text: string;
  id?: string;
  audio?: Uint8Array;
  isFinal?: boolean;
  sentiment?: unknown;
  tone?: unknown;
}

/** Body type by type code. */
export interface Bodies {
  1: ErrorMessage;
  2: UserMessage;
  3: AssistantMessage;
  4: AudioChunk;
  5: ReasoningStep;
  6: ToolUseRequest;
  7: ToolUseResult;
  8: Acknowledgement;
  9: Transcription;
  10: ControlStop;
  11: ControlVariation;
  12: Configuration;
  13: StartAnswer;
  14: MemoryTrace;
  15: Commentary;
  16: AssistantSentence;
}
export type BodyOf<T extends MessageTypeCode> = Bodies[T];
/** Any known body (an unknown type's body is kept as decoded). */
export type Body = Bodies[MessageTypeCode];

/** One protocol message. `type` selects how `body` reads; see `isType` to narrow it. */
export interface Envelope<T extends MessageTypeCode = MessageTypeCode> {
  stanzaId: number;
  conversationId: string;
  type: T;
  meta?: Record<string, unknown>;
  body: BodyOf<T>;
}
