// The DOM both agent-starter-style pages draw (stock.tsx, session.tsx), which the driver's
// "stock" mode reads: the agent's state, the merged transcript and the chat form. Every
// state it renders is kept, in order, on window.__shownStates.

import { type FormEvent, useEffect, useState } from "react";

declare global {
  interface Window {
    /** Every agent state a page rendered, in order. */
    __shownStates?: string[];
  }
}

/** One line of the transcript: an agent's transcription or a chat message. */
export interface Line {
  id: string;
  kind: "transcription" | "chat";
  from: string;
  text: string;
  segmentId: string;
}

const shown: string[] = (window.__shownStates = []);

/** The agent's `state`, its `agent` identity ("" if none), `lines`, and a form that
 * sends typed input with `send`. */
export function SessionView(props: {
  state: string;
  agent: string;
  lines: Line[];
  send: (text: string) => unknown;
  sending: boolean;
}) {
  const { state, agent, lines, send, sending } = props;
  const [text, setText] = useState("");
  useEffect(() => {
    if (shown[shown.length - 1] !== state) shown.push(state);
  }, [state]);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!text.trim()) return;
    void send(text.trim());
    setText("");
  };
  return (
    <main id="session" data-agent-state={state} data-agent={agent}>
      <p id="agent-state">{state}</p>
      <ul id="transcript">
        {lines.map((l) => (
          <li
            key={l.id}
            className="line"
            data-kind={l.kind}
            data-from={l.from}
            data-agent={agent && l.from === agent ? "yes" : "no"}
            data-segment-id={l.segmentId}
          >
            {l.text}
          </li>
        ))}
      </ul>
      <form id="chat" onSubmit={submit}>
        <input id="message" value={text} onChange={(e) => setText(e.target.value)} />
        <button type="submit" disabled={sending}>
          Send
        </button>
      </form>
    </main>
  );
}
