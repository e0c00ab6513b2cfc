// Drive the AG-UI endpoint with the real @ag-ui/client HttpAgent, as a web app does.
//
// Usage: node agui_client.mjs '<json>' with {url, token, threadId, questions: [..],
// tamper: false, ignoreReasoning: false}. Each question is one run of the same agent
// (its message history, with the encrypted values it received, goes back every run).
// With tamper, the first reasoning message's encryptedValue is changed before the
// second run. Prints one JSON object: per run the events seen (type and fields), the
// error if the run failed, and the agent's messages after it.
import { HttpAgent } from "@ag-ui/client";

const args = JSON.parse(process.argv[2]);
const agent = new HttpAgent({
  url: args.url,
  threadId: args.threadId,
  headers: { Authorization: `Bearer ${args.token}` },
});

const runs = [];
for (const [i, question] of args.questions.entries()) {
  if (i === 1 && args.tamper) {
    const reasoning = agent.messages.find((m) => m.role === "reasoning" && m.encryptedValue);
    if (!reasoning) throw new Error("no reasoning message with an encrypted value to tamper with");
    const v = reasoning.encryptedValue;
    const flipped = v.at(-5) === "A" ? "B" : "A";
    agent.setMessages(
      agent.messages.map((m) =>
        m === reasoning ? { ...m, encryptedValue: v.slice(0, -5) + flipped + v.slice(-4) } : m,
      ),
    );
  }
  agent.addMessage({ id: `user-${i}-${Date.now()}`, role: "user", content: question });
  const events = [];
  let error = null;
  const subscriber = {
    onEvent: ({ event }) => {
      if (args.ignoreReasoning && event.type.startsWith("REASONING")) return;
      events.push(event);
    },
  };
  try {
    await agent.runAgent({ runId: `run-${i}` }, subscriber);
  } catch (e) {
    error = String(e && e.message ? e.message : e);
  }
  runs.push({ events, error, messages: structuredClone(agent.messages) });
}
process.stdout.write(JSON.stringify({ runs }));
