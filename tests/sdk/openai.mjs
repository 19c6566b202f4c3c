// The official OpenAI SDK through modelgate: node openai.mjs BASE_URL MODEL stream|plain
// Prints one JSON line: {"text": ..., "chunks": N, "finish": ...}; exits non-zero on any error.
import OpenAI from "openai";

const [baseURL, model, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
const messages = [{ role: "user", content: "[[tokens:12]]" }];

if (mode === "stream") {
  const stream = await client.chat.completions.create({ model, messages, stream: true });
  let text = "", chunks = 0, finish = null;
  for await (const chunk of stream) {
    chunks++;
    const c = chunk.choices[0];
    if (c?.delta?.content) text += c.delta.content;
    if (c?.finish_reason) finish = c.finish_reason;
  }
  console.log(JSON.stringify({ text, chunks, finish }));
} else {
  const r = await client.chat.completions.create({ model, messages });
  console.log(JSON.stringify({ text: r.choices[0].message.content, chunks: 1, finish: r.choices[0].finish_reason }));
}
