// Turn assembly: fold the server's envelopes into one Turn per user message (the rules of
// client/assembly.py). Pure bookkeeping, no I/O; `feed` returns the events a renderer
// shows. Envelopes are placed only by their ids, never "into the latest open turn":
//
// * ReasoningStep / ToolUseRequest previousId (alias messageId) → the user message, or
//   an answer id of it; a user message this client did not send opens a turn of its own
//   (own = false, question unknown);
// * ToolUseResult requestId → its request's turn;
// * StartAnswer previousId → the user message; AssistantSentence previousId → the
//   StartAnswer id (or an earlier sentence's id, as some servers chain them); the final
//   sentence or an AssistantMessage ends the turn;
// * a final Transcription is a (spoken) user message; ErrorMessage originatingId → that
//   turn, and ends it.
//
// Steps are ordered by stepIndex (per previousId) and de-duplicated by id; sentences by
// sequence. Steps that arrive while show-reasoning is off are only counted, never kept.

import type {
  AssistantMessage,
  AssistantSentence,
  Envelope,
  ErrorMessage,
  ReasoningStep,
  StartAnswer,
  ToolUseRequest,
  ToolUseResult,
  Transcription,
} from "./messages";
import { MessageType } from "./messages";

/** Where a turn stands. `partial`: the answer ended early (the server said so);
 * `stopped`: it ended after this client asked to stop it. */
export type TurnStatus = "pending" | "thinking" | "answering" | "done" | "partial" | "stopped" | "error";

/** One tool call of a turn. */
export interface ToolCall {
  request: ToolUseRequest;
  result?: ToolUseResult;
  /** How many steps of the turn had arrived when it was requested (for interleaving). */
  afterSteps: number;
}

/** Everything the server sent about one user message. */
export interface Turn {
  userMessageId: string;
  /** The question as this client knows it ("" for another participant's message). */
  question: string;
  /** This client asked it (false: another participant's turn). */
  own: boolean;
  /** The question came as a final Transcription (speech). */
  spoken: boolean;
  status: TurnStatus;
  /** Reasoning steps shown, ordered by stepIndex. */
  steps: ReasoningStep[];
  /** Steps that arrived while show-reasoning was off (counted, not kept). */
  hiddenSteps: number;
  /** The announced step count, if the server sent one. */
  totalSteps?: number;
  tools: ToolCall[];
  answerId?: string;
  /** The answer so far: sentences by sequence, joined by a space (or the whole message). */
  answer: string;
  error?: ErrorMessage | { code: number; message: string };
  finished: boolean;
  /** This client asked to stop it. */
  stopRequested: boolean;
}

/** What one envelope changed. */
export type TurnEvent =
  | { kind: "turn"; turn: Turn }
  | { kind: "step"; turn: Turn; step: ReasoningStep; shown: boolean }
  | { kind: "tool"; turn: Turn; tool: ToolCall }
  | { kind: "toolResult"; turn: Turn; tool: ToolCall }
  | { kind: "answerStarted"; turn: Turn; start: StartAnswer }
  | { kind: "sentence"; turn: Turn; sentence: AssistantSentence }
  | { kind: "done"; turn: Turn }
  | { kind: "error"; turn?: Turn; error: ErrorMessage }
  | { kind: "other"; envelope: Envelope };

/** Builds Turn objects from the server's envelopes (see the module comment). */
export class TurnAssembler {
  /** Keep (and count) steps as shown; off: only count them. */
  showReasoning: boolean;
  /** Final Transcriptions are this client's own speech (its microphone is on). */
  ownSpeech = false;
  /** The last answer id of this client's own turns (the next question's previousId). */
  lastAnswerId?: string;
  private readonly max: number;
  private byUser = new Map<string, Turn>();
  private byAnswer = new Map<string, string>();
  private byRequest = new Map<string, [ToolCall, string]>();
  private stepIds = new Map<string, Set<string>>();
  private sentences = new Map<string, Map<number, string>>();
  private prefixes = new Map<string, string>();

  /** `maxTurns`: the oldest turns are dropped beyond it. */
  constructor(options: { showReasoning?: boolean; maxTurns?: number } = {}) {
    this.showReasoning = options.showReasoning ?? true;
    this.max = Math.max(1, options.maxTurns ?? 200);
  }

  /** The kept turns, oldest first. */
  get turns(): Turn[] {
    return [...this.byUser.values()];
  }

  /** The turn of a user message, or of one of its answers' ids. */
  lookup(id: string | undefined): Turn | undefined {
    if (!id) return undefined;
    return this.byUser.get(id) ?? this.byUser.get(this.byAnswer.get(id) ?? "");
  }

  /** Open the turn of a user message this client sends (or one it heard, `own` false). */
  start(userMessageId: string, question: string, own = true, spoken = false): Turn {
    const turn: Turn = {
      userMessageId,
      question,
      own,
      spoken,
      status: "pending",
      steps: [],
      hiddenSteps: 0,
      tools: [],
      answer: "",
      finished: false,
      stopRequested: false,
    };
    this.byUser.set(userMessageId, turn);
    this.stepIds.set(userMessageId, new Set());
    this.sentences.set(userMessageId, new Map());
    for (const [oldId, old] of this.byUser) {
      if (this.byUser.size <= this.max) break;
      this.byUser.delete(oldId);
      this.stepIds.delete(oldId);
      this.sentences.delete(oldId);
      this.prefixes.delete(oldId);
      for (const [k, v] of this.byAnswer) if (v === oldId) this.byAnswer.delete(k);
      for (const t of old.tools) this.byRequest.delete(t.request.id);
    }
    return turn;
  }

  /** Apply one server envelope; the events it causes, in order. */
  feed(env: Envelope): TurnEvent[] {
    switch (env.type) {
      case MessageType.ReasoningStep:
        return this.step(env.body as ReasoningStep);
      case MessageType.ToolUseRequest: {
        const b = env.body as ToolUseRequest;
        const turn = this.turnFor(b.previousId);
        if (!turn) return [{ kind: "other", envelope: env }];
        const tool: ToolCall = { request: b, afterSteps: turn.steps.length };
        turn.tools.push(tool);
        this.byRequest.set(b.id, [tool, turn.userMessageId]);
        return [{ kind: "tool", turn, tool }];
      }
      case MessageType.ToolUseResult: {
        const b = env.body as ToolUseResult;
        const [tool, owner] = this.byRequest.get(b.requestId) ?? [];
        const turn = this.byUser.get(owner ?? "");
        if (!tool || !turn) return [{ kind: "other", envelope: env }];
        tool.result = b;
        return [{ kind: "toolResult", turn, tool }];
      }
      case MessageType.StartAnswer: {
        const b = env.body as StartAnswer;
        const turn = this.turnFor(b.previousId) as Turn;
        this.answered(turn, b.id);
        if (!turn.finished) turn.status = "answering";
        return [{ kind: "answerStarted", turn, start: b }];
      }
      case MessageType.AssistantSentence:
        return this.sentence(env, env.body as AssistantSentence);
      case MessageType.AssistantMessage: {
        const b = env.body as AssistantMessage;
        const turn = this.turnFor(b.previousId);
        if (!turn || turn.finished) return [{ kind: "other", envelope: env }];
        this.answered(turn, b.id);
        turn.answer = b.content;
        return this.finish(turn, b.state === "partial" ? "partial" : "done");
      }
      case MessageType.Transcription: {
        // What the agent heard someone say: the user message of the turn that follows.
        const b = env.body as Transcription;
        if (b.final === false || this.lookup(b.id)) return [{ kind: "other", envelope: env }];
        return [{ kind: "turn", turn: this.start(b.id, b.text, this.ownSpeech, true) }];
      }
      case MessageType.ErrorMessage: {
        const b = env.body as ErrorMessage;
        const turn = this.lookup(b.originatingId);
        if (!turn) return [{ kind: "error", error: b }];
        turn.error = b;
        const events: TurnEvent[] = [{ kind: "error", turn, error: b }];
        return turn.finished ? events : [...events, ...this.finish(turn, "error")];
      }
      default:
        return [{ kind: "other", envelope: env }];
    }
  }

  /** End every own turn still open with an error (no one will finish them). */
  endUnfinished(code: number, message: string): Turn[] {
    const ended: Turn[] = [];
    for (const turn of this.byUser.values()) {
      if (!turn.own || turn.finished) continue;
      turn.error = { code, message };
      this.finish(turn, "error");
      ended.push(turn);
    }
    return ended;
  }

  /** A ControlVariation asks for a new answer to `turn`: open it again; its answer
   * starts afresh (`regenerate`) or goes on from what was said (`continue`). */
  reopen(turn: Turn, keepAnswer: boolean): void {
    turn.finished = false;
    turn.stopRequested = false;
    turn.status = "pending";
    turn.error = undefined;
    this.prefixes.set(turn.userMessageId, keepAnswer ? turn.answer : "");
    if (!keepAnswer) turn.answer = "";
    this.sentences.set(turn.userMessageId, new Map());
  }

  /** Note that this client asked to stop `turn` (its end then reads as `stopped`). */
  stopRequested(turn: Turn): void {
    turn.stopRequested = true;
  }

  private answered(turn: Turn, id: string): void {
    turn.answerId = id;
    this.byAnswer.set(id, turn.userMessageId);
    if (turn.own) this.lastAnswerId = id;
  }

  // The turn of a message id; an unknown user message gets a turn of its own.
  private turnFor(id: string | undefined): Turn | undefined {
    if (!id) return undefined;
    return this.lookup(id) ?? this.start(id, "", false);
  }

  private finish(turn: Turn, status: TurnStatus): TurnEvent[] {
    turn.finished = true;
    turn.status = turn.stopRequested && (status === "done" || status === "partial") ? "stopped" : status;
    return [{ kind: "done", turn }];
  }

  private step(b: ReasoningStep): TurnEvent[] {
    const turn = this.turnFor(b.previousId) as Turn;
    const seen = this.stepIds.get(turn.userMessageId) as Set<string>;
    if (seen.has(b.id)) return [];
    seen.add(b.id);
    if (turn.status === "pending") turn.status = "thinking";
    if (!this.showReasoning) {
      turn.hiddenSteps++;
      return [{ kind: "step", turn, step: b, shown: false }];
    }
    if (b.totalSteps !== undefined) turn.totalSteps = b.totalSteps;
    const steps = turn.steps;
    let pos = steps.length;
    while (pos > 0 && steps[pos - 1].stepIndex > b.stepIndex) pos--;
    steps.splice(pos, 0, b);
    return [{ kind: "step", turn, step: b, shown: true }];
  }

  private sentence(env: Envelope, b: AssistantSentence): TurnEvent[] {
    const turn = this.byUser.get(this.byAnswer.get(b.previousId) ?? "");
    if (!turn || turn.finished) return [{ kind: "other", envelope: env }];
    const parts = this.sentences.get(turn.userMessageId) as Map<number, string>;
    if (parts.has(b.sequence)) return [];
    if (b.id) this.byAnswer.set(b.id, turn.userMessageId); // servers that chain sentences
    parts.set(b.sequence, b.text.trim());
    turn.answer = [this.prefixes.get(turn.userMessageId) ?? "", ...[...parts.entries()].sort((x, y) => x[0] - y[0]).map(([, t]) => t)]
      .filter((t) => t)
      .join(" ");
    if (turn.status === "pending" || turn.status === "thinking") turn.status = "answering";
    const events: TurnEvent[] = [{ kind: "sentence", turn, sentence: b }];
    return b.isFinal === true ? [...events, ...this.finish(turn, "done")] : events;
  }
}
