// A React page as a LiveKit developer writes one with @livekit/components-react and
// @alicia/reasoning/react: <LiveKitRoom> around the package's <ReasoningPanel/> (steps per
// answer, tool calls, the "show reasoning" toggle) and a form that asks through
// useReasoning(). With wrap=session in the fragment, today's agent-starter-react way wraps
// them instead: useSession() on a token source and <SessionProvider> (which provides the
// same RoomContext), started with the microphone off. The join URL and token come in the
// fragment (#url=...&token=...), as an app's backend would hand them over. What the page
// receives is recorded (recorder.ts).

import { ReasoningPanel, useReasoning } from "@alicia/reasoning/react";
import {
  LiveKitRoom,
  SessionProvider,
  useConnectionState,
  useRoomContext,
  useSession,
} from "@livekit/components-react";
import { Room, TokenSource } from "livekit-client";
import { type FormEvent, type ReactNode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";

import { record } from "./recorder";

const params = new URLSearchParams(location.hash.slice(1));
const room = new Room();
record(room); // before it connects: everything it receives
// The panel's client (one per room; the first caller's options count): a busy test
// machine may take longer than the default 30 s to dispatch the agent.
const OPTIONS = { agentTimeoutMs: 90_000 };

function Status() {
  const connection = useConnectionState(useRoomContext());
  const wrap = params.get("wrap") ?? "LiveKitRoom";
  return (
    <p id="connection" data-connection={connection} data-wrap={wrap}>
      {connection}
    </p>
  );
}

function Ask() {
  const { ask, state } = useReasoning(OPTIONS);
  const [text, setText] = useState("");
  const ready = state?.status === "ready";
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!text.trim()) return;
    void ask(text.trim());
    setText("");
  };
  return (
    <form id="ask" onSubmit={submit} data-ready={ready ? "yes" : "no"}>
      <input id="message" value={text} onChange={(e) => setText(e.target.value)} disabled={!ready} />
      <button type="submit" disabled={!ready}>
        Ask
      </button>
    </form>
  );
}

function Page() {
  return (
    <>
      <Status />
      <ReasoningPanel {...OPTIONS} />
      <Ask />
    </>
  );
}

const serverUrl = params.get("url") ?? "";
const token = params.get("token") ?? "";
const tokens = TokenSource.literal({ serverUrl, participantToken: token });

function InSession({ children }: { children: ReactNode }) {
  const session = useSession(tokens, { room });
  useEffect(() => {
    void session.start({ tracks: { microphone: { enabled: false } } });
    return () => void session.end();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);
  return <SessionProvider session={session}>{children}</SessionProvider>;
}

function App() {
  if (params.get("wrap") === "session") {
    return (
      <InSession>
        <Page />
      </InSession>
    );
  }
  return (
    <LiveKitRoom room={room} serverUrl={serverUrl} token={token} connect audio={false} video={false}>
      <Page />
    </LiveKitRoom>
  );
}

createRoot(document.getElementById("root") as HTMLElement).render(<App />);
