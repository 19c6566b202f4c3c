// The official OpenAI SDK through modelgate:
//   node openai.mjs BASE_URL MODEL stream|plain|chat-helper|responses-stream|responses-helper|responses-plain [EXTRA_JSON]
// (chat-helper and responses-helper: the SDK's stream helpers, chat.completions.stream() and
// responses.stream(), which accumulate the answer and throw on events out of their order)
// EXTRA_JSON: request fields added to the request (e.g. max_tokens for a real server).
// Prints one JSON line: {"text": ..., "chunks": N, "finish": ...} (chat.completions.create), or
// {"text": ..., "events": N, "status": ..., "types": [...], "error": {code, message} | null}
// (responses.create; "error" is a response.failed event's); exits non-zero on any error thrown.
import OpenAI from "openai";

const [baseURL, model, mode, extra] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
const messages = [{ role: "user", content: "[[tokens:12]]" }];
const more = extra ? JSON.parse(extra) : {};

if (mode === "stream") {
  const stream = await client.chat.completions.create({ model, messages, stream: true, ...more });
  let text = "", chunks = 0, finish = null;
  for await (const chunk of stream) {
    chunks++;
    const c = chunk.choices[0];
    if (c?.delta?.content) text += c.delta.content;
    if (c?.finish_reason) finish = c.finish_reason;
  }
  console.log(JSON.stringify({ text, chunks, finish }));
} else if (mode === "responses-stream") {
  const stream = await client.responses.create({ model, input: "[[tokens:12]]", stream: true, ...more });
  let text = "", events = 0, status = null, error = null;
  const types = [];
  for await (const ev of stream) {
    events++;
    if (!types.includes(ev.type)) types.push(ev.type);
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.failed") status = ev.response.status;
    if (ev.type === "response.failed") error = ev.response.error;
  }
  console.log(JSON.stringify({ text, events, status, types, error }));
} else if (mode === "chat-helper") {
  const stream = client.chat.completions.stream({ model, messages, stream_options: { include_usage: true }, ...more });
  let text = "", chunks = 0;
  stream.on("content", (delta) => { text += delta; });
  stream.on("chunk", () => chunks++);
  const c = await stream.finalChatCompletion();
  console.log(JSON.stringify({ text, final: c.choices[0].message.content, chunks, finish: c.choices[0].finish_reason,
    usage: c.usage ?? null }));
} else if (mode === "responses-helper") {
  const stream = client.responses.stream({ model, input: "[[tokens:12]]", ...more });
  let text = "", events = 0;
  const types = [];
  stream.on("event", (ev) => { events++; if (!types.includes(ev.type)) types.push(ev.type); });
  stream.on("response.output_text.delta", (ev) => { text += ev.delta; });
  // llama.cpp's content_part events carry no output_index, which this helper needs: it throws on them even
  // straight from llama-server. The thrown message is printed so that a test compares it with that.
  let r;
  try {
    r = await stream.finalResponse();
  } catch (e) {
    console.log(JSON.stringify({ text, events, types, thrown: String(e.message) }));
    process.exit(0);
  }
  console.log(JSON.stringify({ text, final: r.output_text, events, status: r.status, types, usage: r.usage ?? null,
    id: r.id, error: r.error ?? null, thrown: null }));
} else if (mode === "responses-plain") {
  const r = await client.responses.create({ model, input: "[[tokens:12]]", ...more });
  console.log(JSON.stringify({ text: r.output_text, events: 1, status: r.status, types: [r.object], error: r.error ?? null }));
} else {
  const r = await client.chat.completions.create({ model, messages, ...more });
  console.log(JSON.stringify({ text: r.choices[0].message.content, chunks: 1, finish: r.choices[0].finish_reason }));
}
