// agenttrace view: #/compare/runs?a=RUN&b=RUN (return distributions overlaid, success rate
// per task) and #/compare/episodes?a=KEY&b=KEY (two episodes side by side, step by step,
// the first step where they differ marked).
"use strict";

(function (AT) {
  const { h, clear } = AT;
  const { renderValue, summary } = AT.values;
  const COLORS = { a: "#3182ce", b: "#dd6b20" };

  function mean(values) {
    const v = values.filter(Number.isFinite);
    return v.length ? v.reduce((s, x) => s + x, 0) / v.length : null;
  }

  function median(values) {
    const v = values.filter(Number.isFinite).sort((x, y) => x - y);
    if (!v.length) return null;
    const mid = Math.floor(v.length / 2);
    return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  }

  // ---- runs --------------------------------------------------------------------------------

  function runsPage(root, params, app) {
    const runs = app.info.runs || [];
    const section = h("section", { class: "page page-compare-runs", "data-testid": "page-compare-runs", "data-state": "loading" });
    root.appendChild(section);
    const pick = (testid, chosen) => {
      const node = h("select", { "data-testid": testid });
      for (const run of runs) node.appendChild(h("option", { value: run, selected: run === chosen }, run));
      return node;
    };
    const a = pick("compare-run-a", params.a || runs[0]);
    const b = pick("compare-run-b", params.b || runs[1] || runs[0]);
    const go = () => (location.hash = AT.hashFor("/compare/runs", { a: a.value, b: b.value }));
    section.appendChild(
      h("div", { class: "card run-compare-form" }, h("strong", null, "Compare runs "), a, " vs ", b, h("button", { type: "button", "data-testid": "compare-runs-button", onclick: go }, "Compare"))
    );
    const body = h("div", { class: "stack" });
    section.appendChild(body);
    if (!params.a || !params.b) {
      body.appendChild(h("p", { class: "muted" }, runs.length < 2 ? "Only one run is loaded: open the viewer on a runs folder or several run folders to compare runs." : "Pick two runs."));
      section.setAttribute("data-state", "ready");
      return null;
    }
    return AT.loadPage(section, body, AT.api("compare/runs", { a: params.a, b: params.b }), (data) =>
      showRuns(body, data)
    );
  }

  function showRuns(body, data) {
    const sides = [
      ["a", data.a],
      ["b", data.b],
    ];
    const stats = h(
      "table",
      { class: "run-stats", "data-testid": "run-stats" },
      h("thead", null, h("tr", null, ["", "Run", "Episodes", "Mean return", "Median return"].map((t, i) => h("th", { class: i >= 2 ? "num" : null }, t)))),
      h(
        "tbody",
        null,
        sides.map(([side, s]) =>
          h(
            "tr",
            { "data-testid": "run-stat", "data-side": side, "data-run": s.run },
            h("td", null, h("span", { class: "swatch", style: { background: COLORS[side] } }), side.toUpperCase()),
            h("td", { class: "mono" }, s.run),
            h("td", { class: "num" }, String(s.episodes)),
            h("td", { class: "num" }, AT.fmtNum(mean(s.returns), 4)),
            h("td", { class: "num" }, AT.fmtNum(median(s.returns), 4))
          )
        )
      )
    );
    const chart = AT.charts.panel("Return distributions", "compare-returns-chart", "share of each run's episodes per return bin");
    body.appendChild(h("section", { class: "card" }, stats, chart.node));
    const all = data.a.returns.concat(data.b.returns).filter(Number.isFinite);
    if (all.length) {
      const lo = Math.min(...all);
      const hi = Math.max(...all);
      const bins = Math.max(5, Math.min(40, Math.ceil(Math.sqrt(all.length))));
      const ha = AT.charts.histogram(data.a.returns, bins, lo, hi);
      const hb = AT.charts.histogram(data.b.returns, bins, lo, hi);
      const share = (counts, n) => counts.map((c) => (n ? c / n : 0));
      const x = AT.charts.centers(ha.edges);
      const barsA = uPlot.paths.bars({ size: [0.45, Infinity], align: -1 });
      const barsB = uPlot.paths.bars({ size: [0.45, Infinity], align: 1 });
      AT.charts.make(
        chart.box,
        {
          height: 240,
          scales: { x: { time: false }, y: { range: (u, min, max) => [0, Math.max(max * 1.1, 0.05)] } },
          axes: [AT.charts.numberAxis("return"), AT.charts.numberAxis("share of episodes")],
          series: [
            { label: "return" },
            { label: `A ${data.a.run}`, stroke: COLORS.a, fill: COLORS.a + "aa", width: 1, paths: barsA, points: { show: false }, value: (u, v) => (v === null ? "—" : (v * 100).toFixed(1) + "%") },
            { label: `B ${data.b.run}`, stroke: COLORS.b, fill: COLORS.b + "aa", width: 1, paths: barsB, points: { show: false }, value: (u, v) => (v === null ? "—" : (v * 100).toFixed(1) + "%") },
          ],
        },
        [x, share(ha.counts, data.a.returns.length), share(hb.counts, data.b.returns.length)]
      );
    } else chart.box.appendChild(h("div", { class: "muted empty-chart" }, "no returns"));

    const tasks = [...new Set([...Object.keys(data.a.by_task || {}), ...Object.keys(data.b.by_task || {})])].sort();
    const rate = (t) => (t ? `${(t.rate * 100).toFixed(1)}% (${t.success}/${t.episodes})` : "—");
    const rows = tasks.map((task) => {
      const ta = (data.a.by_task || {})[task];
      const tb = (data.b.by_task || {})[task];
      const diff = ta && tb ? tb.rate - ta.rate : null;
      return h(
        "tr",
        { "data-testid": "task-rate-row", "data-task": task },
        h("td", null, task),
        h("td", { class: "num", "data-side": "a", "data-rate": ta ? ta.rate : null }, rate(ta)),
        h("td", { class: "num", "data-side": "b", "data-rate": tb ? tb.rate : null }, rate(tb)),
        h("td", { class: "num " + (diff > 0 ? "better" : diff < 0 ? "worse" : "") }, diff === null ? "—" : `${diff > 0 ? "+" : ""}${(diff * 100).toFixed(1)} pts`)
      );
    });
    body.appendChild(
      h(
        "section",
        { class: "card" },
        h("h2", null, "Success rate by task"),
        h("p", { class: "muted" }, 'Success: a "success" score above 0 when the run has one, else status completed.'),
        h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "task-rates", "data-testid": "task-rates" },
            h("thead", null, h("tr", null, h("th", null, "Task"), h("th", { class: "num" }, `A ${data.a.run}`), h("th", { class: "num" }, `B ${data.b.run}`), h("th", { class: "num" }, "B − A"))),
            h("tbody", null, rows.length ? rows : h("tr", null, h("td", { colspan: 4, class: "empty" }, "No tasks.")))
          )
        )
      )
    );
  }

  // ---- episodes ----------------------------------------------------------------------------

  function sideHeader(side, data) {
    const t = data.trajectory;
    return h(
      "div",
      { class: "compare-side card", "data-testid": "compare-side", "data-side": side, "data-key": data.key },
      h("h3", null, h("span", { class: "swatch", style: { background: COLORS[side] } }), `${side.toUpperCase()} `, h("a", { href: "#/episode/" + encodeURIComponent(data.key), class: "mono" }, t.episode_id)),
      h(
        "div",
        { class: "muted" },
        AT.statusBadge(t.status),
        ` return ${AT.fmtNum(AT.episode.rewardNumber(t.return), 6)} · length ${t.length} · task ${t.task_id ?? "—"} · run ${data.run}`
      )
    );
  }

  function stepCell(step, marks) {
    if (!step) return h("td", { class: "missing", colspan: 3 }, "no step");
    const reward = AT.episode.rewardNumber(step.reward);
    const cls = (name) => (marks.includes(name) ? "differs" : null);
    return [
      h("td", { class: "num " + (cls("reward") || ""), "data-testid": "compare-reward", "data-value": reward === null ? "" : String(reward) }, AT.fmtNum(reward, 6), step.terminated ? h("span", { class: "done-mark" }, "terminated") : null, step.truncated ? h("span", { class: "done-mark" }, "truncated") : null),
      h("td", { class: "cmp-value " + (cls("action") || "") }, detailsOf(step.action)),
      h("td", { class: "cmp-value " + (cls("observation") || "") }, detailsOf(step.observation)),
    ];
  }

  // A short line that opens to the whole value.
  function detailsOf(value) {
    return h("details", null, h("summary", { title: summary(value, 400) }, summary(value, 48)), renderValue(value));
  }

  function episodesPage(root, params) {
    const section = h("section", { class: "page page-compare-episodes", "data-testid": "page-compare-episodes", "data-state": "loading" });
    root.appendChild(section);
    section.appendChild(h("p", null, h("a", { href: "#/", "data-testid": "back" }, "‹ Episodes")));
    const body = h("div", { class: "stack" }, h("p", { class: "muted" }, "Loading…"));
    section.appendChild(body);
    if (!params.a || !params.b) {
      clear(body).appendChild(AT.message("Pick two episodes in the table (the checkboxes), then Compare.", "info"));
      section.setAttribute("data-state", "error");
      return null;
    }
    return AT.loadPage(section, body, AT.api("compare/episodes", { a: params.a, b: params.b }), (data) =>
      showEpisodes(body, data)
    );
  }

  function showEpisodes(body, data) {
    const stepsA = data.a.trajectory.steps || [];
    const stepsB = data.b.trajectory.steps || [];
    // first_difference counts steps in order; rows are by step index (the same unless the
    // episodes have missing steps).
    const at = data.first_difference;
    const firstStep = at === null || at === undefined ? null : stepsA[at] || stepsB[at];
    const first = at === null || at === undefined ? null : firstStep ? firstStep.index : at;
    const differs = data.differs_in || [];
    body.appendChild(h("div", { class: "compare-sides" }, sideHeader("a", data.a), sideHeader("b", data.b)));
    if (data.same_task === false) {
      body.appendChild(AT.message("These episodes are of different tasks: their steps may not be comparable.", "warning"));
    }
    body.appendChild(
      h(
        "p",
        { class: "first-difference-line " + (first === null ? "same" : "differs"), "data-testid": "first-difference", "data-step": first === null ? null : String(first) },
        first === null ? "no difference" : `first difference at step ${first}`,
        first !== null && differs.length ? h("span", { class: "muted" }, ` (${differs.join(", ")})`) : null
      )
    );
    const byIndex = (steps) => new Map(steps.map((s) => [s.index, s]));
    const mapA = byIndex(stepsA);
    const mapB = byIndex(stepsB);
    const indices = [...new Set([...mapA.keys(), ...mapB.keys()])].sort((x, y) => x - y);
    const head = h(
      "tr",
      null,
      h("th", { class: "num" }, "Step"),
      h("th", { class: "num side-a" }, "A reward"),
      h("th", { class: "side-a" }, "A action"),
      h("th", { class: "side-a" }, "A observation"),
      h("th", { class: "num side-b" }, "B reward"),
      h("th", { class: "side-b" }, "B action"),
      h("th", { class: "side-b" }, "B observation")
    );
    const rows = indices.map((index) => {
      const isFirst = first !== null && index === first;
      const marks = isFirst ? differs : [];
      return h(
        "tr",
        {
          class: "compare-row" + (isFirst ? " first-difference" : "") + (first !== null && index > first ? " after-difference" : ""),
          "data-testid": "compare-row",
          "data-step": index,
        },
        h("td", { class: "num" }, String(index), isFirst ? h("span", { class: "diff-mark", title: "first difference" }, " ◆") : null),
        stepCell(mapA.get(index), marks),
        stepCell(mapB.get(index), marks)
      );
    });
    body.appendChild(
      h(
        "section",
        { class: "card" },
        h("div", { class: "table-wrap" }, h("table", { class: "compare", "data-testid": "compare-table" }, h("thead", null, head), h("tbody", null, rows)))
      )
    );
  }

  AT.pages = AT.pages || {};
  AT.pages.compareRuns = runsPage;
  AT.pages.compareEpisodes = episodesPage;
})(window.AT);
