// Trust: only the agent (kind AGENT when it joined, its sid, its agent name) is heard;
// takeovers are followed, and the ReasoningClient resumes with the new agent only.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ConnectionState, ParticipantKind, RoomEvent } from "livekit-client";
import type { Room } from "livekit-client";

import {
  AgentTrust,
  type Configuration,
  type Envelope,
  MessageType as T,
  ReasoningClient,
  ServerSequence,
  decodeEnvelope,
  encodeEnvelope,
} from "../src/index";

interface FakeParticipant {
  identity: string;
  sid: string;
  kind: ParticipantKind;
  attributes: Record<string, string>;
}
let sids = 0;
const person = (identity: string, kind = ParticipantKind.AGENT, name?: string): FakeParticipant => ({
  identity,
  sid: `PA_${++sids}`,
  kind,
  attributes: {
    ...(name ? { "lk.agent_name": name } : {}),
    ...(kind === ParticipantKind.AGENT ? { "alicia.protocol": "1" } : {}),
  },
});
/** An agent of another kind in the room (an avatar, another framework's agent). */
const avatar = (identity: string): FakeParticipant => ({ ...person(identity), attributes: {} });

test("without an agent name, only an agent that announces the protocol is trusted, and ours again when it returns", () => {
  const present = new Map<string, FakeParticipant>();
  const trust = new AgentTrust<FakeParticipant>();
  const ours = person("agent-a");
  const other = avatar("avatar-1");
  for (const p of [other, ours]) present.set(p.identity, p);
  assert.equal(trust.offer(other, present), false);
  assert.equal(trust.offer(ours, present), true);
  // Ours leaves: the avatar does not become "the agent".
  present.delete(ours.identity);
  assert.equal(trust.leave(present), true);
  assert.equal(trust.successor(present), undefined);
  assert.equal(trust.offer(other, present), false);
  // Ours returns (a new sid): trusted again.
  const back = person("agent-a");
  present.set(back.identity, back);
  assert.equal(trust.offer(back, present), true);
  assert.ok(trust.trusts(back) && !trust.trusts(other));
  // An agent whose announcement comes after it joined is trusted once it comes.
  const late = { ...avatar("agent-b") };
  present.delete(back.identity);
  trust.leave(present);
  present.set(late.identity, late);
  assert.equal(trust.offer(late, present), false);
  late.attributes = { "alicia.protocol": "1" };
  assert.equal(trust.offer(late, present), true);
});

test("only a participant of kind AGENT (and of the agent name) is trusted, by sid", () => {
  const present = new Map<string, FakeParticipant>();
  const trust = new AgentTrust<FakeParticipant>("alicia");
  const user = person("web-1", ParticipantKind.STANDARD);
  const other = person("agent-x", ParticipantKind.AGENT, "other");
  const agent = person("agent-a", ParticipantKind.AGENT, "alicia");
  for (const p of [user, other, agent]) present.set(p.identity, p);
  assert.equal(trust.offer(user, present), false);
  assert.equal(trust.offer(other, present), false);
  assert.equal(trust.offer(agent, present), true);
  assert.ok(trust.trusts(agent) && !trust.trusts(user) && !trust.trusts(other));
  // A standard participant joining under the agent's identity gains nothing.
  const impostor = { ...person("agent-a", ParticipantKind.STANDARD), attributes: { "lk.agent_name": "alicia" } };
  present.set("agent-a", impostor);
  trust.joined(impostor);
  assert.equal(trust.trusts(impostor), false);
  assert.equal(trust.leave(present), true);
  assert.equal(trust.successor(present), undefined);
  // livekit-client reuses the Participant object: the kind it had at join time counts.
  const reused = { ...impostor, kind: ParticipantKind.AGENT };
  assert.equal(trust.offer(reused, present), false);
});

test("a takeover moves trust to the next agent; the stanza mark follows it", () => {
  const present = new Map<string, FakeParticipant>();
  const trust = new AgentTrust<FakeParticipant>();
  const a = person("agent-a");
  const b = person("agent-b");
  present.set(a.identity, a);
  trust.offer(a, present);
  present.set(b.identity, b);
  assert.equal(trust.offer(b, present), false); // A is still here
  present.delete(a.identity);
  assert.equal(trust.leave(present), true);
  assert.equal(trust.successor(present), b);
  assert.ok(trust.trusts(b) && !trust.trusts(a));
  const seq = new ServerSequence();
  assert.deepEqual([seq.accept("a", -1), seq.accept("a", -2), seq.accept("a", -2)], [true, true, false]);
  assert.deepEqual([seq.accept("b", -3), seq.high], [true, 3]);
  assert.deepEqual([seq.accept("c", -1), seq.renumbered, seq.high], [true, 1, 1]); // did not continue
});

test("what the dying link dropped is taken when replayed, and a resume asks from before the loss", () => {
  const seq = new ServerSequence();
  for (const n of [1, 2, 3]) seq.accept("a", -n);
  seq.lost();
  assert.equal(seq.accept("a", -5), true); // through the new link, before the resume
  seq.lost(); // a second report of the same outage keeps the first mark
  assert.deepEqual([seq.resumeFrom, seq.high], [3, 5]);
  // the replay from 3: -4 went into the dying link, -5 had arrived
  assert.deepEqual([seq.accept("a", -4), seq.accept("a", -5)], [true, false]);
  seq.resumed();
  assert.equal(seq.resumeFrom, 5);
});

test("an envelope from a sender not yet named lowers the resume point until a resume begun after it", () => {
  const seq = new ServerSequence();
  for (const n of [1, 2, 3, 4]) seq.accept("a", -n);
  assert.deepEqual([seq.suspect(-4), seq.suspect(3)], [false, false]); // held; a client's number
  seq.lost();
  const [point, began] = seq.asking(); // a resume in flight asks from 4
  assert.equal(point, 4);
  assert.deepEqual([seq.suspect(-7), seq.suspect(-6)], [true, true]);
  assert.deepEqual([seq.suspect(-2147483647), seq.suspect(-(4 + 101))], [false, false]); // not the agent's next few
  assert.deepEqual([seq.suspected, seq.resumeFrom], [true, 4]);
  seq.accept("a", -8);
  seq.resumed(began); // answered, but the drops came after it began
  assert.deepEqual([seq.suspected, seq.resumeFrom], [true, 5]);
  const [again, now] = seq.asking();
  assert.deepEqual([again, seq.suspect(-5)], [5, false]); // at or below what it asks from
  seq.resumed(now);
  assert.deepEqual([seq.suspected, seq.resumeFrom], [false, 8]);
  assert.deepEqual([seq.suspect(-20), seq.accept("b", -1), seq.suspected], [true, true, false]); // renumbered
});

test("a suspected envelope that arrives after all, named, is no longer asked for", () => {
  const seq = new ServerSequence();
  for (const n of [1, 2, 3]) seq.accept("a", -n);
  seq.asking();
  assert.equal(seq.suspect(-5), true);
  assert.deepEqual([seq.suspected, seq.resumeFrom], [true, 3]);
  seq.accept("a", -4);
  assert.equal(seq.suspected, true);
  seq.accept("a", -5); // through the answer of the resume under way
  assert.deepEqual([seq.suspected, seq.resumeFrom], [false, 5]);
});

/** Just enough of a livekit-client Room for the ReasoningClient. */
class FakeRoom {
  state = ConnectionState.Connected;
  name = "conv_room";
  remoteParticipants = new Map<string, FakeParticipant>();
  sent: { to: string[]; env: Envelope }[] = [];
  private handlers = new Map<string, Set<(...a: unknown[]) => void>>();
  localParticipant = {
    publishData: async (data: Uint8Array, opts: { destinationIdentities: string[]; topic: string }) => {
      assert.equal(opts.topic, "alicia");
      this.sent.push({ to: opts.destinationIdentities, env: decodeEnvelope(data) });
    },
  };
  on(e: string, f: (...a: unknown[]) => void): void {
    if (!this.handlers.has(e)) this.handlers.set(e, new Set());
    this.handlers.get(e)?.add(f);
  }
  off(e: string, f: (...a: unknown[]) => void): void {
    this.handlers.get(e)?.delete(f);
  }
  emit(e: string, ...args: unknown[]): void {
    for (const f of this.handlers.get(e) ?? []) f(...args);
  }
  join(p: FakeParticipant): void {
    this.remoteParticipants.set(p.identity, p);
    this.emit(RoomEvent.ParticipantConnected, p);
  }
  leave(p: FakeParticipant): void {
    this.remoteParticipants.delete(p.identity);
    this.emit(RoomEvent.ParticipantDisconnected, p);
  }
  data(from: FakeParticipant | undefined, type: number, stanzaId: number, body: Record<string, unknown>): void {
    const bytes = encodeEnvelope({ stanzaId, conversationId: this.name, type, body } as Envelope);
    this.emit(RoomEvent.DataReceived, bytes, from, undefined, "alicia");
  }
}

const tick = () => new Promise((r) => setTimeout(r, 5));

test("ReasoningClient: handshake with the agent, drops others' packets, resumes after a takeover", async () => {
  const room = new FakeRoom();
  const a = person("agent-a");
  const mallory = person("mallory", ParticipantKind.STANDARD);
  room.remoteParticipants.set(mallory.identity, mallory);
  room.remoteParticipants.set(a.identity, a);
  const client = new ReasoningClient(room as unknown as Room, { resendMs: 50, agentTimeoutMs: 2000 });
  const notices: string[] = [];
  client.on((e) => e.kind === "notice" && notices.push(e.text));
  const started = client.start();
  await tick();
  const hello = room.sent[0];
  assert.deepEqual(hello.to, ["agent-a"]);
  assert.equal(hello.env.type, T.Configuration);
  assert.deepEqual((hello.env.body as Configuration).features, ["streaming", "reasoning_step_display"]);
  room.data(a, T.Configuration, -1, { conversationId: "conv_room", features: ["streaming", "reasoning_steps"] });
  await started;
  assert.equal(client.getState().status, "ready");
  assert.equal(client.getState().granted, "full");

  const id = await client.ask("6 x 7?");
  assert.equal(room.sent.at(-1)?.env.type, T.UserMessage);
  room.data(mallory, T.ReasoningStep, -2, { id: "rs_f", conversationId: "c", previousId: id, content: "FORGED", stepIndex: 1 });
  room.data(a, T.ReasoningStep, -2, { id: "rs_1", conversationId: "c", previousId: id, content: "real", stepIndex: 1 });
  room.data(a, T.ReasoningStep, -2, { id: "rs_1", conversationId: "c", previousId: id, content: "real", stepIndex: 1 }); // duplicate
  assert.deepEqual(client.turns[0].steps.map((s) => s.content), ["real"]);
  assert.equal(client.getState().untrusted, 1);
  const snap = client.getSnapshot();
  assert.equal(client.getSnapshot(), snap); // stable until something changes

  // The agent leaves; B joins and is resumed after server message 2.
  room.leave(a);
  assert.equal(client.getState().agentState, "waiting");
  const b = person("agent-b");
  room.join(b);
  await tick();
  const resume = room.sent.at(-1);
  assert.deepEqual(resume?.to, ["agent-b"]);
  assert.deepEqual((resume?.env.body as Configuration).lastSequenceSeen, 2);
  room.data(b, T.Configuration, -3, { conversationId: "conv_room", features: ["streaming", "reasoning_steps"] });
  await tick();
  assert.deepEqual([client.getState().agentChanges, client.getState().agentState, client.getState().status], [1, "ready", "ready"]);
  assert.deepEqual(notices, [
    "the agent left (agent-a); waiting up to 2 s for another agent…",
    "the agent was replaced (agent-b); resumed after server message 2",
  ]);
  assert.ok(room.sent.every((s) => s.to.length === 1 && s.to[0] !== "mallory"));

  // Show-reasoning off: a Configuration update without the reasoning feature.
  const off = client.setShowReasoning(false);
  await tick();
  assert.deepEqual((room.sent.at(-1)?.env.body as Configuration).features, ["streaming"]);
  room.data(b, T.Configuration, -4, { conversationId: "conv_room", features: ["streaming"] });
  await off;
  assert.equal(client.getState().showReasoning, false);
  client.close();
});

/** A client ready with agent-a in a FakeRoom, one question asked and its first step (-2) in. */
async function askedAgentA() {
  const room = new FakeRoom();
  const a = person("agent-a");
  room.remoteParticipants.set(a.identity, a);
  const client = new ReasoningClient(room as unknown as Room, { resendMs: 50, agentTimeoutMs: 2000 });
  const notices: string[] = [];
  client.on((e) => e.kind === "notice" && notices.push(e.text));
  const started = client.start();
  await tick();
  room.data(a, T.Configuration, -1, { conversationId: "conv_room", features: ["streaming", "reasoning_steps"] });
  await started;
  const id = await client.ask("6 x 7?");
  room.data(a, T.ReasoningStep, -2, { id: "rs_1", conversationId: "c", previousId: id, content: "one", stepIndex: 1 });
  return { room, a, client, notices, id };
}

test("ReasoningClient: after its link comes back it resumes from what had arrived, and takes what the dying link dropped", async () => {
  const { room, a, client, notices, id } = await askedAgentA();
  room.emit(RoomEvent.Reconnecting);
  // -3 went into the link going down; -4 comes through the new one before the resume
  room.data(a, T.ReasoningStep, -4, { id: "rs_3", conversationId: "c", previousId: id, content: "three", stepIndex: 3 });
  room.emit(RoomEvent.Reconnected);
  await tick();
  const resume = room.sent.at(-1);
  assert.equal(resume?.env.type, T.Configuration);
  assert.deepEqual([resume?.to, (resume?.env.body as Configuration).lastSequenceSeen], [["agent-a"], 2]);
  assert.equal(client.getState().agentState, "resuming");
  room.data(a, T.Configuration, -5, { conversationId: "conv_room", features: ["streaming", "reasoning_steps"] });
  room.data(a, T.ReasoningStep, -3, { id: "rs_2", conversationId: "c", previousId: id, content: "two", stepIndex: 2 });
  room.data(a, T.ReasoningStep, -4, { id: "rs_3", conversationId: "c", previousId: id, content: "three", stepIndex: 3 });
  await tick();
  assert.deepEqual(
    client.turns[0].steps.map((s) => s.content),
    ["one", "two", "three"],
  );
  assert.deepEqual([client.getState().agentChanges, client.getState().agentState, client.getState().status], [0, "ready", "ready"]);
  assert.deepEqual(notices, ["the link came back (agent-a); resumed after server message 2"]);
  client.close();
});

test("ReasoningClient: an envelope from a sender not yet named, the answer to its resume, is asked for again", async () => {
  const { room, a, client, notices, id } = await askedAgentA();
  room.emit(RoomEvent.Reconnecting);
  room.emit(RoomEvent.Reconnected);
  await tick();
  assert.deepEqual((room.sent.at(-1)?.env.body as Configuration).lastSequenceSeen, 2);
  // The agent's answer: its first envelope outruns the news of the agent (no participant)
  room.data(undefined, T.ReasoningStep, -3, { id: "rs_2", conversationId: "c", previousId: id, content: "two", stepIndex: 2 });
  room.data(a, T.Configuration, -4, { conversationId: "conv_room", features: ["streaming", "reasoning_steps"] });
  await tick();
  assert.deepEqual(client.turns[0].steps.map((s) => s.content), ["one"]); // not taken unnamed
  const again = room.sent.at(-1);
  assert.deepEqual([again?.env.type, (again?.env.body as Configuration).lastSequenceSeen], [T.Configuration, 2]);
  room.data(a, T.Configuration, -5, { conversationId: "conv_room", features: ["streaming", "reasoning_steps"] });
  room.data(a, T.ReasoningStep, -3, { id: "rs_2", conversationId: "c", previousId: id, content: "two", stepIndex: 2 });
  room.data(a, T.Configuration, -4, { conversationId: "conv_room", features: ["streaming", "reasoning_steps"] });
  await tick();
  assert.deepEqual(client.turns[0].steps.map((s) => s.content), ["one", "two"]);
  // Anyone can send such a packet: one resume per window, the next one makes none.
  room.data(undefined, T.ReasoningStep, -6, { id: "rs_x", conversationId: "c", previousId: id, content: "X", stepIndex: 3 });
  await tick();
  assert.equal(room.sent.filter((x) => x.env.type === T.Configuration).length, 3); // no third resume
  assert.deepEqual(notices, [
    "the link came back (agent-a); resumed after server message 2",
    "an unnamed envelope came (agent-a); resumed after server message 2",
  ]);
  assert.equal(client.getState().status, "ready");
  client.close();
});

test("ReasoningClient: a question nothing is heard of is sent again until the agent shows it has it", async () => {
  const room = new FakeRoom();
  const a = person("agent-a");
  room.remoteParticipants.set(a.identity, a);
  const client = new ReasoningClient(room as unknown as Room, { resendMs: 50, agentTimeoutMs: 2000 });
  const started = client.start();
  await tick();
  room.data(a, T.Configuration, -1, { conversationId: "conv_room", features: ["streaming", "reasoning_steps"] });
  await started;
  const questions = () => room.sent.filter((s) => s.env.type === T.UserMessage).map((s) => [s.env.stanzaId, (s.env.body as { id: string }).id]);
  const id = await client.ask("6 x 7?");
  // Lost on the way, say: the same envelope again while it is the last one sent.
  await new Promise((r) => setTimeout(r, 80));
  assert.deepEqual(questions().slice(0, 2), [[2, id], [2, id]]);
  // Something else went out after it: stanzaIds must rise, so its body under a new one.
  const off = client.setShowReasoning(false);
  await tick();
  const toggle = room.sent.at(-1)?.env.stanzaId as number;
  room.data(a, T.Configuration, -2, { conversationId: "conv_room", features: ["streaming"] });
  await off;
  await new Promise((r) => setTimeout(r, 80));
  const again = questions().filter(([stanza]) => stanza !== 2);
  assert.ok(again.length >= 1 && again.every(([stanza, q]) => (stanza as number) > toggle && q === id), String(again));
  // The agent had it (a slow start): its refusal of the id is noise, not the turn's end.
  room.data(a, T.ErrorMessage, -3, { id: "err_1", conversationId: "c", code: 204, message: "message id already used", severity: 1, recoverable: true, originatingId: id });
  await tick();
  assert.deepEqual([client.turns[0].status, client.turns[0].error], ["pending", undefined]);
  // Its first step: no more repeats.
  room.data(a, T.ReasoningStep, -4, { id: "rs_1", conversationId: "c", previousId: id, content: "one", stepIndex: 1 });
  const sent = questions().length;
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(questions().length, sent);
  client.close();
});
