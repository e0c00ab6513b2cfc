// ReasoningClient: the Alicia protocol client for one livekit-client Room, framework-free.
// It trusts only the agent (trust.ts), does the Configuration handshake, asks questions,
// toggles show-reasoning (a Configuration update with the features), assembles turns
// (turns.ts), follows the agent across takeovers and resumes with the new one (PROTOCOL.md
// §4.9: lastSequenceSeen = the highest server |stanzaId| received, one mark across agents;
// an agent that cannot replay gets a plain Configuration and open turns end with 503),
// and repeats a question until the agent shows it has it (a packet lost while a link was
// rebuilt would leave a turn nobody starts).
// Nothing is ever sent to anyone but the trusted agent (no broadcast).
//
// UIs read `getSnapshot()` (a new object after every change, for React's
// useSyncExternalStore) and/or listen to the fine-grained events of `on()`.

import type { Participant, RemoteParticipant, Room } from "livekit-client";
import { ConnectionState, RoomEvent } from "livekit-client";

import { DATA_TOPIC, decodeEnvelope, encodeEnvelope } from "./codec";
import { type ReasoningLevel, featuresFor, grantedLevel, newId } from "./ids";
import type { Configuration, Envelope, ErrorMessage, MessageTypeCode, BodyOf } from "./messages";
import { MessageType } from "./messages";
import { AgentTrust, ServerSequence } from "./trust";
import { type Turn, TurnAssembler, type TurnEvent } from "./turns";

export type ClientStatus = "idle" | "waiting-agent" | "handshake" | "ready" | "error";
export type AgentState = "none" | "ready" | "waiting" | "resuming" | "lost";

/** What a UI shows about the connection (a new object on every change). */
export interface ReasoningState {
  status: ClientStatus;
  /** The conversation id the server assigned or resumed ("" before the handshake). */
  conversationId: string;
  /** The trusted agent's identity. */
  agent?: string;
  agentState: AgentState;
  /** How many times another agent took over (and was resumed). */
  agentChanges: number;
  /** Participants in the room that could be trusted as the agent. */
  agents: number;
  /** Protocol packets dropped because their sender is not the trusted agent. */
  untrusted: number;
  /** Show-reasoning as last confirmed by the server (or asked for before the handshake). */
  showReasoning: boolean;
  /** The server's features (its last Configuration). */
  serverFeatures: string[];
  /** The reasoning this participant is granted (from the server's features). */
  granted?: ReasoningLevel;
  /** Why the client stopped (status "error"). */
  error?: string;
}

/** State and turns together, for renderers (`turns` are copies, oldest first). */
export interface ReasoningSnapshot {
  state: ReasoningState;
  turns: readonly Turn[];
}

/** Everything a client reports: turn changes, state changes, notices about the agent. */
export type ClientEvent = TurnEvent | { kind: "state"; state: ReasoningState } | { kind: "notice"; text: string };

export interface ReasoningClientOptions {
  /** Trust only the agent dispatched under this name (lk.agent_name). */
  agentName?: string;
  /** Ask for reasoning steps (default true). */
  showReasoning?: boolean;
  clientVersion?: string;
  /** Configuration `device` (default "web"). */
  device?: string;
  maxTurns?: number;
  /** Repeat an unanswered Configuration, or a question not heard of, after this long
   * (default 1000 ms). */
  resendMs?: number;
  /** Give up on a Configuration reply after this long (default 15000 ms). */
  configTimeoutMs?: number;
  /** Wait this long for an agent to join or take over (default 30000 ms). */
  agentTimeoutMs?: number;
}

export const CLIENT_VERSION = "alicia-js/0.1.0";
const UNNAMED = "an unnamed envelope came";
/** After the link came back or the agent (re)joined, how long an envelope from a sender
 * livekit-client cannot name may cause one more resume (anyone can send such a packet). */
const UNNAMED_WINDOW_MS = 10_000;

type Waiter = (body: Configuration | Error) => void;

export class ReasoningClient {
  readonly trust: AgentTrust<Participant>;
  readonly sequence = new ServerSequence();
  readonly assembler: TurnAssembler;
  private state: ReasoningState;
  private opts: Required<Omit<ReasoningClientOptions, "agentName">>;
  private listeners = new Set<(e: ClientEvent) => void>();
  private snapshot?: ReasoningSnapshot;
  private offs: Array<() => void> = [];
  private timers: Array<ReturnType<typeof setTimeout>> = [];
  private started?: Promise<void>;
  private stanza = 0;
  private wanted: boolean;
  private ready = false;
  private readyWaiters: Array<() => void> = [];
  private lost?: Error;
  private lostTimer?: ReturnType<typeof setTimeout>;
  private configChain: Promise<unknown> = Promise.resolve();
  /** Resume once more after the one under way (an unnamed envelope came meanwhile). */
  private resyncAfter = false;
  /** Until when an unnamed envelope may cause one more resume (0: spent). */
  private unnamedUntil = 0;
  private configWaiter?: Waiter;
  private agentWaiter?: () => void;
  /** Configurations repeated (stanzaId): what the agent says about them is noise. */
  private resent = new Set<string>();
  /** Questions the agent refused as known (204, about a repeat: a fresh id is never
   * known): it has them, no more repeats, and the refusal is noise. */
  private known = new Set<string>();
  private lastAgent?: string;
  private closed = false;

  /** A client for `room` (connected or not); nothing happens before `start()`. */
  constructor(
    readonly room: Room,
    options: ReasoningClientOptions = {},
  ) {
    this.trust = new AgentTrust(options.agentName);
    this.wanted = options.showReasoning ?? true;
    this.opts = {
      showReasoning: this.wanted,
      clientVersion: options.clientVersion ?? CLIENT_VERSION,
      device: options.device ?? "web",
      maxTurns: options.maxTurns ?? 200,
      resendMs: options.resendMs ?? 1000,
      configTimeoutMs: options.configTimeoutMs ?? 15000,
      agentTimeoutMs: options.agentTimeoutMs ?? 30000,
    };
    this.assembler = new TurnAssembler({ showReasoning: this.wanted, maxTurns: this.opts.maxTurns });
    this.state = {
      status: "idle",
      conversationId: "",
      agentState: "none",
      agentChanges: 0,
      agents: 0,
      untrusted: 0,
      showReasoning: this.wanted,
      serverFeatures: [],
    };
  }

  // --- reading -------------------------------------------------------------------------

  /** The current state (replaced, never mutated, on change). */
  getState(): ReasoningState {
    return this.state;
  }

  /** The kept turns (live objects; see getSnapshot for copies). */
  get turns(): Turn[] {
    return this.assembler.turns;
  }

  /** State and turn copies; the same object until something changes. */
  getSnapshot = (): ReasoningSnapshot => {
    this.snapshot ??= {
      state: this.state,
      turns: this.assembler.turns.map((t) => ({
        ...t,
        steps: [...t.steps],
        tools: t.tools.map((x) => ({ ...x })),
      })),
    };
    return this.snapshot;
  };

  /** Call `listener` on every change (returns the unsubscribe function). */
  subscribe = (listener: () => void): (() => void) => this.on(() => listener());

  /** Call `listener` with every event (returns the unsubscribe function). */
  on(listener: (e: ClientEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** `p` is the trusted agent (e.g. before playing its audio track). */
  trusts(p: Participant | undefined): boolean {
    return this.trust.trusts(p);
  }

  // --- acting --------------------------------------------------------------------------

  /** Attach to the room, wait for it to connect and for the agent, and do the handshake.
   * Resolves once ready; rejects (status "error") when no agent comes or none answers. */
  start(): Promise<void> {
    this.started ??= this.run().catch((err: unknown) => {
      const e = err instanceof Error ? err : new Error(String(err));
      this.setState({ status: "error", error: e.message });
      throw e;
    });
    return this.started;
  }

  /** Ask a question; resolves with the user message id once it was sent. */
  async ask(text: string): Promise<string> {
    await this.untilReady();
    const id = newId("msg");
    const previousId = this.assembler.lastAnswerId;
    const turn = this.assembler.start(id, text);
    this.emit([{ kind: "turn", turn }]);
    const env = await this.send(MessageType.UserMessage, {
      id,
      conversationId: this.state.conversationId,
      content: text,
      previousId,
      timestamp: Date.now(),
    });
    void this.repeat(turn, env).catch(() => undefined);
    return id;
  }

  /** Show or hide reasoning: a Configuration update with the features (before the
   * handshake, only what the handshake will ask for). */
  async setShowReasoning(show: boolean): Promise<void> {
    this.wanted = show;
    this.assembler.showReasoning = show;
    if (!this.state.conversationId) return this.setState({ showReasoning: show });
    await this.untilReady();
    await this.configure(this.configBody());
    this.setState({ showReasoning: show });
  }

  /** Stop a turn's answer (default: the latest own turn still open). */
  async stop(turn?: Turn): Promise<void> {
    const target = turn ?? this.turns.filter((t) => t.own && !t.finished).pop();
    if (!target) return;
    this.assembler.stopRequested(target);
    await this.untilReady();
    await this.send(MessageType.ControlStop, {
      conversationId: this.state.conversationId,
      targetId: target.answerId,
      stopType: "generation",
    });
  }

  /** Ask for another answer to a turn (`regenerate`), or to go on with a stopped or
   * partial one (`continue`); the new answer arrives in the same turn's events. */
  async vary(turn: Turn, mode: "regenerate" | "continue"): Promise<void> {
    await this.untilReady();
    this.assembler.reopen(turn, mode === "continue");
    this.emit([{ kind: "turn", turn }]);
    await this.send(MessageType.ControlVariation, {
      conversationId: this.state.conversationId,
      targetId: turn.userMessageId,
      mode,
    });
  }

  /** Final Transcriptions are this participant's own speech (its microphone is on). */
  setOwnSpeech(on: boolean): void {
    this.assembler.ownSpeech = on;
  }

  /** Detach from the room and stop every timer (the room stays connected). */
  close(): void {
    this.closed = true;
    for (const off of this.offs) off();
    for (const t of this.timers) clearInterval(t);
    clearTimeout(this.lostTimer);
    this.offs = [];
    this.listeners.clear();
  }

  // --- internals -----------------------------------------------------------------------

  private listen<E extends RoomEvent>(event: E, fn: (...args: never[]) => void): void {
    const room = this.room as unknown as {
      on(e: string, f: (...a: never[]) => void): void;
      off(e: string, f: (...a: never[]) => void): void;
    };
    room.on(event, fn);
    this.offs.push(() => room.off(event, fn));
  }

  private async run(): Promise<void> {
    this.listen(RoomEvent.DataReceived, (payload: Uint8Array, p?: RemoteParticipant, _k?: unknown, topic?: string) =>
      this.onData(payload, p, topic),
    );
    this.listen(RoomEvent.ParticipantConnected, (p: RemoteParticipant) => this.onParticipant(p));
    this.listen(RoomEvent.ParticipantDisconnected, () => this.checkAgent());
    // An agent announces the protocol with an attribute, often just after it joined.
    this.listen(RoomEvent.ParticipantAttributesChanged, (_changed: unknown, p: Participant) =>
      p === this.room.localParticipant ? this.checkAgent() : this.onParticipant(p),
    );
    this.listen(RoomEvent.Disconnected, () => this.setState({ status: "error", error: "disconnected" }));
    // The link dropped: what the agent sends meanwhile may be lost, so once it is back,
    // resume (§4.9) from what had arrived (a full reconnect also leaves and rejoins the
    // agent: that path resumes too, and the two resumes run one after the other).
    this.listen(RoomEvent.Reconnecting, () => this.sequence.lost());
    this.listen(RoomEvent.Reconnected, () => this.reconnected());
    if (this.room.state !== ConnectionState.Connected) {
      await new Promise<void>((resolve) => this.listen(RoomEvent.Connected, () => resolve()));
    }
    this.setState({ status: "waiting-agent" });
    for (const p of this.room.remoteParticipants.values()) this.onParticipant(p);
    // livekit-client may swap a departed agent for a newcomer of the same identity
    // without a disconnect event: look every half second too.
    this.timers.push(setInterval(() => this.checkAgent(), 500));
    if (!this.trust.identity) {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("no agent joined the room")), this.opts.agentTimeoutMs);
        this.agentWaiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.setState({ status: "handshake" });
    const reply = await this.configure(this.configBody(0));
    this.setReady();
    this.setState({ status: "ready", conversationId: reply.conversationId ?? this.room.name });
  }

  private configBody(lastSequenceSeen?: number): Configuration {
    const body: Configuration = {
      clientVersion: this.opts.clientVersion,
      device: this.opts.device,
      features: featuresFor(this.wanted),
    };
    if (this.state.conversationId) body.conversationId = this.state.conversationId;
    if (lastSequenceSeen !== undefined) body.lastSequenceSeen = lastSequenceSeen;
    return body;
  }

  private setState(change: Partial<ReasoningState>): void {
    this.state = { ...this.state, ...change };
    this.emit([{ kind: "state", state: this.state }]);
  }

  private emit(events: ClientEvent[]): void {
    this.snapshot = undefined;
    for (const e of events) for (const l of [...this.listeners]) l(e);
  }

  private notice(text: string): void {
    this.emit([{ kind: "notice", text }]);
  }

  /** Send the question `env` again (at most 30 times, one per resendMs, none while a
   * resume is under way) until its turn is heard of: the same envelope while
   * it is the last one sent (an agent that had it drops it), else its body under a new
   * stanzaId, as they must rise (an agent that had it refuses the id: 204, noise). */
  private async repeat(turn: Turn, env: Envelope<typeof MessageType.UserMessage>): Promise<void> {
    for (let n = 0; n < 30; ) {
      await new Promise((r) => setTimeout(r, this.opts.resendMs));
      if (this.closed || turn.status !== "pending" || this.known.has(env.body.id)) return;
      if (!this.ready) continue;
      if (env.stanzaId !== this.stanza) env = { ...env, stanzaId: ++this.stanza };
      n++;
      await this.publish(env);
    }
  }

  private async send<T extends MessageTypeCode>(type: T, body: BodyOf<T>): Promise<Envelope<T>> {
    const env: Envelope<T> = { stanzaId: ++this.stanza, conversationId: this.state.conversationId, type, body };
    await this.publish(env);
    return env;
  }

  private async publish(env: Envelope): Promise<void> {
    // Only ever to the trusted agent, still in the room and still an agent: never to the
    // whole room, nor to whoever now holds a departed agent's identity.
    const agent = this.trust.current(this.room.remoteParticipants);
    if (!agent || this.closed) return;
    await this.room.localParticipant.publishData(encodeEnvelope(env), {
      reliable: true,
      topic: DATA_TOPIC,
      destinationIdentities: [agent.identity],
    });
  }

  /** One Configuration waits for its reply at a time. */
  private configure(body: Configuration): Promise<Configuration> {
    const run = this.configChain.then(() => this.configureNow(body));
    this.configChain = run.catch(() => undefined);
    return run;
  }

  private async configureNow(body: Configuration): Promise<Configuration> {
    const reply = new Promise<Configuration | Error>((resolve) => (this.configWaiter = resolve));
    const env = await this.send(MessageType.Configuration, body);
    const deadline = Date.now() + this.opts.configTimeoutMs;
    for (;;) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const got = await Promise.race([
        reply,
        new Promise<null>((r) => (timer = setTimeout(() => r(null), this.opts.resendMs))),
      ]);
      clearTimeout(timer);
      if (got instanceof Error) throw got;
      if (got !== null) {
        const features = got.features ?? [];
        this.setState({ serverFeatures: features, granted: grantedLevel(features) });
        return got;
      }
      if (Date.now() > deadline || this.closed) {
        this.configWaiter = undefined;
        throw new Error("the agent did not answer our Configuration");
      }
      // The agent may not know us yet right after joining: repeat the same envelope.
      this.resent.add(String(env.stanzaId));
      await this.publish(env);
    }
  }

  private onParticipant(p: Participant): void {
    this.trust.joined(p);
    this.checkAgent(); // a newcomer may have taken the agent's identity
    if (this.trust.offer(p, this.room.remoteParticipants)) this.adopted();
    this.checkAgent();
  }

  /** The trusted agent left (or its identity now belongs to someone else)? */
  private checkAgent(): void {
    const agents = [...this.room.remoteParticipants.values()].filter((p) => this.trust.matches(p)).length;
    if (agents !== this.state.agents) this.setState({ agents });
    const gone = this.trust.identity;
    if (!gone || !this.trust.leave(this.room.remoteParticipants)) return;
    this.sequence.lost();
    this.ready = false;
    if (this.trust.successor(this.room.remoteParticipants)) return this.adopted();
    const seconds = this.opts.agentTimeoutMs / 1000;
    this.notice(`the agent left (${gone}); waiting up to ${seconds} s for another agent…`);
    this.setState({ status: "waiting-agent", agentState: "waiting" });
    clearTimeout(this.lostTimer);
    this.lostTimer = setTimeout(() => this.agentLost(gone), this.opts.agentTimeoutMs);
  }

  private adopted(): void {
    const identity = this.trust.identity;
    if (!identity) return;
    const previous = this.lastAgent;
    this.lastAgent = identity;
    clearTimeout(this.lostTimer);
    this.lost = undefined;
    this.agentWaiter?.();
    if (!this.state.conversationId) return this.setState({ agent: identity, agentState: "ready" });
    this.ready = false;
    this.setState({ agent: identity, agentState: "resuming", status: "handshake" });
    this.unnamedUntil = Date.now() + UNNAMED_WINDOW_MS;
    void this.resume(identity, previous);
  }

  /** The room's link came back: resume with the agent still trusted. */
  private reconnected(): void {
    const identity = this.trust.identity;
    if (this.closed || !identity || !this.state.conversationId || this.state.status !== "ready") return;
    this.ready = false;
    this.setState({ agentState: "resuming", status: "handshake" });
    this.unnamedUntil = Date.now() + UNNAMED_WINDOW_MS;
    void this.resume(identity, identity, "the link came back");
  }


  /** A packet from a sender livekit-client cannot name yet (the agent's data outran the
   * news of its rejoining): not taken, but if it is a server envelope not held, resume
   * from below it, after any resume under way (its answer may be what was dropped). */
  private unnamed(env: Envelope): void {
    if (Date.now() > this.unnamedUntil) return; // once per window
    if (!this.sequence.suspect(env.stanzaId)) return;
    const identity = this.trust.identity;
    if (this.closed || !identity) return; // asked from below on adoption (the window opens with a conversation)
    this.unnamedUntil = 0;
    if (this.state.agentState === "resuming") this.resyncAfter = true;
    else if (this.state.status === "ready") void this.resume(identity, identity, UNNAMED);
  }

  /** Resume with a new agent (§4.9); without a replay when it cannot give one. */
  private async resume(identity: string, previous?: string, why?: string): Promise<void> {
    const [seen, suspects] = this.sequence.asking();
    const what = why ?? (previous === identity ? "the agent rejoined" : "the agent was replaced");
    let text = `${what} (${identity}); resumed after server message ${seen}`;
    try {
      await this.configure(this.configBody(seen));
    } catch (err) {
      if (seen === 0) return this.resumeFailed(identity, err);
      try {
        await this.configure(this.configBody(0)); // it cannot replay (202): continue without
      } catch (again) {
        return this.resumeFailed(identity, again);
      }
      text = `${what} (${identity}); resumed without a replay (${String(err)})`;
      const message = `the agent was replaced (${identity}) before it answered: ask again`;
      for (const turn of this.assembler.endUnfinished(503, message)) this.emit([{ kind: "done", turn }]);
    }
    if (this.trust.identity !== identity) return; // replaced again meanwhile
    this.sequence.resumed(suspects);
    this.notice(text);
    const changes = this.state.agentChanges + (why ? 0 : 1);
    this.setState({ agentChanges: changes, agentState: "ready", status: "ready" });
    this.setReady();
    if (this.resyncAfter && this.sequence.suspected) void this.resume(identity, identity, UNNAMED);
    this.resyncAfter = false;
  }

  private resumeFailed(identity: string, err: unknown): void {
    this.fail(new Error(`the new agent ${identity} did not resume: ${String(err)}`));
  }

  private agentLost(identity: string): void {
    if (this.trust.identity) return;
    const seconds = this.opts.agentTimeoutMs / 1000;
    this.fail(new Error(`the agent ${identity} left and no agent took over within ${seconds} s`));
  }

  private fail(err: Error): void {
    this.lost = err;
    this.notice(err.message);
    this.setState({ agentState: "lost", status: "error", error: err.message });
    this.setReady();
  }

  private setReady(): void {
    this.ready = true;
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w();
  }

  /** Wait until requests may go out (an agent resumed), or throw why they cannot. */
  private async untilReady(): Promise<void> {
    if (!this.ready) await new Promise<void>((resolve) => this.readyWaiters.push(resolve));
    if (this.lost) throw this.lost;
  }

  private onData(payload: Uint8Array, participant?: Participant, topic?: string): void {
    if (topic !== DATA_TOPIC) return;
    let env: Envelope;
    try {
      env = decodeEnvelope(payload);
    } catch {
      return; // undecodable (ProtocolError): dropped, like an unknown type
    }
    if (!participant || !this.trust.trusts(participant)) {
      if (!participant) this.unnamed(env);
      else if (participant.identity === this.trust.identity) this.checkAgent();
      return this.setState({ untrusted: this.state.untrusted + 1 });
    }
    if (env.stanzaId >= 0) return; // not from the server
    if (!this.sequence.accept(participant.identity, env.stanzaId)) return; // replayed duplicate
    if (env.type === MessageType.Configuration) {
      const w = this.configWaiter;
      this.configWaiter = undefined;
      w?.(env.body as Configuration);
      return;
    }
    if (env.type === MessageType.ErrorMessage) {
      const b = env.body as ErrorMessage;
      const o = b.originatingId;
      // About our own repeat: the agent had the original.
      // 204 about a question: one of its repeats came to an agent that had it.
      if (o && (b.code === 204 ? this.known.add(o) : this.resent.delete(o))) return;
      if (!this.assembler.lookup(b.originatingId) && this.configWaiter) {
        const w = this.configWaiter;
        this.configWaiter = undefined;
        w(new Error(`error ${b.code}: ${b.message}`));
      }
    }
    this.emit(this.assembler.feed(env));
  }
}
