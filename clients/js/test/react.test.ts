// The React layer renders a turn as the panel promises: steps collapsible per answer with
// the tool calls between them, the answer, the toggle (server-side rendering, no DOM).

import assert from "node:assert/strict";
import { test } from "node:test";

import { createElement } from "react";
import { renderToStaticMarkup } from "react-dom/server";

import { type Envelope, MessageType as T, TurnAssembler } from "../src/index";
import { type Reasoning, ReasoningPanel, ReasoningView } from "../src/react";

const C = "conv_1";
const e = (type: number, body: Record<string, unknown>): Envelope => ({ stanzaId: -1, conversationId: C, type, body }) as Envelope;

test("ReasoningView shows steps, tools and the answer; the panel renders without a room", () => {
  const a = new TurnAssembler();
  a.start("msg_1", "6 x 7?");
  a.feed(e(T.ReasoningStep, { id: "rs_2", conversationId: C, previousId: "msg_1", content: "then multiply", stepIndex: 2, totalSteps: 2 }));
  a.feed(e(T.ReasoningStep, { id: "rs_1", conversationId: C, previousId: "msg_1", content: "read <the> question", stepIndex: 1 }));
  a.feed(e(T.ToolUseRequest, { id: "tq", toolName: "calculator", parameters: { e: "6*7" }, execution: "server", previousId: "msg_1" }));
  a.feed(e(T.ToolUseResult, { requestId: "tq", success: true, result: { value: 42 } }));
  a.feed(e(T.StartAnswer, { id: "msg_a", previousId: "msg_1", conversationId: C }));
  a.feed(e(T.AssistantSentence, { previousId: "msg_a", conversationId: C, sequence: 1, text: "42.", isFinal: true }));
  const reasoning: Reasoning = {
    turns: a.turns,
    steps: a.turns[0].steps,
    answer: a.turns[0].answer,
    showReasoning: true,
    setShowReasoning: async () => undefined,
    ask: async () => "",
    stop: async () => undefined,
  };
  const html = renderToStaticMarkup(createElement(ReasoningView, { reasoning }));
  assert.match(html, /<details class="alicia-thinking"><summary>Thinking · <span class="alicia-count">2 steps<\/span><\/summary>/);
  const order = [...html.matchAll(/class="alicia-(step|tool)"/g)].map((m) => m[1]);
  assert.deepEqual(order, ["step", "step", "tool"]);
  assert.match(html, /step 1 of 2<\/span> <span class="alicia-step-text">read &lt;the&gt; question/);
  assert.match(html, /⚙ calculator.*→ \{&quot;value&quot;:42\}/);
  assert.match(html, /<div class="alicia-answer">42\.<\/div>/);
  assert.match(html, /data-state="done"/);
  assert.match(html, /type="checkbox"[^>]*checked=""/);
  // Outside a LiveKitRoom and without a room: an empty panel, no error.
  const empty = renderToStaticMarkup(createElement(ReasoningPanel, {}));
  assert.match(empty, /^<div class="alicia-reasoning" data-state="idle" data-reasoning="on"/);
});
