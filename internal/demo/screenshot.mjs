// Screenshots a page of the Temporal Web UI with headless Chromium, driven over the DevTools
// protocol: node --experimental-websocket internal/demo/screenshot.mjs CHROMIUM URL OUT.png TEXT...
// It waits until the page shows every TEXT (the UI is a single-page app that renders after it
// loads, and keeps polling: Chromium's own --screenshot takes the blank page, and with
// --virtual-time-budget never returns), then saves the viewport. internal/demo/screenshot.sh
// runs it.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [chromium, url, out, ...texts] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), "pveflow-shot-"));
// The background-networking flags keep Chromium from calling out of this machine.
const browser = spawn(chromium, [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  `--user-data-dir=${profile}`, "--remote-debugging-port=0", "about:blank",
], { stdio: ["ignore", "ignore", "pipe"] });

const exited = new Promise((resolve) => browser.on("exit", resolve));

// close stops Chromium and removes its profile, which its helpers may write to for a moment
// after it exited.
async function close() {
  browser.kill();
  await exited;
  await new Promise((r) => setTimeout(r, 1000));
  try {
    rmSync(profile, { recursive: true, force: true });
  } catch (err) {
    console.error(`screenshot: ${profile} is left: ${err.message}`);
  }
}

async function fail(message) {
  console.error(`screenshot: ${message}`);
  process.exitCode = 1;
  await close();
  process.exit();
}

let endpoint;
try {
  endpoint = await new Promise((resolve, reject) => {
    let log = "";
    browser.stderr.on("data", (chunk) => {
      log += chunk;
      const m = log.match(/DevTools listening on (ws:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    browser.on("exit", () => reject(new Error(`chromium exited before it listened: ${log}`)));
  });
} catch (err) {
  await fail(err.message);
}

// The page's own endpoint: the browser's address with /devtools/page/<target>.
const { port } = new URL(endpoint);
const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
const page = targets.find((t) => t.type === "page");
const ws = new WebSocket(page.webSocketDebuggerUrl);
await new Promise((resolve) => ws.addEventListener("open", resolve, { once: true }));
let seq = 0;
const pending = new Map();
ws.addEventListener("message", (ev) => {
  const msg = JSON.parse(ev.data);
  if (msg.id && pending.has(msg.id)) {
    pending.get(msg.id)(msg);
    pending.delete(msg.id);
  }
});
function send(method, params = {}) {
  const id = ++seq;
  ws.send(JSON.stringify({ id, method, params }));
  return new Promise((resolve) => pending.set(id, resolve));
}

await send("Emulation.setDeviceMetricsOverride", { width: 1400, height: 900, deviceScaleFactor: 1, mobile: false });
await send("Page.navigate", { url });
const deadline = Date.now() + 60_000;
let shown = "";
for (;;) {
  const res = await send("Runtime.evaluate", { expression: "document.body ? document.body.innerText : ''", returnByValue: true });
  shown = res.result?.result?.value ?? "";
  if (texts.every((t) => shown.includes(t))) break;
  if (Date.now() > deadline) {
    await fail(`${url} did not show ${JSON.stringify(texts.filter((t) => !shown.includes(t)))} within a minute; it shows:\n${shown.slice(0, 2000)}`);
  }
  await new Promise((r) => setTimeout(r, 500));
}
// What the texts came with (the codec server's decrypted summary, the details) settles.
await new Promise((r) => setTimeout(r, 2000));
const shot = await send("Page.captureScreenshot", { format: "png" });
writeFileSync(out, Buffer.from(shot.result.data, "base64"));
ws.close();
await close();
console.log(out);
