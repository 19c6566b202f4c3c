// The official OpenAI SDK through modelgate: node openai.mjs BASE_URL MODEL stream|plain [EXTRA_JSON]
// EXTRA_JSON: request fields added to the request (e.g. max_tokens for a real server).
// Prints one JSON line: {"text": ..., "chunks": N, "finish": ...}; exits non-zero on any error.
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
} else {
  const r = await client.chat.completions.create({ model, messages, ...more });
  console.log(JSON.stringify({ text: r.choices[0].message.content, chunks: 1, finish: r.choices[0].finish_reason }));
}
