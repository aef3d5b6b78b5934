// agenttrace view: an episode's model calls as a transcript. For each step: each LLM call's
// input messages (a prefix repeated from the previous call folded away), its output
// messages and figures (model, finish reasons, tokens, latency), then the step's tool calls.
"use strict";

(function (AT) {
  const { h } = AT;
  const { renderValue } = AT.values;

  // A message list as given (null: not captured); a lone message or plain text made one.
  function messageList(value, defaultRole) {
    if (value === null || value === undefined) return null;
    const list = Array.isArray(value) ? value : [value];
    return list.map((m) => (m && typeof m === "object" && !Array.isArray(m) ? m : { role: defaultRole, content: m }));
  }

  function same(a, b) {
    return JSON.stringify(a) === JSON.stringify(b);
  }

  function content(value) {
    if (value === null || value === undefined) return null;
    if (typeof value === "string") return h("div", { class: "message-text", "data-testid": "message-text" }, value);
    if (Array.isArray(value)) {
      return h(
        "div",
        { class: "message-parts" },
        value.map((part) => {
          if (typeof part === "string") return h("div", { class: "message-text", "data-testid": "message-text" }, part);
          if (part && part.type === "text" && typeof part.text === "string") {
            return h("div", { class: "message-text", "data-testid": "message-text" }, part.text);
          }
          return h("div", { class: "message-part", "data-testid": "message-part", "data-type": part && part.type }, renderValue(part));
        })
      );
    }
    return h("div", { class: "message-part", "data-testid": "message-part" }, renderValue(value));
  }

  function argumentsValue(text) {
    if (typeof text !== "string") return renderValue(text);
    try {
      const parsed = JSON.parse(text);
      if (parsed && typeof parsed === "object") return h("pre", { class: "json" }, JSON.stringify(parsed, null, 2));
    } catch (err) {
      // not JSON: shown as it is
    }
    return h("pre", { class: "json" }, text);
  }

  function requestedCall(call) {
    const fn = (call && call.function) || {};
    const name = fn.name || (call && call.name) || "?";
    const args = fn.arguments !== undefined ? fn.arguments : call && call.arguments;
    return h(
      "div",
      { class: "requested-call", "data-testid": "message-tool-call", "data-name": name, "data-call-id": (call && call.id) || null },
      h("div", { class: "requested-head" }, "→ ", h("strong", null, name), call && call.id ? h("span", { class: "mono muted" }, " " + call.id) : null),
      args === undefined ? null : argumentsValue(args)
    );
  }

  function message(m, part, index) {
    const role = typeof m.role === "string" ? m.role : "unknown";
    const known = ["system", "user", "assistant", "tool", "developer"].includes(role) ? role : "other";
    const head = h(
      "div",
      { class: "message-head" },
      h("span", { class: "role" }, role),
      m.name ? h("span", { class: "muted" }, " " + m.name) : null,
      m.tool_call_id ? h("span", { class: "mono muted", "data-testid": "tool-call-id" }, " ↩ " + m.tool_call_id) : null
    );
    const extra = Object.keys(m).filter((k) => !["role", "content", "name", "tool_call_id", "tool_calls", "reasoning_content"].includes(k));
    return h(
      "div",
      {
        class: `message role-${known}`,
        "data-testid": "message",
        "data-role": role,
        "data-part": part,
        "data-index": index,
        "data-tool-call-id": m.tool_call_id || null,
      },
      head,
      m.reasoning_content ? h("details", { class: "reasoning" }, h("summary", null, "reasoning"), h("div", { class: "message-text" }, String(m.reasoning_content))) : null,
      content(m.content),
      Array.isArray(m.tool_calls) && m.tool_calls.length ? h("div", { class: "requested-calls" }, m.tool_calls.map(requestedCall)) : null,
      extra.length ? h("details", { class: "message-extra" }, h("summary", null, extra.join(", ")), renderValue(Object.fromEntries(extra.map((k) => [k, m[k]])))) : null
    );
  }

  function llmCall(call, stepIndex, number, previous) {
    const input = messageList(call.input_messages, "user");
    const output = messageList(call.output_messages, "assistant");
    const ms = AT.spanMs(call.start_time, call.end_time);
    const meta = [
      h("strong", { "data-testid": "llm-model" }, call.model || call.name),
      call.provider ? h("span", { class: "muted" }, " · " + call.provider) : null,
      h("span", { "data-testid": "llm-finish" }, " · finish: " + (call.finish_reasons ? call.finish_reasons.join(", ") : "—")),
      h("span", { "data-testid": "llm-tokens", "data-input": call.input_tokens, "data-output": call.output_tokens }, ` · tokens in ${call.input_tokens ?? "—"} / out ${call.output_tokens ?? "—"}`),
      h("span", { "data-testid": "llm-latency", "data-ms": ms === null ? null : String(ms) }, ` · ${AT.fmtMs(ms)} ms`),
    ];
    const box = h(
      "div",
      { class: "llm-call" + (call.error ? " has-error" : ""), "data-testid": "llm-call", "data-step": stepIndex, "data-call": number },
      h("div", { class: "call-head" }, meta)
    );
    if (call.error) box.appendChild(h("div", { class: "error-text", "data-testid": "llm-error" }, call.error));
    const inputs = h("div", { class: "messages", "data-part": "input" });
    if (input === null) inputs.appendChild(h("p", { class: "muted" }, "input messages not captured"));
    else {
      // The part of this call's input that repeats the previous call's conversation.
      let repeated = 0;
      if (previous) {
        while (repeated < input.length && repeated < previous.length && same(input[repeated], previous[repeated])) repeated++;
      }
      if (repeated >= 2) {
        inputs.appendChild(
          h(
            "details",
            { class: "repeated" },
            h("summary", null, `${repeated} earlier messages, as in the previous call`),
            input.slice(0, repeated).map((m, i) => message(m, "input", i))
          )
        );
      } else repeated = 0;
      input.slice(repeated).forEach((m, i) => inputs.appendChild(message(m, "input", repeated + i)));
    }
    box.appendChild(inputs);
    const outputs = h("div", { class: "messages", "data-part": "output" });
    if (output === null) outputs.appendChild(h("p", { class: "muted" }, "output messages not captured"));
    else output.forEach((m, i) => outputs.appendChild(message(m, "output", i)));
    box.appendChild(outputs);
    const tools = (call.attributes || {})["gen_ai.tool.definitions"];
    if (Array.isArray(tools) && tools.length) {
      box.appendChild(h("details", { class: "tools-offered" }, h("summary", null, `${tools.length} tools offered`), renderValue(tools)));
    }
    return { node: box, conversation: (input || []).concat(output || []) };
  }

  function toolCall(call, stepIndex, number) {
    const ms = AT.spanMs(call.start_time, call.end_time);
    return h(
      "div",
      {
        class: "tool-call" + (call.error ? " has-error" : ""),
        "data-testid": "tool-call",
        "data-step": stepIndex,
        "data-call": number,
        "data-name": call.name,
        "data-call-id": call.call_id || null,
      },
      h(
        "div",
        { class: "call-head" },
        "tool ",
        h("strong", { "data-testid": "tool-name" }, call.name),
        call.call_id ? h("span", { class: "mono muted", "data-testid": "tool-call-id" }, " " + call.call_id) : null,
        h("span", { class: "muted" }, ` · ${AT.fmtMs(ms)} ms`)
      ),
      h("div", { class: "tool-io" }, h("h5", null, "arguments"), h("div", { "data-testid": "tool-arguments" }, renderValue(call.arguments))),
      h("div", { class: "tool-io" }, h("h5", null, "result"), h("div", { "data-testid": "tool-result" }, renderValue(call.result))),
      call.error ? h("div", { class: "error-text", "data-testid": "tool-error" }, call.error) : null
    );
  }

  function render(steps) {
    const box = h("div", { class: "transcript", "data-testid": "transcript" });
    let previous = null;
    let any = false;
    for (const step of steps) {
      const calls = step.llm_calls || [];
      const tools = step.tool_calls || [];
      if (!calls.length && !tools.length) continue;
      any = true;
      const part = h(
        "div",
        { class: "transcript-step", "data-testid": "transcript-step", "data-step": step.index },
        h("h3", null, `Step ${step.index}`, h("span", { class: "muted" }, ` · reward ${AT.fmtNum(AT.episode.rewardNumber(step.reward), 6)}`))
      );
      calls.forEach((call, number) => {
        const shown = llmCall(call, step.index, number, previous);
        previous = shown.conversation;
        part.appendChild(shown.node);
      });
      tools.forEach((call, number) => part.appendChild(toolCall(call, step.index, number)));
      box.appendChild(part);
    }
    if (!any) box.appendChild(h("p", { class: "muted", "data-testid": "no-calls" }, "No model or tool calls in this episode."));
    return box;
  }

  AT.transcript = { render, messageList };
})(window.AT);
