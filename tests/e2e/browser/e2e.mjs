// Browser end-to-end run of the web debug page, driven by playwright-core with Debian's
// chromium (never a downloaded browser). Run from pytest
// (tests/e2e/browser/test_browser.py):
//
//   PAGE_URL       page to open (the web app, with ?room=...&autoconnect=1)
//   QUESTION_1/2   the two questions to type
//   SCREENSHOT     where to save the final screenshot (PNG)
//   CHROMIUM       browser binary (default /usr/bin/chromium)
//   TIMEOUT_MS     per-wait limit (default 60000)
//
// Flow: connect, ask QUESTION_1 with reasoning shown, wait for the answer, toggle
// "show reasoning" off (wait for the server's Configuration reply), ask QUESTION_2,
// wait for its answer. Prints one JSON line with what the page showed; the Python test
// asserts on it. Exits non-zero on any failure (with a screenshot when possible).

import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { chromium } from "playwright-core";

const env = process.env;
const pageUrl = env.PAGE_URL;
const screenshot = env.SCREENSHOT ?? "test-artifacts/browser-e2e.png";
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
    stepNumbers: await turn.locator("li.step .step-no").allInnerTexts(),
    tools: await turn.locator("li.tool").allInnerTexts(),
    summary: await turn.locator("summary").innerText(),
    answer: await turn.locator(".answer").innerText(),
  };
}

async function ask(text, n) {
  await page.fill("#message", text);
  await page.press("#message", "Enter");
  await page.waitForSelector(`article.turn:nth-of-type(${n})[data-state="done"]`, { timeout });
}

let code = 0;
const result = {};
try {
  await page.goto(pageUrl, { timeout });
  await page.waitForSelector('body[data-state="ready"]', { timeout });
  result.status = await page.locator("#status").innerText();

  await ask(env.QUESTION_1 ?? "9.11 and 9.8, which is greater?", 1);
  result.first = await turnInfo(0);

  await page.uncheck("#show-reasoning");
  await page.waitForSelector('body[data-reasoning="off"]', { timeout });

  await ask(env.QUESTION_2 ?? "9.11 and 9.8, which is greater?", 2);
  result.second = await turnInfo(1);
  result.state = await page.evaluate(() => document.body.dataset.state);
} catch (err) {
  code = 1;
  result.error = String(err);
  result.state = await page.evaluate(() => document.body.dataset.state).catch(() => null);
  result.statusText = await page.locator("#status").innerText().catch(() => null);
} finally {
  mkdirSync(dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot, fullPage: true }).catch(() => {});
  result.console = consoleLines.slice(-30);
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
console.log(JSON.stringify(result));
process.exit(code);
