// A page that reads an agent the way today's agent-starter-react does, knowing nothing of
// the Alicia protocol (no @alicia/reasoning): useSession() on a token source, inside a
// <SessionProvider>; useAgent() for the agent (the AGENT participant) and its state (its
// lk.agent.state attribute, "failed" if it never gets there); useSessionMessages() for
// what the agent says (lk.transcription text streams) merged with the chat, and its send()
// for typed input (lk.chat). A text session: started with the microphone off. The join URL
// and token come in the fragment. It draws the same DOM as stock.tsx (transcript.tsx), so
// the driver's "stock" mode runs it; what the page receives is recorded (recorder.ts).

import { SessionProvider, useAgent, useSession, useSessionMessages } from "@livekit/components-react";
import { TokenSource } from "livekit-client";
import { useEffect, useMemo } from "react";
import { createRoot } from "react-dom/client";

import { record } from "./recorder";
import { type Line, SessionView } from "./transcript";

declare global {
  interface Window {
    /** Why useAgent() said the agent failed, if it ever did. */
    __failures?: string[];
  }
}

const params = new URLSearchParams(location.hash.slice(1));
const tokens = TokenSource.literal({
  serverUrl: params.get("url") ?? "",
  participantToken: params.get("token") ?? "",
});
const failures: string[] = (window.__failures = []);

function Chat() {
  const agent = useAgent();
  const { messages, send, isSending } = useSessionMessages();
  useEffect(() => {
    for (const reason of agent.failureReasons ?? []) failures.push(reason);
  }, [agent.failureReasons]);
  const lines = useMemo(
    () =>
      messages.map(
        (m): Line => ({
          id: m.id,
          kind: m.type === "agentTranscript" || m.type === "userTranscript" ? "transcription" : "chat",
          from: m.from?.identity ?? "",
          text: m.message,
          segmentId: m.attributes?.["lk.segment_id"] ?? "",
        }),
      ),
    [messages],
  );
  const identity = agent.isConnected ? agent.identity : "";
  return <SessionView state={agent.state} agent={identity} lines={lines} send={send} sending={isSending} />;
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
