// A page that reads an agent the way LiveKit's agent-starter-react does, knowing nothing of
// the Alicia protocol (no @alicia/reasoning): useVoiceAssistant() for the agent's state (its
// lk.agent.state attribute), useTranscriptions() for what it says (lk.transcription text
// streams) merged with useChat()'s messages (agent-starter-react's useChatAndTranscription),
// and typed input sent by useChat() (room.localParticipant.sendText on lk.chat). The join
// URL and token come in the fragment. What the page receives is recorded (recorder.ts; its
// own handlers on the lk.* topics are off, as the hooks read them).

import { LiveKitRoom, useChat, useTranscriptions, useVoiceAssistant } from "@livekit/components-react";
import { Room } from "livekit-client";
import { useMemo } from "react";
import { createRoot } from "react-dom/client";

import { record } from "./recorder";
import { type Line, SessionView } from "./transcript";

const params = new URLSearchParams(location.hash.slice(1));
const room = new Room();
record(room, { streams: false });

function Session() {
  const { state, agent } = useVoiceAssistant();
  const transcriptions = useTranscriptions();
  const chat = useChat();
  const lines = useMemo(() => {
    const all: (Line & { timestamp: number })[] = [
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
  return (
    <SessionView
      state={state}
      agent={agent?.identity ?? ""}
      lines={lines}
      send={chat.send}
      sending={chat.isSending}
    />
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
