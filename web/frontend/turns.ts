// The conversation as the page shows it: one <article class="turn"> per user message, with
// a "thinking" panel of numbered steps, tool calls inline, and the answer. Envelopes are
// placed only by their ids (previousId, requestId, originatingId): another user's turn in
// the room is shown as that user's own turn.

import { Body, Envelope, MessageType, num, stepIndexOf, str } from "./protocol";

const MAX_TURNS = 200;

interface TurnView {
  userId: string;
  el: HTMLElement;
  steps: HTMLOListElement;
  count: HTMLElement;
  answer: HTMLElement;
  stepIds: Set<string>;
  sentences: Map<number, string>;
  answerId?: string;
  totalSteps?: number;
  shownSteps: number;
  hiddenSteps: number;
  done: boolean;
  own: boolean;
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string,
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function short(value: unknown, max = 300): string {
  const s = JSON.stringify(value ?? null);
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

export class TurnLog {
  /** The last answer to this page's own question (the next question's previousId). */
  lastAnswerId?: string;
  private turns = new Map<string, TurnView>();
  private byAnswer = new Map<string, string>();
  private byRequest = new Map<string, string>();

  constructor(
    private log: HTMLElement,
    public showReasoning: boolean,
  ) {}

  /** Show one server envelope of a turn (steps, tools, answers, transcriptions). */
  handle(env: Envelope): void {
    const b = env.body;
    switch (env.type) {
      case MessageType.ReasoningStep:
        return this.onStep(b);
      case MessageType.ToolUseRequest:
        return this.onToolRequest(b);
      case MessageType.ToolUseResult:
        return this.onToolResult(b);
      case MessageType.StartAnswer: {
        const turn = this.turnFor(str(b, "previousId"));
        const id = str(b, "id");
        if (turn && id) {
          turn.answerId = id;
          this.byAnswer.set(id, turn.userId);
          if (turn.own) this.lastAnswerId = id;
          turn.el.dataset.state = "answering";
        }
        return;
      }
      case MessageType.AssistantSentence:
        return this.onSentence(b);
      case MessageType.Transcription: {
        // What the agent heard someone say: the user message of the turn that follows.
        const id = str(b, "id");
        if (id && b.final !== false && !this.lookup(id)) {
          this.addTurn(id, `(spoken) ${str(b, "text") ?? ""}`, document.body.dataset.mic === "on");
        }
        return;
      }
      case MessageType.AssistantMessage: {
        const turn = this.lookup(str(b, "previousId")) ?? this.turnFor(str(b, "previousId"));
        if (!turn || turn.done) return;
        turn.answerId = str(b, "id");
        if (turn.own) this.lastAnswerId = turn.answerId;
        turn.answer.textContent = str(b, "content") ?? "";
        this.finish(turn, "done");
        return;
      }
      default:
        return;
    }
  }
  private lookup(id: string | undefined): TurnView | undefined {
    if (!id) return undefined;
    return this.turns.get(id) ?? this.turns.get(this.byAnswer.get(id) ?? "");
  }

  // The turn of a user message; another participant's message gets a turn of its own.
  private turnFor(userId: string | undefined): TurnView | undefined {
    if (!userId) return undefined;
    const known = this.lookup(userId);
    if (known) return known;
    this.addTurn(userId, "(another participant's message)", false);
    return this.turns.get(userId);
  }

  private onStep(b: Body): void {
    const turn = this.turnFor(str(b, "previousId", "messageId"));
    const id = str(b, "id");
    const index = stepIndexOf(b);
    if (!turn || !id || index === undefined || turn.stepIds.has(id)) return;
    turn.stepIds.add(id);
    if (!this.showReasoning) {
      turn.hiddenSteps++;
      turn.count.textContent = `reasoning hidden (${turn.hiddenSteps})`;
      return;
    }
    const total = num(b, "totalSteps");
    if (total !== undefined) turn.totalSteps = total;
    const li = el("li", "step");
    li.dataset.index = String(index);
    li.dataset.id = id;
    const label = turn.totalSteps ? `step ${index} of ${turn.totalSteps}` : `step ${index}`;
    const content = str(b, "content") || (str(b, "encryptedValue") ? "🔒 encrypted" : "");
    li.append(el("span", "step-no", label), el("span", "step-text", content));
    // Ordered by stepIndex; tool entries keep their arrival position.
    const later = [...turn.steps.querySelectorAll<HTMLElement>("li.step")].find(
      (s) => Number(s.dataset.index) > index,
    );
    turn.steps.insertBefore(li, later ?? null);
    turn.shownSteps++;
    turn.count.textContent = `${turn.shownSteps} step${turn.shownSteps === 1 ? "" : "s"}`;
    turn.el.dataset.steps = String(turn.shownSteps);
    if (turn.el.dataset.state === "pending") turn.el.dataset.state = "thinking";
  }

  private onToolRequest(b: Body): void {
    const turn = this.turnFor(str(b, "previousId", "messageId"));
    const id = str(b, "id");
    if (!turn || !id) return;
    this.byRequest.set(id, turn.userId);
    const li = el("li", "tool");
    li.dataset.requestId = id;
    li.append(
      el("span", "tool-name", `⚙ ${str(b, "toolName") ?? "tool"}`),
      el("span", "tool-args", ` ${short(b.parameters)} `),
      el("span", "tool-exec", `[${str(b, "execution") ?? "?"}]`),
      el("span", "tool-result", " …"),
    );
    turn.steps.append(li);
  }

  private onToolResult(b: Body): void {
    const reqId = str(b, "requestId");
    const turn = this.turns.get(this.byRequest.get(reqId ?? "") ?? "");
    const li = turn?.steps.querySelector<HTMLElement>(`li.tool[data-request-id="${CSS.escape(reqId ?? "")}"]`);
    const out = li?.querySelector(".tool-result");
    if (!out || !li) return;
    if (b.success === true) {
      out.textContent = ` → ${short(b.result ?? b.data)}`;
    } else {
      li.classList.add("failed");
      out.textContent = ` → failed: ${str(b, "errorMessage", "error", "errorCode") ?? "error"}`;
    }
  }

  private onSentence(b: Body): void {
    const prev = str(b, "previousId") ?? "";
    const turn = this.turns.get(this.byAnswer.get(prev) ?? "");
    const seq = num(b, "sequence");
    if (!turn || turn.done || seq === undefined || turn.sentences.has(seq)) return;
    const sentenceId = str(b, "id");
    if (sentenceId) this.byAnswer.set(sentenceId, turn.userId); // servers that chain sentences
    turn.sentences.set(seq, (str(b, "text") ?? "").trim());
    turn.answer.textContent = [...turn.sentences.entries()]
      .sort((x, y) => x[0] - y[0])
      .map(([, t]) => t)
      .filter((t) => t)
      .join(" ");
    if (b.isFinal === true) this.finish(turn, "done");
  }

  /** An error naming a turn (or its answer) is shown in it and ends it; false if none. */
  turnError(origin: string | undefined, text: string): boolean {
    const turn = this.lookup(origin);
    if (!turn) return false;
    turn.el.append(el("div", "error", text));
    if (!turn.done) this.finish(turn, "error");
    return true;
  }

  /** End every own turn still open with `text` (no one will finish them). */
  endUnfinished(text: string): void {
    for (const turn of this.turns.values()) {
      if (!turn.own || turn.done) continue;
      turn.el.append(el("div", "error", text));
      this.finish(turn, "error");
    }
  }

  private finish(turn: TurnView, state: string): void {
    turn.done = true;
    turn.el.dataset.state = state;
    if (turn.shownSteps === 0 && turn.hiddenSteps === 0) {
      turn.count.textContent = this.showReasoning ? "no reasoning steps" : "reasoning hidden";
    }
  }

  /** A new turn for a user message (this page's own unless `own` is false). */
  addTurn(userId: string, text: string, own = true): void {
    const article = el("article", "turn");
    article.dataset.userId = userId;
    article.dataset.state = "pending";
    article.dataset.steps = "0";
    article.dataset.own = own ? "yes" : "no";
    const user = el("div", "user");
    user.append(el("span", "who", own ? "you" : "someone else"), el("span", "text", text));
    const thinking = el("details", "thinking");
    thinking.open = this.showReasoning;
    const summary = el("summary", undefined, "Thinking · ");
    const count = el("span", "count", this.showReasoning ? "0 steps" : "reasoning hidden");
    summary.append(count);
    const steps = el("ol", "steps");
    thinking.append(summary, steps);
    const answer = el("div", "answer");
    article.append(user, thinking, answer);
    this.log.append(article);
    article.scrollIntoView({ block: "end" });
    this.turns.set(userId, {
      userId,
      el: article,
      steps,
      count,
      answer,
      stepIds: new Set(),
      sentences: new Map(),
      shownSteps: 0,
      hiddenSteps: 0,
      done: false,
      own,
    });
    while (this.turns.size > MAX_TURNS) {
      const oldest = this.turns.keys().next().value as string;
      this.turns.get(oldest)?.el.remove();
      this.turns.delete(oldest);
    }
  }
}
