// Turn assembly: steps by stepIndex per previousId, tools, answers from sentences, partial,
// stopped and foreign turns, hidden steps, errors.

import assert from "node:assert/strict";
import { test } from "node:test";

import { type Envelope, MessageType as T, TurnAssembler } from "../src/index";

const C = "conv_1";
let stanza = 0;
const e = (type: number, body: Record<string, unknown>): Envelope =>
  ({ stanzaId: --stanza, conversationId: C, type, body }) as Envelope;
const step = (id: string, prev: string, i: number, content = `s${i}`) =>
  e(T.ReasoningStep, { id, conversationId: C, previousId: prev, content, stepIndex: i });
const sentence = (prev: string, n: number, text: string, isFinal = false) =>
  e(T.AssistantSentence, { previousId: prev, conversationId: C, sequence: n, text, isFinal });

test("steps are ordered by stepIndex per user message and de-duplicated by id", () => {
  const a = new TurnAssembler();
  a.start("msg_1", "q1");
  a.start("msg_2", "q2");
  for (const env of [step("rs_c", "msg_1", 3), step("rs_a", "msg_1", 1), step("rs_x", "msg_2", 1), step("rs_b", "msg_1", 2), step("rs_a", "msg_1", 1)]) {
    a.feed(env);
  }
  const [t1, t2] = a.turns;
  assert.deepEqual(t1.steps.map((s) => s.id), ["rs_a", "rs_b", "rs_c"]);
  assert.deepEqual(t2.steps.map((s) => s.stepIndex), [1]);
  assert.equal(t1.status, "thinking");
});

test("tools, then the answer from sentences in sequence order, end the turn", () => {
  const a = new TurnAssembler();
  a.start("msg_1", "6 x 7?");
  a.feed(step("rs_1", "msg_1", 1));
  const [tool] = a.feed(e(T.ToolUseRequest, { id: "tq", toolName: "calculator", parameters: { e: "6*7" }, execution: "server", previousId: "msg_1" }));
  assert.equal(tool.kind, "tool");
  a.feed(e(T.ToolUseResult, { requestId: "tq", success: true, result: { value: 42 } }));
  a.feed(e(T.StartAnswer, { id: "msg_a", previousId: "msg_1", conversationId: C }));
  assert.equal(a.turns[0].status, "answering");
  a.feed(sentence("msg_a", 2, " Easy. "));
  const events = a.feed(sentence("msg_a", 1, "The answer is 42.", false));
  assert.deepEqual(events.map((x) => x.kind), ["sentence"]);
  const end = a.feed(sentence("msg_a", 3, "", true));
  assert.deepEqual(end.map((x) => x.kind), ["sentence", "done"]);
  const t = a.turns[0];
  assert.equal(t.answer, "The answer is 42. Easy.");
  assert.equal(t.status, "done");
  assert.deepEqual(t.tools.map((x) => [x.request.toolName, x.result?.result, x.afterSteps]), [["calculator", { value: 42 }, 1]]);
  assert.equal(a.lastAnswerId, "msg_a");
  // Late sentences of a finished answer change nothing.
  assert.equal(a.feed(sentence("msg_a", 4, "more"))[0].kind, "other");
});

test("partial and stopped answers, errors, foreign and spoken turns, hidden steps", () => {
  const a = new TurnAssembler({ showReasoning: false });
  a.start("msg_1", "q");
  assert.equal(a.feed(step("rs_1", "msg_1", 1, "secret"))[0].kind, "step");
  assert.equal(a.turns[0].hiddenSteps, 1);
  assert.deepEqual(a.turns[0].steps, []); // hidden steps are counted, never kept
  a.feed(e(T.AssistantMessage, { id: "msg_a", conversationId: C, content: "half", previousId: "msg_1", state: "partial" }));
  assert.equal(a.turns[0].status, "partial");

  const s = new TurnAssembler();
  const own = s.start("msg_2", "long story");
  s.feed(e(T.StartAnswer, { id: "msg_b", previousId: "msg_2", conversationId: C }));
  s.stopRequested(own);
  s.feed(sentence("msg_b", 1, "Once", true));
  assert.equal(own.status, "stopped");

  // Another participant's question opens a turn of its own.
  s.feed(step("rs_9", "msg_other", 1));
  const foreign = s.lookup("msg_other");
  assert.ok(foreign && !foreign.own && foreign.question === "");
  // A final Transcription is a spoken user message.
  s.feed(e(T.Transcription, { id: "msg_t", conversationId: C, text: "hello", final: true }));
  assert.equal(s.lookup("msg_t")?.spoken, true);
  s.feed(e(T.Transcription, { id: "msg_i", conversationId: C, text: "hel", final: false }));
  assert.equal(s.lookup("msg_i"), undefined);
  // An error naming a turn ends it.
  const kinds = s.feed(e(T.ErrorMessage, { id: "", conversationId: C, code: 504, message: "busy", severity: 1, recoverable: true, originatingId: "msg_t" }));
  assert.deepEqual(kinds.map((k) => k.kind), ["error", "done"]);
  assert.equal(s.lookup("msg_t")?.status, "error");
  assert.deepEqual(s.endUnfinished(503, "gone").map((t) => t.userMessageId), []);
});

test("at most maxTurns turns are kept, oldest dropped", () => {
  const a = new TurnAssembler({ maxTurns: 2 });
  for (const id of ["m1", "m2", "m3"]) a.start(id, id);
  assert.deepEqual(a.turns.map((t) => t.userMessageId), ["m2", "m3"]);
});

test("a reopened turn takes a regenerated answer afresh, a continued one after the old", () => {
  const a = new TurnAssembler();
  const t = a.start("msg_1", "q");
  a.feed(e(T.StartAnswer, { id: "msg_a1", previousId: "msg_1", conversationId: C }));
  a.feed(sentence("msg_a1", 1, "Once upon", true));
  a.reopen(t, true);
  a.feed(e(T.StartAnswer, { id: "msg_a2", previousId: "msg_1", conversationId: C }));
  a.feed(sentence("msg_a2", 1, "a time.", true));
  assert.deepEqual([t.answer, t.status, a.lastAnswerId], ["Once upon a time.", "done", "msg_a2"]);
  a.reopen(t, false);
  a.feed(e(T.StartAnswer, { id: "msg_a3", previousId: "msg_1", conversationId: C }));
  a.feed(sentence("msg_a3", 1, "Fresh.", true));
  assert.equal(t.answer, "Fresh.");
});
