// Opens one trace in Arize Phoenix's UI, as a developer would from the URL the demo
// prints, with playwright-core and Debian's chromium. Run from pytest
// (tests/e2e/observability/test_demo_traces.py):
//
//   PAGE_URL     the trace's URL, as printed (/redirects/traces/<trace id>)
//   SCREENSHOT   where to save the screenshot of the turn's span (PNG)
//   CHROMIUM     browser binary (default /usr/bin/chromium)
//   TIMEOUT_MS   per-wait limit (default 60000)
//   INFO_MARKS   what the Info tab must show before it is read (comma-separated;
//                default "Input")
//
// Waits for the turn's span (`chat <model>`), reads its Info tab (screenshot), its
// Attributes tab and its Events tab. Prints one JSON line: the page's URL after the
// redirect, the text of each tab, the event names, and every request that left
// loopback. Exits non-zero on any failure (with a screenshot when possible).

import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { chromium } from "playwright-core";

const env = process.env;
const pageUrl = env.PAGE_URL;
const screenshot = env.SCREENSHOT ?? "test-artifacts/phoenix-trace.png";
const timeout = Number(env.TIMEOUT_MS ?? 60000);
if (!pageUrl) {
  console.error("PAGE_URL is required");
  process.exit(2);
}
mkdirSync(dirname(screenshot), { recursive: true });

const browser = await chromium.launch({
  executablePath: env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
page.setDefaultTimeout(timeout);
const external = [];
page.on("request", (request) => {
  const url = new URL(request.url());
  if (!["127.0.0.1", "localhost", "[::1]"].includes(url.hostname) && url.protocol !== "data:") {
    external.push(request.url());
  }
});

// The page's text once it holds every mark and stopped changing (two reads 500 ms
// apart): Phoenix renders a tab's cards after the tab, later on a loaded machine.
async function settled(marks) {
  const deadline = Date.now() + timeout;
  let last = null;
  for (;;) {
    const text = await page.locator("body").innerText();
    if (marks.every((m) => text.includes(m)) && text === last) return text;
    if (Date.now() > deadline) {
      throw new Error(`the page never showed ${JSON.stringify(marks)} and settled:\n${text}`);
    }
    last = text;
    await page.waitForTimeout(500);
  }
}

async function tab(name, marks) {
  await page.getByRole("tab", { name }).click();
  return await settled(marks);
}

try {
  await page.goto(pageUrl);
  const title = page.getByText(/^chat /).last();
  await title.waitFor();
  await page.getByRole("tab", { name: /^Events/ }).waitFor();
  const info = await settled((env.INFO_MARKS ?? "Input").split(","));
  await page.screenshot({ path: screenshot });
  const attributes = await tab(/^Attributes/, ["llm.token_count"]);
  const events = await tab(/^Events/, ["alicia.reasoning.step"]);
  const result = {
    url: page.url(),
    title: await title.innerText(),
    info,
    attributes,
    events,
    eventNames: events.split("\n").filter((line) => line.trim() === "alicia.reasoning.step"),
    external,
  };
  console.log(JSON.stringify(result));
} catch (err) {
  await page.screenshot({ path: screenshot }).catch(() => {});
  console.error(String(err?.stack ?? err));
  process.exitCode = 1;
} finally {
  await browser.close();
}
