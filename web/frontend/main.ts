// Web debug page, built on @alicia/reasoning (clients/js): join a room, let the package's
// ReasoningClient do the Configuration handshake, trust only the agent, follow it across
// takeovers and assemble the turns; this file only draws them. One <article class="turn">
// per user message, with a "thinking" panel of numbered steps, tool calls inline, and the
// answer; a "show reasoning" toggle sends a Configuration update.
//
// State for tests and people is mirrored on <body data-state=... data-reasoning=...>:
// data-state: idle | connecting | waiting-agent | handshake | ready | error
// data-reasoning: on | off (after the server answered the update)
// data-agent: the trusted agent's identity; data-agent-state: ready | waiting | resuming | lost
// data-agent-changes: how many times another agent took over (and was resumed)
// data-agents: how many participants in the room could be trusted as the agent
// data-untrusted: protocol packets dropped because their sender is not the agent
// data-granted: the reasoning the server grants (full | summary | encrypted | none)

import {
  type ClientEvent,
  ReasoningClient,
  type ReasoningState,
  type ToolCall,
  type Turn,
  newId,
} from "@alicia/reasoning";
import { Room, RoomEvent, Track } from "livekit-client";

const CLIENT_VERSION = "alicia-web/0.1.0";
const AGENT_TIMEOUT_MS = 30000;

function $(id: string): HTMLElement {
  const found = document.getElementById(id);
  if (!found) throw new Error(`missing #${id}`);
  return found;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function short(value: unknown, max = 300): string {
  const s = JSON.stringify(value ?? null);
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

interface TurnView {
  el: HTMLElement;
  steps: HTMLOListElement;
  count: HTMLElement;
  answer: HTMLElement;
  shown: number;
  errorShown: boolean;
}

/** The page's drawing of the client's turns, state and notices. */
class DebugPage {
  readonly room = new Room();
  readonly client: ReasoningClient;
  private views = new Map<string, TurnView>();
  private lastNotice = "";
  private roomName = "";
  private playing?: Track;

  constructor(
    private log: HTMLElement,
    private status: HTMLElement,
    showReasoning: boolean,
    agentName?: string,
  ) {
    this.client = new ReasoningClient(this.room, {
      agentName,
      showReasoning,
      clientVersion: CLIENT_VERSION,
      device: "web",
      agentTimeoutMs: AGENT_TIMEOUT_MS,
    });
    document.body.dataset.reasoning = showReasoning ? "on" : "off";
    this.client.on((e) => this.onEvent(e));
    // The agent's spoken answers (a voice agent publishes an audio track): play them.
    this.room.on(RoomEvent.TrackSubscribed, (track, _pub, participant) => {
      if (track.kind === Track.Kind.Audio && this.client.trusts(participant)) this.play(track);
    });
  }

  /** Play the agent's audio track (one at a time). */
  private play(track: Track): void {
    if (this.playing === track) return;
    this.playing = track;
    const audio = track.attach();
    audio.id = "agent-audio";
    document.getElementById("agent-audio")?.remove();
    document.body.append(audio);
    document.body.dataset.agentAudio = "subscribed";
  }

  /** The agent is trusted once it announces the protocol, which may come after its audio
   * track was subscribed: play what the trusted agent already publishes. */
  private playTrusted(identity: string): void {
    const agent = this.room.remoteParticipants.get(identity);
    if (!agent || !this.client.trusts(agent)) return;
    for (const pub of agent.trackPublications.values()) {
      if (pub.kind === Track.Kind.Audio && pub.track) this.play(pub.track);
    }
  }

  setStatus(state: string, text: string): void {
    document.body.dataset.state = state;
    this.status.textContent = text;
  }

  async connect(room: string, identity: string): Promise<void> {
    this.roomName = room;
    this.setStatus("connecting", `connecting to ${room}…`);
    // A token minted by the app's backend comes in the fragment (never sent to a server):
    // #token=<jwt>&url=<ws url>. Otherwise ask the development issuer (/token).
    const fragment = new URLSearchParams(location.hash.slice(1));
    let grant: { url?: string; token?: string; error?: string };
    if (fragment.get("token") && fragment.get("url")) {
      grant = { url: fragment.get("url") ?? undefined, token: fragment.get("token") ?? undefined };
    } else {
      const resp = await fetch(`token?${new URLSearchParams({ room, identity })}`);
      grant = (await resp.json()) as typeof grant;
      if (!resp.ok || !grant.url || !grant.token) {
        throw new Error(grant.error ?? `token endpoint answered ${resp.status}`);
      }
    }
    if (!grant.url || !grant.token) throw new Error("no token");
    await this.room.connect(grant.url, grant.token);
    await this.client.start();
  }

  /** Publish (or stop) the browser's microphone as this participant's audio track. */
  async setMicrophone(on: boolean): Promise<void> {
    await this.room.localParticipant.setMicrophoneEnabled(on);
    this.client.setOwnSpeech(on);
    document.body.dataset.mic = on ? "on" : "off";
  }

  // --- drawing ---------------------------------------------------------------------

  private onEvent(e: ClientEvent): void {
    switch (e.kind) {
      case "state":
        return this.onState(e.state);
      case "notice":
        return this.notice(e.text);
      case "turn":
        return void this.view(e.turn);
      case "step":
        return this.onStep(e.turn, e.step.id, e.step.stepIndex, e.shown);
      case "tool":
        return this.onTool(e.turn, e.tool);
      case "toolResult":
        return this.onToolResult(e.turn, e.tool);
      case "answerStarted":
        this.view(e.turn).el.dataset.state = "answering";
        return;
      case "sentence":
        this.view(e.turn).answer.textContent = e.turn.answer;
        return;
      case "done":
        return this.onDone(e.turn);
      case "error":
        if (e.turn) return this.showError(e.turn);
        this.log.append(el("div", "error", `error ${e.error.code}: ${e.error.message}`));
        return;
      default:
        return;
    }
  }

  private onState(s: ReasoningState): void {
    if (s.agent) this.playTrusted(s.agent);
    const b = document.body.dataset;
    b.reasoning = s.showReasoning ? "on" : "off";
    b.agents = String(s.agents);
    if (s.untrusted) b.untrusted = String(s.untrusted);
    if (s.agent) b.agent = s.agent;
    if (s.agentState !== "none" && (s.agentChanges || s.agentState !== "ready")) b.agentState = s.agentState;
    if (s.agentChanges) b.agentChanges = String(s.agentChanges);
    if (s.granted) b.granted = s.granted;
    const seconds = AGENT_TIMEOUT_MS / 1000;
    switch (s.status) {
      case "idle":
        return;
      case "waiting-agent":
        return this.setStatus(
          s.status,
          s.agentState === "waiting"
            ? `the agent left; waiting up to ${seconds} s for another agent…`
            : `joined ${this.roomName}; waiting for the agent…`,
        );
      case "handshake":
        return this.setStatus(s.status, s.agentState === "resuming" ? `agent ${s.agent} took over; resuming…` : "handshake…");
      case "error":
        return this.setStatus(s.status, `error: ${s.error ?? "unknown"}`);
      case "ready": {
        if (s.agentChanges) return this.setStatus(s.status, `ready · conversation ${s.conversationId} · ${this.lastNotice}`);
        const features = s.serverFeatures.length ? s.serverFeatures.join(", ") : "none";
        const badge =
          s.granted === "full" || !s.showReasoning
            ? ""
            : s.granted === "none"
              ? " · reasoning: not granted"
              : ` · reasoning: ${s.granted}`;
        return this.setStatus(s.status, `ready · conversation ${s.conversationId} · agent features: ${features}${badge}`);
      }
    }
  }

  private view(turn: Turn): TurnView {
    const known = this.views.get(turn.userMessageId);
    if (known) return known;
    const show = this.client.assembler.showReasoning;
    const article = el("article", "turn");
    article.dataset.userId = turn.userMessageId;
    article.dataset.state = "pending";
    article.dataset.steps = "0";
    article.dataset.own = turn.own ? "yes" : "no";
    const text = turn.spoken
      ? `(spoken) ${turn.question}`
      : turn.own
        ? turn.question
        : turn.question || "(another participant's message)";
    const user = el("div", "user");
    user.append(el("span", "who", turn.own ? "you" : "someone else"), el("span", "text", text));
    const thinking = el("details", "thinking");
    thinking.open = show;
    const summary = el("summary", undefined, "Thinking · ");
    const count = el("span", "count", show ? "0 steps" : "reasoning hidden");
    summary.append(count);
    const steps = el("ol", "steps");
    thinking.append(summary, steps);
    const answer = el("div", "answer");
    article.append(user, thinking, answer);
    this.log.append(article);
    article.scrollIntoView({ block: "end" });
    const v: TurnView = { el: article, steps, count, answer, shown: 0, errorShown: false };
    this.views.set(turn.userMessageId, v);
    // The client keeps its last 200 turns; so does the page.
    const kept = new Set(this.client.turns.map((t) => t.userMessageId));
    for (const [id, old] of this.views) {
      if (kept.has(id)) continue;
      old.el.remove();
      this.views.delete(id);
    }
    return v;
  }

  private onStep(turn: Turn, id: string, index: number, shown: boolean): void {
    const v = this.view(turn);
    if (!shown) {
      v.count.textContent = `reasoning hidden (${turn.hiddenSteps})`;
      return;
    }
    const step = turn.steps.find((s) => s.id === id);
    if (!step) return;
    const li = el("li", "step");
    li.dataset.index = String(index);
    li.dataset.id = id;
    const label = turn.totalSteps ? `step ${index} of ${turn.totalSteps}` : `step ${index}`;
    const content = step.content || (step.encryptedValue ? "🔒 encrypted" : "");
    li.append(el("span", "step-no", label), el("span", "step-text", content));
    // Ordered by stepIndex; tool entries keep their arrival position.
    const later = [...v.steps.querySelectorAll<HTMLElement>("li.step")].find((s) => Number(s.dataset.index) > index);
    v.steps.insertBefore(li, later ?? null);
    v.shown++;
    v.count.textContent = `${v.shown} step${v.shown === 1 ? "" : "s"}`;
    v.el.dataset.steps = String(v.shown);
    if (v.el.dataset.state === "pending") v.el.dataset.state = "thinking";
  }

  private onTool(turn: Turn, tool: ToolCall): void {
    const li = el("li", "tool");
    li.dataset.requestId = tool.request.id;
    li.append(
      el("span", "tool-name", `⚙ ${tool.request.toolName}`),
      el("span", "tool-args", ` ${short(tool.request.parameters)} `),
      el("span", "tool-exec", `[${tool.request.execution}]`),
      el("span", "tool-result", " …"),
    );
    this.view(turn).steps.append(li);
  }

  private onToolResult(turn: Turn, tool: ToolCall): void {
    const v = this.view(turn);
    const li = v.steps.querySelector<HTMLElement>(`li.tool[data-request-id="${CSS.escape(tool.request.id)}"]`);
    const out = li?.querySelector(".tool-result");
    const r = tool.result;
    if (!li || !out || !r) return;
    if (r.success) {
      out.textContent = ` → ${short(r.result)}`;
    } else {
      li.classList.add("failed");
      out.textContent = ` → failed: ${r.errorMessage ?? r.errorCode ?? "error"}`;
    }
  }

  private onDone(turn: Turn): void {
    const v = this.view(turn);
    v.answer.textContent = turn.answer;
    v.el.dataset.state = turn.status === "error" ? "error" : "done";
    v.el.dataset.end = turn.status; // done | partial | stopped | error
    if (turn.error) this.showError(turn);
    if (v.shown === 0 && turn.hiddenSteps === 0) {
      v.count.textContent = this.client.assembler.showReasoning ? "no reasoning steps" : "reasoning hidden";
    }
  }

  private showError(turn: Turn): void {
    const v = this.view(turn);
    if (!turn.error || v.errorShown) return;
    v.errorShown = true;
    v.el.append(el("div", "error", `error ${turn.error.code}: ${turn.error.message}`));
  }

  /** A visible line in the log about the agent. */
  private notice(text: string): void {
    this.lastNotice = text;
    const div = el("div", "notice", text);
    div.setAttribute("role", "status");
    div.style.cssText = "margin:0.5em 0;padding:0.4em 0.6em;background:#fff4d6;border-left:3px solid #d9a400;";
    this.log.append(div);
    div.scrollIntoView({ block: "end" });
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
  const page = new DebugPage($("log"), $("status"), toggle.checked, params.get("agent") ?? undefined);
  const client = page.client;
  document.body.dataset.state = "idle";
  const failed = (what: string) => (err: unknown) =>
    page.setStatus("error", `${what}: ${err instanceof Error ? err.message : String(err)}`);

  const connect = async (): Promise<void> => {
    connectBtn.disabled = true;
    roomInput.disabled = identityInput.disabled = true;
    try {
      await page.connect(roomInput.value.trim(), identityInput.value.trim());
      input.disabled = sendBtn.disabled = micBtn.disabled = false;
      input.focus();
    } catch (err) {
      failed("error")(err);
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
    client.ask(text).catch(failed("error"));
  });
  toggle.addEventListener("change", () => {
    toggle.disabled = true;
    client
      .setShowReasoning(toggle.checked)
      .catch(failed("error"))
      .finally(() => (toggle.disabled = false));
  });
  micBtn.addEventListener("click", () => {
    const on = micBtn.getAttribute("aria-pressed") !== "true";
    micBtn.disabled = true;
    page
      .setMicrophone(on)
      .then(() => {
        micBtn.setAttribute("aria-pressed", String(on));
        micBtn.textContent = on ? "mic on" : "mic off";
      })
      .catch(failed("microphone"))
      .finally(() => (micBtn.disabled = false));
  });
  if (params.get("autoconnect") === "1") void connect();
}

main();
