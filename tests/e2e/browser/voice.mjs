// The web page's microphone, in Debian's chromium driven by playwright-core: the question
// is a WAV played as the fake microphone (--use-file-for-fake-audio-capture). Run from
// tests/e2e/browser/test_browser.py:
//
//   PAGE_URL    the page (with ?room=...&autoconnect=1 and a #token=&url= fragment)
//   WAV         the spoken question (16-bit PCM WAV)
//   SCREENSHOT  where to save the final screenshot (PNG)
//   CHROMIUM    browser binary (default /usr/bin/chromium)
//   TIMEOUT_MS  per-wait limit (default 90000)
//
// Flow: connect, turn the microphone on, wait for the voice turn (its steps in the
// thinking panel and its answer) and for the agent's audio track. Prints one JSON line.

import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { chromium } from "playwright-core";

const env = process.env;
const timeout = Number(env.TIMEOUT_MS ?? 90000);
const screenshot = env.SCREENSHOT ?? "test-artifacts/browser-voice.png";
if (!env.PAGE_URL || !env.WAV) {
  console.error("PAGE_URL and WAV are required");
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
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    `--use-file-for-fake-audio-capture=${env.WAV}%noloop`,
  ],
  viewport: { width: 1100, height: 900 },
});
const page = context.pages()[0] ?? (await context.newPage());
const consoleLines = [];
page.on("console", (msg) => consoleLines.push(`${msg.type()}: ${msg.text()}`));
page.on("pageerror", (err) => consoleLines.push(`pageerror: ${err.message}`));

let code = 0;
const result = {};
try {
  await page.goto(env.PAGE_URL, { timeout });
  await page.waitForSelector('body[data-state="ready"]', { timeout });
  await page.click("#mic");
  await page.waitForSelector('body[data-mic="on"]', { timeout });
  const turn = page.locator("article.turn").first();
  await page.waitForSelector('article.turn[data-state="done"]', { timeout });
  await page.waitForSelector('body[data-agent-audio="subscribed"]', { timeout });
  result.question = await turn.locator(".question, .user, header").first().innerText().catch(() => "");
  result.steps = await turn.locator("li.step .step-text").allInnerTexts();
  result.answer = await turn.locator(".answer").innerText();
  result.mic = await page.locator("#mic").innerText();
  result.audio = await page.evaluate(() => {
    const el = document.getElementById("agent-audio");
    const stream = el && el.srcObject;
    return stream ? stream.getAudioTracks().map((t) => t.readyState) : [];
  });
  result.text = await turn.innerText();
} catch (err) {
  code = 1;
  result.error = String(err);
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
