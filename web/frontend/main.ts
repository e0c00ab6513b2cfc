// Web debug page: join a room, do the Configuration handshake, chat, and show the agent's
// reasoning steps in a "thinking" panel per user message, tool calls inline, and a
// "show reasoning" toggle that sends a Configuration update.
//
// State for tests and people is mirrored on <body data-state=... data-reasoning=...>:
// data-state: idle | connecting | waiting-agent | handshake | ready | error
// data-reasoning: on | off (after the server answered the update)
//
// Trust: envelopes are accepted only from the agent (a participant of kind AGENT; with
// ?agent=NAME only the one whose server-set lk.agent_name is NAME). Before it joins,
// nothing is accepted. De-duplication is per sender, and envelopes are placed only by
// their ids: another user's turn in the room is shown as that user's own turn.

import { ConnectionState, Participant, ParticipantKind, Room, RoomEvent, Track } from "livekit-client";

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
  stepIndexOf,
  str,
} from "./protocol";

const RESEND_MS = 1000;
const CONFIG_TIMEOUT_MS = 15000;
const AGENT_TIMEOUT_MS = 30000;
const MAX_TURNS = 200;
const AGENT_NAME_ATTRIBUTE = "lk.agent_name";

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

function $(id: string): HTMLElement {
  const el = document.getElementById(id);
  if (!el) throw new Error(`missing #${id}`);
  return el;
}

function el<K extends keyof HTMLElementTagNameMap>(
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

class DebugClient {
  private room = new Room();
  private agent?: string;
  private stanza = 0;
  private serverHigh = new Map<string, number>();
  private untrusted = 0;
  private resent = new Set<string>();
  private conversationId = "";
  private showReasoning: boolean;
  private turns = new Map<string, TurnView>();
  private byAnswer = new Map<string, string>();
  private byRequest = new Map<string, string>();
  private lastAnswerId?: string;
  private configWaiter?: (body: Body | Error) => void;
  private agentWaiter?: () => void;

  constructor(
    private log: HTMLElement,
    private status: HTMLElement,
    showReasoning: boolean,
    private agentName?: string,
  ) {
    this.showReasoning = showReasoning;
    document.body.dataset.reasoning = showReasoning ? "on" : "off";
    this.room.on(RoomEvent.DataReceived, (payload, participant, _kind, topic) =>
      this.onData(payload, participant, topic),
    );
    this.room.on(RoomEvent.ParticipantConnected, (p) => this.onParticipant(p));
    // The agent's spoken answers (a voice agent publishes an audio track): play them.
    this.room.on(RoomEvent.TrackSubscribed, (track, _pub, participant) => {
      if (track.kind !== Track.Kind.Audio || participant.identity !== this.agent) return;
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
    if (!this.agent) {
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
    if (this.room.state !== ConnectionState.Connected || !this.conversationId) {
      document.body.dataset.reasoning = show ? "on" : "off";
      return;
    }
    await this.configure({
      conversationId: this.conversationId,
      clientVersion: CLIENT_VERSION,
      device: "web",
      features: featuresFor(show),
    });
    document.body.dataset.reasoning = show ? "on" : "off";
  }

  async ask(text: string): Promise<void> {
    const id = newId("msg");
    const body: Body = {
      id,
      conversationId: this.conversationId,
      content: text,
      previousId: this.lastAnswerId,
      timestamp: Date.now(),
    };
    this.addTurn(id, text);
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
    await this.room.localParticipant.publishData(encodeEnvelope(env), {
      reliable: true,
      topic: DATA_TOPIC,
      destinationIdentities: this.agent ? [this.agent] : undefined,
    });
  }

  private async configure(body: Body): Promise<Body> {
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
    if (this.agent || p.kind !== ParticipantKind.AGENT) return;
    if (this.agentName && p.attributes[AGENT_NAME_ATTRIBUTE] !== this.agentName) return;
    this.agent = p.identity;
    this.agentWaiter?.();
  }

  private onData(payload: Uint8Array, participant?: Participant, topic?: string): void {
    if (topic !== DATA_TOPIC) return;
    if (!this.agent || !participant || participant.identity !== this.agent) {
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
    const mag = -env.stanzaId;
    if (mag <= (this.serverHigh.get(participant.identity) ?? 0)) return; // replayed duplicate
    this.serverHigh.set(participant.identity, mag);
    this.handle(env);
  }

  private handle(env: Envelope): void {
    const b = env.body;
    switch (env.type) {
      case MessageType.Configuration: {
        const w = this.configWaiter;
        this.configWaiter = undefined;
        w?.(b);
        return;
      }
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
      case MessageType.ErrorMessage:
        return this.onError(b);
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

  private onError(b: Body): void {
    const origin = str(b, "originatingId");
    if (origin && this.resent.delete(origin)) return; // complaint about our own repeat
    const text = `error ${num(b, "code") ?? "?"}: ${str(b, "message", "content") ?? ""}`;
    const turn = this.lookup(origin);
    if (turn) {
      turn.el.append(el("div", "error", text));
      if (!turn.done) this.finish(turn, "error");
      return;
    }
    if (this.configWaiter) {
      const w = this.configWaiter;
      this.configWaiter = undefined;
      w(new Error(text));
    }
    this.log.append(el("div", "error", text));
  }

  private finish(turn: TurnView, state: string): void {
    turn.done = true;
    turn.el.dataset.state = state;
    if (turn.shownSteps === 0 && turn.hiddenSteps === 0) {
      turn.count.textContent = this.showReasoning ? "no reasoning steps" : "reasoning hidden";
    }
  }

  private addTurn(userId: string, text: string, own = true): void {
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
    void client.ask(text);
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
