// Web debug page: join a room, do the Configuration handshake, chat, and show the agent's
// reasoning steps in a "thinking" panel per user message, tool calls inline, and a
// "show reasoning" toggle that sends a Configuration update.
//
// State for tests and people is mirrored on <body data-state=... data-reasoning=...>:
// data-state: idle | connecting | waiting-agent | handshake | ready | error
// data-reasoning: on | off (after the server answered the update)
// data-agent: the trusted agent's identity; data-agent-state: ready | waiting | resuming
// data-agent-changes: how many times another agent took over (and was resumed)
// data-agents: how many participants in the room could be trusted as the agent
//
// Trust (trust.ts): envelopes are accepted only from the agent participant (kind AGENT;
// with ?agent=NAME only the one whose lk.agent_name, set by livekit-server at dispatch, is
// NAME), checked for every packet, never by identity alone. Before it joins nothing is
// accepted, and nothing is ever sent to anyone else (no broadcast). When it leaves the
// page says it waits for another agent (bounded); when another takes over, the page
// resumes with it (PROTOCOL.md §4.9: lastSequenceSeen = the highest server |stanzaId|
// received, one mark across agents) and shows a notice. The conversation itself is drawn
// by turns.ts.

import { ConnectionState, Participant, Room, RoomEvent, Track } from "livekit-client";

import {
  Body,
  CLIENT_VERSION,
  DATA_TOPIC,
  Envelope,
  MessageType,
  ProtocolError,
  decodeEnvelope,
  encodeEnvelope,
  featuresFor,
  newId,
  num,
  str,
} from "./protocol";
import { AgentTrust, ServerSequence } from "./trust";
import { TurnLog, el } from "./turns";

const RESEND_MS = 1000;
const CONFIG_TIMEOUT_MS = 15000;
const AGENT_TIMEOUT_MS = 30000;

function $(id: string): HTMLElement {
  const el = document.getElementById(id);
  if (!el) throw new Error(`missing #${id}`);
  return el;
}

class DebugClient {
  private room = new Room();
  private trust: AgentTrust;
  private sequence = new ServerSequence();
  private lastAgent?: string;
  private agentChanges = 0;
  private ready = false;
  private readyWaiters: Array<() => void> = [];
  private lost?: Error;
  private lostTimer?: ReturnType<typeof setTimeout>;
  private configChain: Promise<unknown> = Promise.resolve();
  private stanza = 0;
  private untrusted = 0;
  private resent = new Set<string>();
  private conversationId = "";
  private showReasoning: boolean;
  private turns: TurnLog;
  private configWaiter?: (body: Body | Error) => void;
  private agentWaiter?: () => void;

  constructor(
    private log: HTMLElement,
    private status: HTMLElement,
    showReasoning: boolean,
    agentName?: string,
  ) {
    this.trust = new AgentTrust(agentName);
    this.showReasoning = showReasoning;
    this.turns = new TurnLog(log, showReasoning);
    document.body.dataset.reasoning = showReasoning ? "on" : "off";
    this.room.on(RoomEvent.DataReceived, (payload, participant, _kind, topic) =>
      this.onData(payload, participant, topic),
    );
    this.room.on(RoomEvent.ParticipantConnected, (p) => this.onParticipant(p));
    this.room.on(RoomEvent.ParticipantDisconnected, () => this.checkAgent());
    this.room.on(RoomEvent.ParticipantAttributesChanged, () => this.checkAgent());
    // The agent's spoken answers (a voice agent publishes an audio track): play them.
    this.room.on(RoomEvent.TrackSubscribed, (track, _pub, participant) => {
      if (track.kind !== Track.Kind.Audio || !this.trust.trusts(participant)) return;
      const audio = track.attach();
      audio.id = "agent-audio";
      document.getElementById("agent-audio")?.remove();
      document.body.append(audio);
      document.body.dataset.agentAudio = "subscribed";
    });
    this.room.on(RoomEvent.Disconnected, () => this.setState("error", "disconnected"));
  }

  setState(state: string, text: string): void {
    document.body.dataset.state = state;
    this.status.textContent = text;
  }

  async connect(room: string, identity: string): Promise<void> {
    this.setState("connecting", `connecting to ${room}…`);
    // A token minted by the app's backend comes in the fragment (never sent to a server):
    // #token=<jwt>&url=<ws url>. Otherwise ask the development issuer (/token).
    const fragment = new URLSearchParams(location.hash.slice(1));
    let grant: { url?: string; token?: string; error?: string };
    if (fragment.get("token") && fragment.get("url")) {
      grant = { url: fragment.get("url") ?? undefined, token: fragment.get("token") ?? undefined };
    } else {
      const q = new URLSearchParams({ room, identity });
      const resp = await fetch(`token?${q}`);
      grant = (await resp.json()) as typeof grant;
      if (!resp.ok || !grant.url || !grant.token) {
        throw new Error(grant.error ?? `token endpoint answered ${resp.status}`);
      }
    }
    if (!grant.url || !grant.token) throw new Error("no token");
    await this.room.connect(grant.url, grant.token);
    this.setState("waiting-agent", `joined ${room}; waiting for the agent…`);
    for (const p of this.room.remoteParticipants.values()) this.onParticipant(p);
    // livekit-client may swap a departed agent for a newcomer of the same identity without
    // a disconnect event: look every half second too.
    setInterval(() => this.checkAgent(), 500);
    if (!this.trust.identity) {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("no agent joined the room")), AGENT_TIMEOUT_MS);
        this.agentWaiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.setState("handshake", "handshake…");
    const reply = await this.configure({
      lastSequenceSeen: 0,
      clientVersion: CLIENT_VERSION,
      device: "web",
      features: featuresFor(this.showReasoning),
    });
    this.conversationId = str(reply, "conversationId") ?? room;
    this.setReady();
    const features = Array.isArray(reply.features) ? reply.features.join(", ") : "none";
    // The server decides who sees reasoning: the reply lists reasoning_steps only if granted.
    const has = (f: string): boolean => Array.isArray(reply.features) && reply.features.includes(f);
    const level = has("reasoning_steps")
      ? "full"
      : has("reasoning_summary")
        ? "summary"
        : has("reasoning_encrypted")
          ? "encrypted"
          : "none";
    document.body.dataset.granted = level;
    const badge =
      level === "full" || !this.showReasoning
        ? ""
        : level === "none"
          ? " · reasoning: not granted"
          : ` · reasoning: ${level}`;
    this.setState(
      "ready",
      `ready · conversation ${this.conversationId} · agent features: ${features}${badge}`,
    );
  }

  /** Publish (or stop) the browser's microphone as this participant's audio track. */
  async setMicrophone(on: boolean): Promise<void> {
    await this.room.localParticipant.setMicrophoneEnabled(on);
    document.body.dataset.mic = on ? "on" : "off";
  }

  async setShowReasoning(show: boolean): Promise<void> {
    this.showReasoning = show;
    this.turns.showReasoning = show;
    if (this.room.state !== ConnectionState.Connected || !this.conversationId) {
      document.body.dataset.reasoning = show ? "on" : "off";
      return;
    }
    await this.untilReady();
    await this.configure({
      conversationId: this.conversationId,
      clientVersion: CLIENT_VERSION,
      device: "web",
      features: featuresFor(show),
    });
    document.body.dataset.reasoning = show ? "on" : "off";
  }

  async ask(text: string): Promise<void> {
    await this.untilReady();
    const id = newId("msg");
    const body: Body = {
      id,
      conversationId: this.conversationId,
      content: text,
      previousId: this.turns.lastAnswerId,
      timestamp: Date.now(),
    };
    this.turns.addTurn(id, text);
    await this.send(MessageType.UserMessage, body);
  }

  // --- sending ---------------------------------------------------------------------

  private async send(type: number, body: Body): Promise<Envelope> {
    const env: Envelope = {
      stanzaId: ++this.stanza,
      conversationId: this.conversationId,
      type,
      body,
    };
    await this.publish(env);
    return env;
  }

  private async publish(env: Envelope): Promise<void> {
    // Only ever to the trusted agent, still in the room and still an agent: never to the
    // whole room, nor to whoever now holds a departed agent's identity.
    const agent = this.trust.current(this.room.remoteParticipants);
    if (!agent) return;
    await this.room.localParticipant.publishData(encodeEnvelope(env), {
      reliable: true,
      topic: DATA_TOPIC,
      destinationIdentities: [agent.identity],
    });
  }

  /** One Configuration waits for its reply at a time. */
  private configure(body: Body): Promise<Body> {
    const run = this.configChain.then(() => this.configureNow(body));
    this.configChain = run.catch(() => undefined);
    return run;
  }

  private async configureNow(body: Body): Promise<Body> {
    const reply = new Promise<Body | Error>((resolve) => (this.configWaiter = resolve));
    const env = await this.send(MessageType.Configuration, body);
    const deadline = Date.now() + CONFIG_TIMEOUT_MS;
    for (;;) {
      const got = await Promise.race([
        reply,
        new Promise<null>((r) => setTimeout(() => r(null), RESEND_MS)),
      ]);
      if (got instanceof Error) throw got;
      if (got !== null) return got;
      if (Date.now() > deadline) {
        this.configWaiter = undefined;
        throw new Error("the agent did not answer our Configuration");
      }
      // The agent may not know us yet right after joining: repeat the same envelope.
      this.resent.add(String(env.stanzaId));
      await this.publish(env);
    }
  }

  // --- receiving -------------------------------------------------------------------

  private onParticipant(p: Participant): void {
    this.trust.joined(p);
    this.checkAgent(); // a newcomer may have taken the agent's identity
    if (this.trust.offer(p, this.room.remoteParticipants)) this.adopted();
    this.checkAgent();
  }

  // --- following the agent across takeovers ------------------------------------------

  /** The trusted agent left (or its identity now belongs to someone else)? */
  private checkAgent(): void {
    const present = [...this.room.remoteParticipants.values()];
    document.body.dataset.agents = String(present.filter((p) => this.trust.matches(p)).length);
    const gone = this.trust.identity;
    if (!gone || !this.trust.leave(this.room.remoteParticipants)) return;
    this.ready = false;
    if (this.trust.successor(this.room.remoteParticipants)) {
      this.adopted();
      return;
    }
    document.body.dataset.agentState = "waiting";
    const seconds = AGENT_TIMEOUT_MS / 1000;
    this.notice(`the agent left (${gone}); waiting up to ${seconds} s for another agent…`);
    this.setState("waiting-agent", `the agent left; waiting up to ${seconds} s for another agent…`);
    clearTimeout(this.lostTimer);
    this.lostTimer = setTimeout(() => this.agentLost(gone), AGENT_TIMEOUT_MS);
  }

  private adopted(): void {
    const identity = this.trust.identity;
    if (!identity) return;
    const previous = this.lastAgent;
    this.lastAgent = identity;
    document.body.dataset.agent = identity;
    clearTimeout(this.lostTimer);
    this.lost = undefined;
    this.agentWaiter?.();
    if (!this.conversationId) return; // the handshake (repeated) goes to this agent
    this.ready = false;
    document.body.dataset.agentState = "resuming";
    this.setState("handshake", `agent ${identity} took over; resuming…`);
    void this.resume(identity, previous);
  }

  /** Resume with a new agent (§4.9); without a replay when it cannot give one. */
  private async resume(identity: string, previous?: string): Promise<void> {
    const seen = this.sequence.high;
    const body = (last: number): Body => ({
      conversationId: this.conversationId,
      lastSequenceSeen: last,
      clientVersion: CLIENT_VERSION,
      device: "web",
      features: featuresFor(this.showReasoning),
    });
    const what = previous === identity ? "rejoined" : "was replaced";
    let text = `the agent ${what} (${identity}); resumed after server message ${seen}`;
    try {
      await this.configure(body(seen));
    } catch (err) {
      if (seen === 0) return this.resumeFailed(identity, err);
      try {
        await this.configure(body(0)); // it cannot replay (202): continue without
      } catch (again) {
        return this.resumeFailed(identity, again);
      }
      text = `the agent ${what} (${identity}); resumed without a replay (${String(err)})`;
      this.turns.endUnfinished(
        `error 503: the agent was replaced (${identity}) before it answered: ask again`,
      );
    }
    if (this.trust.identity !== identity) return; // replaced again meanwhile
    this.agentChanges++;
    document.body.dataset.agentChanges = String(this.agentChanges);
    document.body.dataset.agentState = "ready";
    this.notice(text);
    this.setState("ready", `ready · conversation ${this.conversationId} · ${text}`);
    this.setReady();
  }

  private resumeFailed(identity: string, err: unknown): void {
    this.fail(new Error(`the new agent ${identity} did not resume: ${String(err)}`));
  }

  private agentLost(identity: string): void {
    if (this.trust.identity) return;
    const seconds = AGENT_TIMEOUT_MS / 1000;
    this.fail(new Error(`the agent ${identity} left and no agent took over within ${seconds} s`));
  }

  private fail(err: Error): void {
    this.lost = err;
    document.body.dataset.agentState = "lost";
    this.notice(err.message);
    this.setState("error", `error: ${err.message}`);
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

  /** A visible line in the log about the agent. */
  private notice(text: string): void {
    const div = el("div", "notice", text);
    div.setAttribute("role", "status");
    div.style.cssText = "margin:0.5em 0;padding:0.4em 0.6em;background:#fff4d6;border-left:3px solid #d9a400;";
    this.log.append(div);
    div.scrollIntoView({ block: "end" });
  }

  private onData(payload: Uint8Array, participant?: Participant, topic?: string): void {
    if (topic !== DATA_TOPIC) return;
    if (!participant || !this.trust.trusts(participant)) {
      if (participant?.identity === this.trust.identity) this.checkAgent();
      this.untrusted++;
      document.body.dataset.untrusted = String(this.untrusted);
      return;
    }
    let env: Envelope;
    try {
      env = decodeEnvelope(payload);
    } catch (err) {
      if (err instanceof ProtocolError) {
        console.warn("undecodable packet", err.message);
        return;
      }
      throw err;
    }
    if (env.stanzaId >= 0) return; // not from the server
    if (!this.sequence.accept(participant.identity, env.stanzaId)) return; // replayed duplicate
    this.handle(env);
  }

  private handle(env: Envelope): void {
    const b = env.body;
    if (env.type === MessageType.Configuration) {
      const w = this.configWaiter;
      this.configWaiter = undefined;
      w?.(b);
    } else if (env.type === MessageType.ErrorMessage) {
      this.onError(b);
    } else {
      this.turns.handle(env);
    }
  }

  private onError(b: Body): void {
    const origin = str(b, "originatingId");
    if (origin && this.resent.delete(origin)) return; // complaint about our own repeat
    const text = `error ${num(b, "code") ?? "?"}: ${str(b, "message", "content") ?? ""}`;
    if (this.turns.turnError(origin, text)) return;
    if (this.configWaiter) {
      const w = this.configWaiter;
      this.configWaiter = undefined;
      w(new Error(text));
    }
    this.log.append(el("div", "error", text));
  }

}

function main(): void {
  const params = new URLSearchParams(location.search);
  const roomInput = $("room") as HTMLInputElement;
  const identityInput = $("identity") as HTMLInputElement;
  const toggle = $("show-reasoning") as HTMLInputElement;
  const connectBtn = $("connect") as HTMLButtonElement;
  const form = $("chat") as HTMLFormElement;
  const input = $("message") as HTMLInputElement;
  const sendBtn = $("send") as HTMLButtonElement;
  const micBtn = $("mic") as HTMLButtonElement;
  roomInput.value = params.get("room") ?? newId("conv");
  identityInput.value = params.get("identity") ?? newId("web").slice(0, 14);
  if (params.get("reasoning") === "off") toggle.checked = false;
  const client = new DebugClient(
    $("log"),
    $("status"),
    toggle.checked,
    params.get("agent") ?? undefined,
  );
  document.body.dataset.state = "idle";

  const connect = async (): Promise<void> => {
    connectBtn.disabled = true;
    roomInput.disabled = identityInput.disabled = true;
    try {
      await client.connect(roomInput.value.trim(), identityInput.value.trim());
      input.disabled = sendBtn.disabled = micBtn.disabled = false;
      input.focus();
    } catch (err) {
      client.setState("error", `error: ${err instanceof Error ? err.message : String(err)}`);
      connectBtn.disabled = false;
      roomInput.disabled = identityInput.disabled = false;
    }
  };
  connectBtn.addEventListener("click", () => void connect());
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = input.value.trim();
    if (!text || input.disabled) return;
    input.value = "";
    client.ask(text).catch((err: unknown) => client.setState("error", `error: ${String(err)}`));
  });
  toggle.addEventListener("change", () => {
    toggle.disabled = true;
    client
      .setShowReasoning(toggle.checked)
      .catch((err: unknown) => client.setState("error", `error: ${String(err)}`))
      .finally(() => (toggle.disabled = false));
  });
  micBtn.addEventListener("click", () => {
    const on = micBtn.getAttribute("aria-pressed") !== "true";
    micBtn.disabled = true;
    client
      .setMicrophone(on)
      .then(() => {
        micBtn.setAttribute("aria-pressed", String(on));
        micBtn.textContent = on ? "mic on" : "mic off";
      })
      .catch((err: unknown) => client.setState("error", `microphone: ${String(err)}`))
      .finally(() => (micBtn.disabled = false));
  });
  if (params.get("autoconnect") === "1") void connect();
}

main();
