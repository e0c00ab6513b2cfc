// @alicia/reasoning/react: the agent's reasoning in a React page built with
// @livekit/components-react. `useReasoning()` runs a ReasoningClient on the Room of
// LiveKit's RoomContext (or the `room` you pass); `<ReasoningPanel/>` renders it, unstyled:
// per answer a collapsible <details> of numbered steps with the tool calls between them,
// and a "show reasoning" checkbox. Class names start with "alicia-"; data-* attributes
// carry the state for styles and tests.

import { useMaybeRoomContext } from "@livekit/components-react";
import type { Room } from "livekit-client";
import { type ReactElement, type ReactNode, createElement as h, useEffect, useState, useSyncExternalStore } from "react";

import {
  ReasoningClient,
  type ReasoningClientOptions,
  type ReasoningSnapshot,
  type ReasoningState,
  type ToolCall,
  type Turn,
} from "./index";

/** What `useReasoning()` returns. */
export interface Reasoning {
  client?: ReasoningClient;
  state?: ReasoningState;
  turns: readonly Turn[];
  /** The latest turn, its steps and its answer so far (for a page that shows one). */
  lastTurn?: Turn;
  steps: Turn["steps"];
  answer: string;
  showReasoning: boolean;
  setShowReasoning: (show: boolean) => Promise<void>;
  ask: (text: string) => Promise<string>;
  stop: (turn?: Turn) => Promise<void>;
}

export interface UseReasoningOptions extends ReasoningClientOptions {
  /** The room (default: the one of LiveKit's RoomContext). */
  room?: Room;
}

const EMPTY: ReasoningSnapshot = { state: undefined as unknown as ReasoningState, turns: [] };
const noop = (): (() => void) => () => undefined;
const notReady = (): Promise<never> => Promise.reject(new Error("no room"));

const shared = new WeakMap<Room, { client: ReasoningClient; users: number }>();

/** The room's one ReasoningClient (made and started by its first user). */
function acquire(room: Room, options: ReasoningClientOptions): ReasoningClient {
  let entry = shared.get(room);
  if (!entry) {
    const client = new ReasoningClient(room, options);
    client.start().catch(() => undefined); // the failure is in the state
    entry = { client, users: 0 };
    shared.set(room, entry);
  }
  entry.users++;
  return entry.client;
}

/** Its last user gone (and not back within a tick, as in StrictMode), the client closes. */
function release(room: Room): void {
  const entry = shared.get(room);
  if (!entry || --entry.users > 0) return;
  setTimeout(() => {
    if (entry.users > 0 || shared.get(room) !== entry) return;
    shared.delete(room);
    entry.client.close();
  }, 0);
}

/** The agent's reasoning in `room` (or RoomContext's). Every component that calls it on
 * one room shares one ReasoningClient (the first caller's options count), started at
 * once (it waits for the room to connect) and closed after the last one unmounts. */
export function useReasoning(options: UseReasoningOptions = {}): Reasoning {
  const contextRoom = useMaybeRoomContext();
  const room = options.room ?? contextRoom;
  const [client, setClient] = useState<ReasoningClient>();
  useEffect(() => {
    if (!room) return undefined;
    setClient(acquire(room, options));
    return () => release(room);
    // The options are read when the room's client is made; a new room, a new client.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [room]);
  const snap = useSyncExternalStore(
    client?.subscribe ?? noop,
    client?.getSnapshot ?? (() => EMPTY),
    client?.getSnapshot ?? (() => EMPTY),
  );
  const lastTurn = snap.turns[snap.turns.length - 1];
  return {
    client,
    state: client && snap.state,
    turns: snap.turns,
    lastTurn,
    steps: lastTurn?.steps ?? [],
    answer: lastTurn?.answer ?? "",
    showReasoning: client ? snap.state.showReasoning : (options.showReasoning ?? true),
    setShowReasoning: client ? (show) => client.setShowReasoning(show) : notReady,
    ask: client ? (text) => client.ask(text) : notReady,
    stop: client ? (turn) => client.stop(turn) : notReady,
  };
}

function short(value: unknown, max = 300): string {
  const s = JSON.stringify(value ?? null) ?? "";
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

/** One tool call: name, arguments, where it runs, and its outcome. */
export function ToolCallView({ tool }: { tool: ToolCall }): ReactElement {
  const r = tool.result;
  const outcome = !r ? " …" : r.success ? ` → ${short(r.result)}` : ` → failed: ${r.errorMessage ?? r.errorCode ?? "error"}`;
  return h(
    "li",
    { className: "alicia-tool", "data-request-id": tool.request.id, "data-state": !r ? "running" : r.success ? "ok" : "failed" },
    h("span", { className: "alicia-tool-name" }, `⚙ ${tool.request.toolName}`),
    h("span", { className: "alicia-tool-args" }, ` ${short(tool.request.parameters)} `),
    h("span", { className: "alicia-tool-result" }, outcome),
  );
}

/** One turn: the question, its steps (collapsible, tools in arrival order) and the answer. */
export function TurnView({ turn, showReasoning }: { turn: Turn; showReasoning: boolean }): ReactElement {
  const items: ReactNode[] = [];
  let t = 0;
  const tools = (upTo: number): void => {
    for (; t < turn.tools.length && turn.tools[t].afterSteps <= upTo; t++) {
      items.push(h(ToolCallView, { key: turn.tools[t].request.id, tool: turn.tools[t] }));
    }
  };
  turn.steps.forEach((s, i) => {
    tools(i);
    const label = turn.totalSteps ? `step ${s.stepIndex} of ${turn.totalSteps}` : `step ${s.stepIndex}`;
    const text = s.content || (s.encryptedValue ? "🔒 encrypted" : "");
    items.push(
      h(
        "li",
        { key: s.id, className: "alicia-step", "data-index": s.stepIndex },
        h("span", { className: "alicia-step-no" }, label),
        " ",
        h("span", { className: "alicia-step-text" }, text),
      ),
    );
  });
  tools(Number.POSITIVE_INFINITY);
  const n = turn.steps.length;
  const count =
    n > 0
      ? `${n} step${n === 1 ? "" : "s"}`
      : turn.hiddenSteps > 0 || !showReasoning
        ? `reasoning hidden${turn.hiddenSteps ? ` (${turn.hiddenSteps})` : ""}`
        : turn.finished
          ? "no reasoning steps"
          : "thinking…";
  return h(
    "section",
    { className: "alicia-turn", "data-user-id": turn.userMessageId, "data-state": turn.status, "data-steps": n },
    turn.question && h("p", { className: "alicia-question" }, turn.question),
    h(
      "details",
      { className: "alicia-thinking", open: !turn.finished && showReasoning },
      h("summary", null, "Thinking · ", h("span", { className: "alicia-count" }, count)),
      h("ol", { className: "alicia-steps" }, items),
    ),
    h("div", { className: "alicia-answer" }, turn.answer),
    turn.error && h("div", { className: "alicia-error", role: "alert" }, `error ${turn.error.code}: ${turn.error.message}`),
  );
}

/** The "show reasoning" checkbox. */
export function ShowReasoningToggle({ reasoning }: { reasoning: Reasoning }): ReactElement {
  const [busy, setBusy] = useState(false);
  return h(
    "label",
    { className: "alicia-toggle" },
    h("input", {
      type: "checkbox",
      checked: reasoning.showReasoning,
      disabled: busy || !reasoning.client,
      onChange: (e: { target: { checked: boolean } }) => {
        setBusy(true);
        reasoning
          .setShowReasoning(e.target.checked)
          .catch(() => undefined)
          .finally(() => setBusy(false));
      },
    }),
    " show reasoning",
  );
}

/** Every turn of `reasoning` (from useReasoning) with the toggle above them. */
export function ReasoningView({ reasoning }: { reasoning: Reasoning }): ReactElement {
  const state = reasoning.state;
  return h(
    "div",
    {
      className: "alicia-reasoning",
      "data-state": state?.status ?? "idle",
      "data-reasoning": reasoning.showReasoning ? "on" : "off",
      "data-granted": state?.granted ?? "",
    },
    h(ShowReasoningToggle, { reasoning }),
    reasoning.turns.map((turn) => h(TurnView, { key: turn.userMessageId, turn, showReasoning: reasoning.showReasoning })),
  );
}

/** Drop-in panel: `useReasoning(props)` on the RoomContext's room, rendered by ReasoningView. */
export function ReasoningPanel(props: UseReasoningOptions): ReactElement {
  return h(ReasoningView, { reasoning: useReasoning(props) });
}
