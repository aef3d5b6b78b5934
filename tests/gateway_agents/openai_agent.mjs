// An agent no one here instrumented: a tool loop on Chat Completions with the official `openai`
// npm package (tests/test_gateway_agents.py). The client finds its endpoint and key by itself
// (OPENAI_BASE_URL, OPENAI_API_KEY: `agenttrace run` sets the first). It calls the model,
// runs the `add` tool calls it asks for, sends the results back, and stops at an answer
// without tool calls.
//
//   node openai_agent.mjs MODEL whole|streamed EXIT_CODE QUESTION
//
// prints its own record as JSON ({"answers": [...], "tool_calls": [{id, name, arguments,
// result}], "episode": AGENTTRACE_EPISODE_ID}) and exits with EXIT_CODE.
import OpenAI from "openai";

const [model, mode, exitCode, question] = process.argv.slice(2);
const client = new OpenAI({ maxRetries: 0 });
const tools = [
  {
    type: "function",
    function: {
      name: "add",
      description: "add two numbers",
      parameters: {
        type: "object",
        properties: { a: { type: "number" }, b: { type: "number" } },
        required: ["a", "b"],
      },
    },
  },
];
const messages = [
  { role: "system", content: "be exact" },
  { role: "user", content: question },
];
const record = { answers: [], tool_calls: [], episode: process.env.AGENTTRACE_EPISODE_ID };

for (let turn = 0; turn < 8; turn++) {
  let message;
  if (mode === "streamed") {
    // the SDK's own stream helper: chunks as they come, the whole completion at the end
    const stream = client.chat.completions.stream({ model, messages, tools });
    message = (await stream.finalChatCompletion()).choices[0].message;
  } else {
    message = (await client.chat.completions.create({ model, messages, tools })).choices[0]
      .message;
  }
  record.answers.push(message.content ?? "");
  const calls = message.tool_calls ?? [];
  if (calls.length === 0) break;
  messages.push({ role: "assistant", content: message.content, tool_calls: calls });
  for (const call of calls) {
    const { a, b } = JSON.parse(call.function.arguments);
    const result = String(a + b);
    const { name, arguments: args } = call.function;
    record.tool_calls.push({ id: call.id, name, arguments: args, result });
    messages.push({ role: "tool", tool_call_id: call.id, content: result });
  }
}

console.log(JSON.stringify(record));
process.exitCode = Number(exitCode);
