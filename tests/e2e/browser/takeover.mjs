// Browser run of the web debug page through an agent takeover, driven by playwright-core
// with Debian's chromium. Run from pytest (tests/e2e/browser/test_browser_trust.py), which
// plays the room: the agent answers QUESTION_1; an impostor joins under the agent's
// identity (the real agent is removed) and forges; then a new agent joins. The driver
// prints "FIRST" once the page shows the first answer whole (the test starts the takeover
// then: packets the agent sent may still be on their way before) and its report last.
//
//   PAGE_URL      page to open (?room=...&autoconnect=1)
//   QUESTION_1/2  the question before the takeover and the one after it
//   SCREENSHOT    where to save the final screenshot (PNG)
//   CHROMIUM      browser binary (default /usr/bin/chromium)
//   TIMEOUT_MS    per-wait limit (default 60000)
//   EXPECT_WAITING 0 when another agent is already in the room as the agent leaves (the
//                 page then never waits); default 1
//   WAIT_AGENTS   after the first answer, wait until the page sees this many agents it
//                 could trust, then print "SWAP" (the test then lets the agent leave)
//
// Flow: connect, ask QUESTION_1 and wait for its answer; wait until the page says it is
// waiting for another agent; wait until it says the agent was replaced and resumed; ask
// QUESTION_2 and wait for its answer. Prints one JSON line with what the page showed.

import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { chromium } from "playwright-core";

const env = process.env;
const pageUrl = env.PAGE_URL;
const screenshot = env.SCREENSHOT ?? "test-artifacts/browser-takeover.png";
const timeout = Number(env.TIMEOUT_MS ?? 60000);
if (!pageUrl) {
  console.error("PAGE_URL is required");
  process.exit(2);
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
const page = context.pages()[0] ?? (await context.newPage());
const consoleLines = [];
page.on("console", (msg) => consoleLines.push(`${msg.type()}: ${msg.text()}`));
page.on("pageerror", (err) => consoleLines.push(`pageerror: ${err.message}`));

async function turnInfo(i) {
  const turn = page.locator("article.turn").nth(i);
  return {
    state: await turn.getAttribute("data-state"),
    steps: await turn.locator("li.step .step-text").allInnerTexts(),
    answer: await turn.locator(".answer").innerText(),
  };
}

async function ask(text, n) {
  await page.fill("#message", text);
  await page.press("#message", "Enter");
  await page.waitForSelector(`article.turn:nth-of-type(${n})[data-state="done"]`, { timeout });
}

const body = (name) => page.evaluate((k) => document.body.dataset[k] ?? null, name);

let code = 0;
const result = {};
try {
  await page.goto(pageUrl, { timeout });
  await page.waitForSelector('body[data-state="ready"]', { timeout });
  result.firstAgent = await body("agent");

  await ask(env.QUESTION_1 ?? "6 x 7?", 1);
  result.first = await turnInfo(0);
  console.log("FIRST"); // the page shows the whole first answer
  if (env.WAIT_AGENTS) {
    await page.waitForSelector(`body[data-agents="${env.WAIT_AGENTS}"]`, { timeout });
    console.log("SWAP");
  }

  if ((env.EXPECT_WAITING ?? "1") === "1") {
    await page.waitForSelector('body[data-agent-state="waiting"]', { timeout });
    result.waitingStatus = await page.locator("#status").innerText();
  }
  await page.waitForSelector('body[data-agent-changes="1"][data-agent-state="ready"]', { timeout });
  result.resumedStatus = await page.locator("#status").innerText();
  result.agent = await body("agent");

  await ask(env.QUESTION_2 ?? "And 7 x 6?", 2);
  result.second = await turnInfo(1);
  result.notices = await page.locator("#log .notice").allInnerTexts();
  result.untrusted = Number(await body("untrusted"));
  result.state = await body("state");
  result.log = await page.locator("#log").innerText();
} catch (err) {
  code = 1;
  result.error = String(err);
  result.state = await body("state").catch(() => null);
  result.statusText = await page.locator("#status").innerText().catch(() => null);
  result.log = await page.locator("#log").innerText().catch(() => null);
} finally {
  mkdirSync(dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot, fullPage: true }).catch(() => {});
  result.console = consoleLines.slice(-30);
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
console.log(JSON.stringify(result));
process.exit(code);
