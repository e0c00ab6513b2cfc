// A page that reads an agent the way LiveKit's agent-starter-react does, knowing nothing of
// the Alicia protocol (no @alicia/reasoning): useVoiceAssistant() for the agent's state (its
// lk.agent.state attribute), useTranscriptions() for what it says (lk.transcription text
// streams) merged with useChat()'s messages (agent-starter-react's useChatAndTranscription),
// and typed input sent by useChat() (room.localParticipant.sendText on lk.chat). The join
// URL and token come in the fragment. What the page receives is recorded (recorder.ts; its
// own handlers on the lk.* topics are off, as the hooks read them).

import { LiveKitRoom, useChat, useTranscriptions, useVoiceAssistant } from "@livekit/components-react";
import { Room } from "livekit-client";
import { type FormEvent, useEffect, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";

import { record } from "./recorder";

declare global {
  interface Window {
    /** Every agent state this page rendered, in order. */
    __shownStates?: string[];
  }
}

const params = new URLSearchParams(location.hash.slice(1));
const room = new Room();
record(room, { streams: false });
const shown: string[] = (window.__shownStates = []);

interface Line {
  id: string;
  kind: "transcription" | "chat";
  from: string;
  timestamp: number;
  text: string;
  segmentId: string;
}

function Session() {
  const { state, agent } = useVoiceAssistant();
  const transcriptions = useTranscriptions();
  const chat = useChat();
  const [text, setText] = useState("");
  useEffect(() => {
    if (shown[shown.length - 1] !== state) shown.push(state);
  }, [state]);
  const lines = useMemo(() => {
    const all: Line[] = [
      ...transcriptions.map((t) => ({
        id: t.streamInfo.id,
        kind: "transcription" as const,
        from: t.participantInfo.identity,
        timestamp: t.streamInfo.timestamp,
        text: t.text,
        segmentId: t.streamInfo.attributes?.["lk.segment_id"] ?? "",
      })),
      ...chat.chatMessages.map((m) => ({
        id: m.id,
        kind: "chat" as const,
        from: m.from?.identity ?? "",
        timestamp: m.timestamp,
        text: m.message,
        segmentId: "",
      })),
    ];
    return all.sort((a, b) => a.timestamp - b.timestamp);
  }, [transcriptions, chat.chatMessages]);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!text.trim()) return;
    void chat.send(text.trim());
    setText("");
  };
  return (
    <main id="session" data-agent-state={state} data-agent={agent?.identity ?? ""}>
      <p id="agent-state">{state}</p>
      <ul id="transcript">
        {lines.map((l) => (
          <li
            key={l.id}
            className="line"
            data-kind={l.kind}
            data-from={l.from}
            data-agent={agent && l.from === agent.identity ? "yes" : "no"}
            data-segment-id={l.segmentId}
          >
            {l.text}
          </li>
        ))}
      </ul>
      <form id="chat" onSubmit={submit}>
        <input id="message" value={text} onChange={(e) => setText(e.target.value)} />
        <button type="submit" disabled={chat.isSending}>
          Send
        </button>
      </form>
    </main>
  );
}

function App() {
  return (
    <LiveKitRoom room={room} serverUrl={params.get("url") ?? ""} token={params.get("token") ?? ""} connect audio={false} video={false}>
      <Session />
    </LiveKitRoom>
  );
}

createRoot(document.getElementById("root") as HTMLElement).render(<App />);
