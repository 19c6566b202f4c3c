// The official Anthropic SDK through modelgate: node anthropic.mjs BASE_URL MODEL stream|plain [EXTRA_JSON]
// EXTRA_JSON: request fields added to the request (e.g. max_tokens for a real server).
// Prints one JSON line: {"text": ..., "events": N, "stop": ..., "usage": {...}, "types": [...]} (types: the
// stream events the SDK handed on, each once, in order); exits non-zero on any error.
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, model, mode, extra] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
const params = { model, max_tokens: 64, messages: [{ role: "user", content: "[[tokens:12]]" }],
  ...(extra ? JSON.parse(extra) : {}) };

if (mode === "stream") {
  const stream = client.messages.stream(params);
  let events = 0;
  const types = [];
  stream.on("streamEvent", (ev) => { events++; if (!types.includes(ev.type)) types.push(ev.type); });
  const msg = await stream.finalMessage();
  console.log(JSON.stringify({ text: msg.content.map((b) => b.text ?? "").join(""), events, stop: msg.stop_reason,
    usage: msg.usage, types }));
} else {
  const msg = await client.messages.create(params);
  console.log(JSON.stringify({ text: msg.content.map((b) => b.text ?? "").join(""), events: 1, stop: msg.stop_reason,
    usage: msg.usage, types: [] }));
}
