// A React page as a LiveKit developer writes one with @livekit/components-react and
// @alicia/reasoning/react: <LiveKitRoom> around the package's <ReasoningPanel/> (steps per
// answer, tool calls, the "show reasoning" toggle) and a form that asks through
// useReasoning(). The join URL and token come in the fragment (#url=...&token=...), as an
// app's backend would hand them over. What the page receives is recorded (recorder.ts).

import { ReasoningPanel, useReasoning } from "@alicia/reasoning/react";
import { LiveKitRoom, useConnectionState, useRoomContext } from "@livekit/components-react";
import { Room } from "livekit-client";
import { type FormEvent, useState } from "react";
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
  return <p id="connection" data-connection={connection}>{connection}</p>;
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

function App() {
  return (
    <LiveKitRoom room={room} serverUrl={params.get("url") ?? ""} token={params.get("token") ?? ""} connect audio={false} video={false}>
      <Status />
      <ReasoningPanel {...OPTIONS} />
      <Ask />
    </LiveKitRoom>
  );
}

createRoot(document.getElementById("root") as HTMLElement).render(<App />);
