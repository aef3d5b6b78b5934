// agenttrace view: #/episode/<key>, one episode: its header, a step timeline (reward,
// cumulative return, done flags, step duration), the steps table (each step opens to its
// observation, action and info), the model calls as a transcript (transcript.js), scores.
"use strict";

(function (AT) {
  const { h, clear } = AT;
  const { renderValue, summary } = AT.values;
  const GROUP_ID = "rl.group.id";

  // Cumulative return after each step (null rewards count as 0), in step order.
  function cumulative(steps) {
    let total = 0;
    return steps.map((step) => {
      if (typeof step.reward === "number") total += step.reward;
      return total;
    });
  }

  // Rewards may be tagged ({"$float": "nan"}); as numbers for charts, text for tables.
  function rewardNumber(reward) {
    if (typeof reward === "number") return reward;
    if (reward && typeof reward === "object" && typeof reward.$float === "string") {
      return { nan: NaN, inf: Infinity, "-inf": -Infinity }[reward.$float];
    }
    return null;
  }

  function field(label, value, attrs) {
    return h("div", { class: "field-item" }, h("dt", null, label), h("dd", attrs || null, value));
  }

  function header(data) {
    const t = data.trajectory;
    const attrs = t.attributes || {};
    const group = attrs[GROUP_ID];
    const durationS = t.start_time !== null && t.end_time !== null ? (t.end_time - t.start_time) / 1e9 : null;
    const scores = t.scores || {};
    const items = [
      field("Episode", t.episode_id, { "data-testid": "episode-id", class: "mono" }),
      field("Run", data.run, { "data-testid": "episode-run" }),
      field("Status", AT.statusBadge(t.status), { "data-testid": "episode-status", "data-status": t.status }),
      field("Return", AT.fmtNum(rewardNumber(t.return), 6), {
        "data-testid": "episode-return",
        "data-value": String(rewardNumber(t.return)),
      }),
      field("Length", String(t.length), { "data-testid": "episode-length", "data-value": t.length }),
      field("Task", t.task_id === null ? "—" : t.task_id, { "data-testid": "episode-task" }),
      field("Group", group === undefined || group === null ? "—" : summary(group), { "data-testid": "episode-group" }),
      field("Duration", AT.fmtSeconds(durationS), { "data-testid": "episode-duration" }),
      field("Started", AT.fmtTime(t.start_time)),
      field("Trace", t.trace_id || "—", { class: "mono", "data-testid": "episode-trace-id" }),
    ];
    if (Object.keys(scores).length) {
      items.push(
        field(
          "Scores",
          Object.entries(scores).map(([name, value]) => h("span", { class: "chip" }, `${name} ${AT.fmtNum(value)}`))
        )
      );
    }
    const box = h(
      "section",
      { class: "episode-header card", "data-testid": "episode-header", "data-episode-id": t.episode_id },
      h(
        "div",
        { class: "title-row" },
        h("h1", null, "Episode ", h("span", { class: "mono" }, t.episode_id)),
        data.trace_link
          ? h("a", { class: "button", href: data.trace_link, target: "_blank", rel: "noopener noreferrer", "data-testid": "trace-link" }, "Open trace ↗")
          : null
      ),
      h("dl", { class: "fields" }, items)
    );
    if (t.error) {
      box.appendChild(
        h(
          "div",
          { class: "episode-error", "data-testid": "episode-error" },
          h("div", { class: "error-title" }, h("strong", { "data-testid": "error-type" }, t.error.type || "error"), ": ", h("span", { "data-testid": "error-message" }, t.error.message || "")),
          t.error.stack ? h("pre", { class: "stack", "data-testid": "error-stack" }, t.error.stack) : null
        )
      );
    }
    const notes = [];
    if (t.missing_steps && t.missing_steps.length) notes.push(`missing steps: ${t.missing_steps.join(", ")}`);
    for (const [path, reason] of Object.entries(t.lossy || {})) notes.push(`${path}: ${reason}`);
    if (notes.length) box.appendChild(h("ul", { class: "notes", "data-testid": "episode-notes" }, notes.map((n) => h("li", null, n))));
    box.appendChild(
      h(
        "details",
        { class: "more-fields" },
        h("summary", null, "Attributes, reset info, final observation"),
        h("h4", null, "Attributes"),
        renderValue(attrs),
        h("h4", null, "Reset info"),
        renderValue(t.reset_info),
        h("h4", null, "Final observation"),
        h("div", { "data-testid": "final-observation" }, renderValue(t.final_observation)),
        h("p", { class: "muted" }, "Source: ", data.source || "—")
      )
    );
    return box;
  }

  function timeline(box, steps) {
    const x = steps.map((s) => s.index);
    const rewards = steps.map((s) => rewardNumber(s.reward));
    const cum = cumulative(steps);
    const marks = (flag) => steps.map((s, i) => (s[flag] ? cum[i] : null));
    const errors = steps.map((s, i) => (s.error ? cum[i] : null));
    const durations = steps.map((s) => AT.spanMs(s.start_time, s.end_time));
    const hasDurations = durations.some((d) => d !== null);
    const points = (color, size) => ({ show: true, size, stroke: color, fill: color });
    const series = [
      { label: "step" },
      { label: "reward", stroke: "#3182ce", width: 1.5, scale: "r", points: points("#3182ce", 5), value: (u, v) => AT.fmtNum(v, 4) },
      { label: "return so far", stroke: "#805ad5", width: 2, scale: "r", points: { show: false }, value: (u, v) => AT.fmtNum(v, 4) },
      { label: "terminated", stroke: "#2f855a", scale: "r", paths: () => null, points: points("#2f855a", 11), value: (u, v) => (v === null ? "" : "yes") },
      { label: "truncated", stroke: "#d69e2e", scale: "r", paths: () => null, points: points("#d69e2e", 11), value: (u, v) => (v === null ? "" : "yes") },
      { label: "error", stroke: "#c53030", scale: "r", paths: () => null, points: points("#c53030", 11), value: (u, v) => (v === null ? "" : "yes") },
    ];
    const data = [x, rewards, cum, marks("terminated"), marks("truncated"), errors];
    const axes = [
      AT.charts.wholeAxis("step"),
      AT.charts.numberAxis("reward / return", { scale: "r" }),
    ];
    if (hasDurations) {
      series.push({ label: "step ms", stroke: "#a0aec0", width: 1, dash: [4, 4], scale: "ms", points: { show: false }, value: (u, v) => AT.fmtMs(v) });
      data.push(durations);
      axes.push(AT.charts.numberAxis("step ms", { scale: "ms", side: 1, grid: { show: false } }));
    }
    return AT.charts.make(
      box,
      {
        height: 230,
        scales: { x: { time: false, range: (u, min, max) => [min - 0.5, max + 0.5] }, r: {}, ms: { range: (u, min, max) => [0, Math.max(max * 1.1, 1)] } },
        axes,
        series,
      },
      data
    );
  }

  function stepsTable(steps) {
    const cum = cumulative(steps);
    const tbody = h("tbody");
    const boolCell = (value, name) => h("td", { class: "flag", "data-testid": "step-" + name, "data-value": String(value) }, value ? "✔" : "");
    steps.forEach((step, i) => {
      const reward = rewardNumber(step.reward);
      const ms = AT.spanMs(step.start_time, step.end_time);
      let detail = null;
      const toggle = h("button", { type: "button", class: "toggle", "data-testid": "step-toggle", "aria-expanded": "false", title: "show observation, action, info" }, "▸");
      const row = h(
        "tr",
        {
          class: "step-row" + (step.error ? " has-error" : "") + (step.terminated || step.truncated ? " done" : ""),
          "data-testid": "step-row",
          "data-step": step.index,
          onclick: () => {
            if (detail) {
              detail.remove();
              detail = null;
              toggle.textContent = "▸";
              toggle.setAttribute("aria-expanded", "false");
              return;
            }
            detail = stepDetail(step, 10);
            row.after(detail);
            toggle.textContent = "▾";
            toggle.setAttribute("aria-expanded", "true");
          },
        },
        h("td", null, toggle),
        h("td", { class: "num", "data-testid": "step-index" }, String(step.index)),
        h("td", { class: "num", "data-testid": "step-reward", "data-value": reward === null ? "" : String(reward) }, AT.fmtNum(reward, 6)),
        h("td", { class: "num", "data-testid": "step-cumulative", "data-value": String(cum[i]) }, AT.fmtNum(cum[i], 6)),
        boolCell(step.terminated, "terminated"),
        boolCell(step.truncated, "truncated"),
        h("td", { class: "num", "data-testid": "step-ms" }, AT.fmtMs(ms)),
        h("td", { class: "num" }, String((step.llm_calls || []).length)),
        h("td", { class: "num" }, String((step.tool_calls || []).length)),
        h("td", { class: "clip", title: summary(step.action, 400) }, summary(step.action, 60)),
        h("td", { class: "error-cell" }, step.error ? h("span", { class: "error-text" }, step.error) : "")
      );
      tbody.appendChild(row);
    });
    return h(
      "table",
      { class: "steps", "data-testid": "steps-table" },
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          ["", "#", "Reward", "Return so far", "Terminated", "Truncated", "Duration (ms)", "LLM calls", "Tool calls", "Action", "Error"].map((label, i) =>
            h("th", { class: i >= 1 && i <= 3 ? "num" : i === 6 || i === 7 || i === 8 ? "num" : null }, label)
          )
        )
      ),
      tbody
    );
  }

  function stepDetail(step, colspan) {
    const block = (label, testid, value) => h("div", { class: "detail-block", "data-testid": testid }, h("h4", null, label), renderValue(value));
    return h(
      "tr",
      { class: "step-detail", "data-testid": "step-detail", "data-step": step.index },
      h("td", null, ""),
      h(
        "td",
        { colspan },
        h(
          "div",
          { class: "detail-grid" },
          block("Observation", "step-observation", step.observation),
          block("Action", "step-action", step.action),
          block("Info", "step-info", step.info)
        ),
        h(
          "div",
          { class: "muted detail-meta" },
          `discount ${step.discount === null ? "—" : AT.fmtNum(rewardNumber(step.discount), 6)} · started ${AT.fmtTime(step.start_time)} · ended ${AT.fmtTime(step.end_time)}`
        ),
        step.error ? h("pre", { class: "stack", "data-testid": "step-error" }, step.error) : null
      )
    );
  }

  function scoresTable(scores) {
    const entries = Object.entries(scores || {});
    if (!entries.length) return h("p", { class: "muted", "data-testid": "no-scores" }, "No scores.");
    return h(
      "table",
      { class: "scores", "data-testid": "scores-table" },
      h("thead", null, h("tr", null, h("th", null, "Score"), h("th", { class: "num" }, "Value"))),
      h(
        "tbody",
        null,
        entries.map(([name, value]) =>
          h("tr", { "data-testid": "score-row", "data-score": name }, h("td", null, name), h("td", { class: "num", "data-value": String(value) }, AT.fmtNum(value, 6)))
        )
      )
    );
  }

  function page(root, params, app, key) {
    const section = h("section", { class: "page page-episode", "data-testid": "page-episode", "data-key": key, "data-state": "loading" });
    section.appendChild(h("p", null, h("a", { href: "#/", "data-testid": "back" }, "‹ Episodes")));
    const body = h("div", { class: "stack" }, h("p", { class: "muted" }, "Loading…"));
    section.appendChild(body);
    root.appendChild(section);
    return AT.loadPage(section, body, AT.api("episode/" + encodeURIComponent(key)), (data) => {
      const t = data.trajectory;
      const steps = t.steps || [];
      document.title = `Episode ${t.episode_id} · agenttrace view`;
      body.appendChild(header(data));
      const chart = AT.charts.panel("Steps", "step-chart", "reward, return so far, done flags, step duration");
      body.appendChild(h("section", { class: "card" }, chart.node));
      body.appendChild(
        h(
          "section",
          { class: "card" },
          h("h2", null, `Steps (${steps.length})`),
          steps.length ? h("div", { class: "table-wrap" }, stepsTable(steps)) : h("p", { class: "muted" }, "No steps.")
        )
      );
      body.appendChild(h("section", { class: "card" }, h("h2", null, "Transcript"), AT.transcript.render(steps)));
      body.appendChild(h("section", { class: "card" }, h("h2", null, "Scores"), scoresTable(t.scores)));
      if (steps.length) timeline(chart.box, steps);
      else chart.box.appendChild(h("div", { class: "muted empty-chart" }, "no steps"));
    });
  }

  AT.episode = { cumulative, rewardNumber };
  AT.pages = AT.pages || {};
  AT.pages.episode = page;
})(window.AT);
