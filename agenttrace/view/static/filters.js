// agenttrace view: the episode filters shared by the table (#/) and the plots (#/plots).
// Their state lives in the hash's query: run, status, task, group, q, min_return,
// max_return, errors (the names /api/episodes, /api/summary and /api/plots take).
"use strict";

(function (AT) {
  const { h } = AT;
  const LIST_KEYS = ["run", "status", "task"];
  const TEXT_KEYS = ["group", "q", "min_return", "max_return", "errors"];
  const KEYS = [...LIST_KEYS, ...TEXT_KEYS];

  function fromParams(params) {
    const state = {};
    for (const key of LIST_KEYS) state[key] = params[key] ? params[key].split(",").filter(Boolean) : [];
    for (const key of TEXT_KEYS) state[key] = params[key] || "";
    return state;
  }

  // The API's query parameters (empty ones dropped by AT.queryString).
  function toParams(state) {
    const params = {};
    for (const key of KEYS) params[key] = state[key];
    return params;
  }

  function isEmpty(state) {
    return KEYS.every((key) => (Array.isArray(state[key]) ? !state[key].length : !state[key]));
  }

  // Checkboxes for a few choices; `selected` is the state's list, changed in place.
  function checkList(testid, choices, selected, onChange, colorOf) {
    const box = h("div", { class: "check-list", "data-testid": testid, role: "group" });
    for (const choice of choices) {
      const input = h("input", {
        type: "checkbox",
        value: choice,
        "data-value": choice,
        "data-status": testid === "filter-status" ? choice : null,
        checked: selected.includes(choice),
        onchange: () => {
          const at = selected.indexOf(choice);
          if (input.checked && at < 0) selected.push(choice);
          if (!input.checked && at >= 0) selected.splice(at, 1);
          onChange();
        },
      });
      const swatch = colorOf ? h("span", { class: "swatch", style: { background: colorOf(choice) } }) : null;
      box.appendChild(h("label", { class: "check" }, input, swatch, choice));
    }
    return box;
  }

  // The filter bar. onChange(state) after every change (text boxes debounced).
  function build(info, state, onChange) {
    const changed = () => onChange(state);
    const typed = AT.debounce(changed, 350);
    const field = (label, control) => h("label", { class: "field" }, h("span", null, label), control);
    const text = (key, testid, attrs) =>
      h(
        "input",
        Object.assign(
          {
            type: "text",
            "data-testid": testid,
            value: state[key],
            oninput: (event) => {
              state[key] = event.target.value.trim();
              typed();
            },
            onkeydown: (event) => {
              if (event.key === "Enter") {
                state[key] = event.target.value.trim();
                changed();
              }
            },
          },
          attrs || {}
        )
      );
    const number = (key, testid, placeholder) =>
      h("input", {
        type: "number",
        step: "any",
        placeholder,
        "data-testid": testid,
        value: state[key],
        onchange: (event) => {
          state[key] = event.target.value.trim();
          changed();
        },
      });

    const runs = info.runs || [];
    const statuses = [...new Set([...(info.statuses || []), ...state.status])];
    const taskList = h("datalist", { id: "task-list" });
    for (const task of (info.tasks || []).slice(0, 2000)) taskList.appendChild(h("option", { value: task }));

    const taskInput = h("input", {
      type: "text",
      list: "task-list",
      placeholder: "any task",
      "data-testid": "filter-task",
      value: state.task.join(","),
      onchange: (event) => {
        state.task = event.target.value.split(",").map((s) => s.trim()).filter(Boolean);
        changed();
      },
    });
    const errors = h("input", {
      type: "checkbox",
      "data-testid": "filter-errors",
      checked: state.errors === "1",
      onchange: (event) => {
        state.errors = event.target.checked ? "1" : "";
        changed();
      },
    });

    return h(
      "form",
      { class: "filters", "data-testid": "filters", onsubmit: (event) => event.preventDefault() },
      runs.length > 1 ? h("fieldset", null, h("span", { class: "legend" }, "Run"), checkList("filter-run", runs, state.run, changed)) : null,
      h("fieldset", null, h("span", { class: "legend" }, "Status"), checkList("filter-status", statuses, state.status, changed, AT.statusColor)),
      h(
        "fieldset",
        { class: "filter-fields" },
        field("Task", taskInput),
        taskList,
        field("Group", text("group", "filter-group", { placeholder: "group id" })),
        field("Return", h("span", { class: "range" }, number("min_return", "filter-min-return", "min"), " – ", number("max_return", "filter-max-return", "max"))),
        h("label", { class: "check" }, errors, "errors only"),
        field("Search", text("q", "filter-q", { type: "search", placeholder: "episode id, task, error…" })),
        h(
          "button",
          {
            type: "button",
            class: "secondary",
            "data-testid": "filter-reset",
            onclick: () => {
              for (const key of LIST_KEYS) state[key].length = 0;
              for (const key of TEXT_KEYS) state[key] = "";
              onChange(state, { rebuild: true });
            },
          },
          "Reset"
        )
      )
    );
  }

  AT.filters = { fromParams, toParams, isEmpty, build, KEYS };
})(window.AT);
