// Drive a test frontend (react.html, stock.html or session.html, bundled by build.mjs) in Debian's
// chromium with playwright-core (never a downloaded browser). Run from pytest
// (tests/e2e/browser/test_browser_frontends.py):
//
//   PAGE_URL    the page, with #url=...&token=... (the LiveKit URL and a join token)
//   MODE        "react" (the @alicia/reasoning/react page) or "stock" (agent-starter-react's way:
//               stock.html and session.html)
//   PLAN        JSON list of steps, in order:
//                 {"ask": "text"}              react: ask; wait until that turn has ended
//                 {"reasoning": true|false}    react: click "show reasoning"; wait for the server
//                 {"ask": "text", "expect": "answer"}
//                                              stock: send on lk.chat; wait until the agent's
//                                              transcript reads `expect` and it listens again
//   SCREENSHOT  where to save the last screenshot (PNG)
//   CHROMIUM    browser binary (default /usr/bin/chromium)
//   TIMEOUT_MS  per-wait limit (default 90000)
//   REPORT      where to write the JSON report (default: one line on stdout)
//
// Below the SDK, an init script taps the wire before any page script runs: every message
// of every RTCDataChannel and WebSocket the page opens (window.__wire). Writes a JSON report:
// what the page showed after each step, the DOM (outerHTML), window.__received (recorder.ts)
// and the wire. Exits non-zero on any failure (with the report so far).

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { chromium } from "playwright-core";

const env = process.env;
const pageUrl = env.PAGE_URL;
const mode = env.MODE ?? "react";
const plan = JSON.parse(env.PLAN ?? "[]");
const screenshot = env.SCREENSHOT ?? "test-artifacts/browser-frontend.png";
const timeout = Number(env.TIMEOUT_MS ?? 90000);
if (!pageUrl) {
  console.error("PAGE_URL is required");
  process.exit(2);
}

/** Runs in the page before its scripts: record every message the wire brings. */
function tapTheWire() {
  const wire = { dc: [], ws: [] };
  window.__wire = wire;
  const decoder = new TextDecoder("utf-8", { fatal: false });
  const keep = (list, label, data) => {
    if (typeof data === "string") return list.push({ label, bytes: data.length, text: data });
    if (data instanceof Blob) {
      const entry = { label, bytes: data.size, text: "" };
      list.push(entry);
      data.arrayBuffer().then((b) => (entry.text = decoder.decode(b)));
      return;
    }
    const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer);
    list.push({ label, bytes: bytes.byteLength, text: decoder.decode(bytes) });
  };
  const tap = (channel) => channel.addEventListener("message", (e) => keep(wire.dc, channel.label, e.data));
  const PC = window.RTCPeerConnection;
  window.RTCPeerConnection = class extends PC {
    constructor(...args) {
      super(...args);
      this.addEventListener("datachannel", (e) => tap(e.channel));
    }
    createDataChannel(...args) {
      const channel = super.createDataChannel(...args);
      tap(channel);
      return channel;
    }
  };
  const WS = window.WebSocket;
  window.WebSocket = class extends WS {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", (e) => keep(wire.ws, String(args[0]).split("?")[0], e.data));
    }
  };
}

const userDataDir = mkdtempSync(join(tmpdir(), "alicia-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-features=WebRtcHideLocalIpsWithMdns",
  ],
  viewport: { width: 1100, height: 900 },
});
await context.addInitScript(tapTheWire);
const page = context.pages()[0] ?? (await context.newPage());
const consoleLines = [];
const pageErrors = [];
page.on("console", (msg) => consoleLines.push(`${msg.type()}: ${msg.text()}`));
page.on("pageerror", (err) => {
  pageErrors.push(err.message);
  consoleLines.push(`pageerror: ${err.message}`);
});

const ENDED = ["done", "partial", "stopped", "error"];

/** react: what turn `i` shows (textContent: a collapsed <details> is not rendered). */
async function turnInfo(i) {
  return page.evaluate((i) => {
    const turn = document.querySelectorAll(".alicia-turn")[i];
    const all = (sel) => [...turn.querySelectorAll(sel)];
    const text = (sel) => turn.querySelector(sel)?.textContent ?? null;
    return {
      state: turn.dataset.state,
      question: text(".alicia-question"),
      steps: all(".alicia-step-text").map((e) => e.textContent),
      stepNumbers: all(".alicia-step-no").map((e) => e.textContent),
      stepIndexes: all(".alicia-step").map((e) => Number(e.dataset.index)),
      items: all(".alicia-steps > li").map((e) => e.className),
      tools: all(".alicia-tool").map((e) => e.textContent),
      count: text(".alicia-count"),
      answer: text(".alicia-answer"),
      error: text(".alicia-error"),
      dataSteps: Number(turn.dataset.steps),
    };
  }, i);
}

async function react(result) {
  await page.waitForSelector('.alicia-reasoning[data-state="ready"]', { timeout });
  await page.waitForSelector('#ask[data-ready="yes"]', { timeout });
  result.granted = await page.getAttribute(".alicia-reasoning", "data-granted");
  result.turns = [];
  let asked = 0;
  for (const step of plan) {
    if ("reasoning" in step) {
      const want = step.reasoning ? "on" : "off";
      // A controlled checkbox: it flips once the server confirmed the Configuration.
      if ((await page.isChecked(".alicia-toggle input")) !== step.reasoning) await page.click(".alicia-toggle input");
      await page.waitForSelector(`.alicia-reasoning[data-reasoning="${want}"]`, { timeout });
      result.turns.push({ toggled: want, received: await page.evaluate(() => window.__received.data.length) });
      continue;
    }
    await page.fill("#message", step.ask);
    await page.press("#message", "Enter");
    const i = asked++;
    await page.waitForFunction(
      ({ i, ended }) => ended.includes(document.querySelectorAll(".alicia-turn")[i]?.dataset.state),
      { i, ended: ENDED },
      { timeout, polling: 100 },
    );
    await page.waitForSelector('#ask[data-ready="yes"]', { timeout });
    result.turns.push({
      ...(await turnInfo(i)),
      received: await page.evaluate(() => window.__received.data.length),
    });
  }
  result.reasoning = await page.getAttribute(".alicia-reasoning", "data-reasoning");
  const n = await page.locator(".alicia-turn").count();
  result.final = [];
  for (let i = 0; i < n; i++) result.final.push(await turnInfo(i));
}

async function stock(result) {
  await page.waitForSelector('#session[data-agent-state="listening"]', { timeout });
  result.agent = await page.getAttribute("#session", "data-agent");
  result.turns = [];
  let answers = 0;
  for (const step of plan) {
    await page.fill("#message", step.ask);
    await page.press("#message", "Enter");
    const n = ++answers;
    // Its answer reads `expect`, the agent has thought and spoken, and listens again.
    await page.waitForFunction(
      ({ n, expect }) => {
        const norm = (s) => s.split(/\s+/).filter(Boolean).join(" ");
        const lines = [...document.querySelectorAll('#transcript li[data-agent="yes"]')];
        const states = window.__received.agentStates;
        return (
          lines.length >= n &&
          norm(lines[n - 1].textContent) === norm(expect) &&
          states.lastIndexOf("thinking") >= 0 &&
          states[states.length - 1] === "listening" &&
          document.querySelector("#session").dataset.agentState === "listening"
        );
      },
      { n, expect: step.expect },
      { timeout, polling: 100 },
    );
    result.turns.push({
      lines: await page.evaluate(() =>
        [...document.querySelectorAll("#transcript li")].map((e) => ({
          kind: e.dataset.kind,
          agent: e.dataset.agent === "yes",
          from: e.dataset.from,
          segmentId: e.dataset.segmentId,
          text: e.textContent,
        })),
      ),
      shownStates: await page.evaluate(() => [...window.__shownStates]),
    });
  }
}

let code = 0;
const result = { mode };
try {
  await page.goto(pageUrl, { timeout });
  await (mode === "stock" ? stock(result) : react(result));
} catch (err) {
  code = 1;
  result.error = String(err);
} finally {
  result.html = await page.evaluate(() => document.documentElement.outerHTML).catch(() => null);
  result.received = await page.evaluate(() => window.__received ?? null).catch(() => null);
  result.wire = await page.evaluate(() => window.__wire ?? null).catch(() => null);
  result.shownStates = await page.evaluate(() => window.__shownStates ?? null).catch(() => null);
  result.failures = await page.evaluate(() => window.__failures ?? null).catch(() => null);
  mkdirSync(dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot, fullPage: true }).catch(() => {});
  result.console = consoleLines.slice(-40);
  result.pageErrors = pageErrors;
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
// The report can be megabytes: written to a file (REPORT), else to stdout before exiting.
if (env.REPORT) writeFileSync(env.REPORT, JSON.stringify(result));
else process.stdout.write(`${JSON.stringify(result)}\n`, () => process.exit(code));
if (env.REPORT) process.exit(code);
