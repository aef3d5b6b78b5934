// An agent no one here instrumented: a tool loop on the Messages API with the official
// `@anthropic-ai/sdk` npm package (tests/test_gateway_agents.py). The client finds its endpoint
// and key by itself (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY: `agenttrace run` sets the first).
//
//   node anthropic_agent.mjs MODEL whole|streamed EXIT_CODE QUESTION
//
// prints its own record as JSON, as openai_agent.mjs does, and exits with EXIT_CODE.
import Anthropic from "@anthropic-ai/sdk";

const [model, mode, exitCode, question] = process.argv.slice(2);
const client = new Anthropic({ maxRetries: 0 });
const tools = [
  {
    name: "add",
    description: "add two numbers",
    input_schema: {
      type: "object",
      properties: { a: { type: "number" }, b: { type: "number" } },
      required: ["a", "b"],
    },
  },
];
const messages = [{ role: "user", content: question }];
const record = { answers: [], tool_calls: [], episode: process.env.AGENTTRACE_EPISODE_ID };

for (let turn = 0; turn < 8; turn++) {
  const request = { model, max_tokens: 256, system: "be exact", messages, tools };
  const reply =
    mode === "streamed"
      ? await client.messages.stream(request).finalMessage()
      : await client.messages.create(request);
  const texts = reply.content.filter((block) => block.type === "text");
  record.answers.push(texts.map((block) => block.text).join(""));
  const uses = reply.content.filter((block) => block.type === "tool_use");
  if (uses.length === 0) break;
  messages.push({ role: "assistant", content: reply.content });
  const results = [];
  for (const use of uses) {
    const result = String(use.input.a + use.input.b);
    const args = JSON.stringify(use.input);
    record.tool_calls.push({ id: use.id, name: use.name, arguments: args, result });
    results.push({ type: "tool_result", tool_use_id: use.id, content: result });
  }
  messages.push({ role: "user", content: results });
}

console.log(JSON.stringify(record));
process.exitCode = Number(exitCode);
