// A page that reads an agent the way today's agent-starter-react does, knowing nothing of
// the Alicia protocol (no @alicia/reasoning): useSession() on a token source, inside a
// <SessionProvider>; useAgent() for the agent (the AGENT participant) and its state (its
// lk.agent.state attribute, "failed" if it never gets there); useSessionMessages() for
// what the agent says (lk.transcription text streams) merged with the chat, and its send()
// for typed input (lk.chat). A text session: started with the microphone off. The join URL
// and token come in the fragment. It draws the same DOM as stock.tsx, so the driver's
// "stock" mode runs it; what the page receives is recorded (recorder.ts).

import { SessionProvider, useAgent, useSession, useSessionMessages } from "@livekit/components-react";
import { TokenSource } from "livekit-client";
import { type FormEvent, useEffect, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";

import { record } from "./recorder";

declare global {
  interface Window {
    /** Every agent state this page rendered, in order. */
    __shownStates?: string[];
    /** Why useAgent() said the agent failed, if it ever did. */
    __failures?: string[];
  }
}

const params = new URLSearchParams(location.hash.slice(1));
const tokens = TokenSource.literal({
  serverUrl: params.get("url") ?? "",
  participantToken: params.get("token") ?? "",
});
const shown: string[] = (window.__shownStates = []);
const failures: string[] = (window.__failures = []);

function Chat() {
  const agent = useAgent();
  const { messages, send, isSending } = useSessionMessages();
  const [text, setText] = useState("");
  useEffect(() => {
    if (shown[shown.length - 1] !== agent.state) shown.push(agent.state);
    for (const reason of agent.failureReasons ?? []) failures.push(reason);
  }, [agent.state, agent.failureReasons]);
  const lines = useMemo(
    () =>
      messages.map((m) => ({
        id: m.id,
        kind: m.type === "agentTranscript" || m.type === "userTranscript" ? "transcription" : "chat",
        from: m.from?.identity ?? "",
        text: m.message,
        segmentId: m.attributes?.["lk.segment_id"] ?? "",
      })),
    [messages],
  );
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!text.trim()) return;
    void send(text.trim());
    setText("");
  };
  const identity = agent.isConnected ? agent.identity : "";
  return (
    <main id="session" data-agent-state={agent.state} data-agent={identity}>
      <p id="agent-state">{agent.state}</p>
      <ul id="transcript">
        {lines.map((l) => (
          <li
            key={l.id}
            className="line"
            data-kind={l.kind}
            data-from={l.from}
            data-agent={identity && l.from === identity ? "yes" : "no"}
            data-segment-id={l.segmentId}
          >
            {l.text}
          </li>
        ))}
      </ul>
      <form id="chat" onSubmit={submit}>
        <input id="message" value={text} onChange={(e) => setText(e.target.value)} />
        <button type="submit" disabled={isSending}>
          Send
        </button>
      </form>
    </main>
  );
}

function App() {
  const session = useSession(tokens);
  useEffect(() => {
    record(session.room, { streams: false });
    void session.start({ tracks: { microphone: { enabled: false } } });
    return () => void session.end();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);
  return (
    <SessionProvider session={session}>
      <Chat />
    </SessionProvider>
  );
}

createRoot(document.getElementById("root") as HTMLElement).render(<App />);
