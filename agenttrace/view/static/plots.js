// agenttrace view: #/plots, figures over the episodes that pass the filters (the same
// filters as the table, kept in the hash): return (raw, rolling mean, p10/p50/p90 band),
// length, step latency, LLM latency, tokens, and per-group mean and spread.
"use strict";

(function (AT) {
  const { h, clear } = AT;
  const C = AT.charts;

  // Rolling mean over the last `window` non-null values.
  function rolling(values, window) {
    const out = [];
    const seen = [];
    let sum = 0;
    for (const v of values) {
      if (typeof v === "number" && Number.isFinite(v)) {
        seen.push(v);
        sum += v;
        if (seen.length > window) sum -= seen.shift();
      }
      out.push(seen.length ? sum / seen.length : null);
    }
    return out;
  }

  const dots = (color) => ({ show: true, size: 4, stroke: color, fill: color + "99" });
  const fmt = (digits) => (u, v) => (v === null || v === undefined ? "—" : AT.fmtNum(v, digits));

  function series(label, color, extra) {
    return Object.assign({ label, stroke: color, width: 1.5, points: { show: false }, value: fmt(4) }, extra || {});
  }

  function scatter(label, color) {
    return series(label, color, { paths: () => null, points: dots(color) });
  }

  function xAxis() {
    return C.wholeAxis("episode");
  }

  function plotOver(panel, x, list, yLabel, options) {
    list = list.filter(Boolean);
    const has = list.some((s) => s.values.some((v) => v !== null && v !== undefined));
    if (!has) {
      panel.box.appendChild(h("div", { class: "muted empty-chart" }, "nothing recorded"));
      return null;
    }
    return C.make(
      panel.box,
      Object.assign(
        {
          height: 220,
          scales: { x: { time: false } },
          axes: [xAxis(), C.numberAxis(yLabel)],
          series: [{ label: "episode" }, ...list.map((s) => s.series)],
        },
        options || {}
      ),
      [x, ...list.map((s) => s.values)]
    );
  }

  function groupTable(groups) {
    if (!groups || !groups.length) return h("p", { class: "muted", "data-testid": "no-groups" }, "No groups (episodes with rl.group.id) among these episodes.");
    let lo = Infinity;
    let hi = -Infinity;
    for (const g of groups) {
      lo = Math.min(lo, g.min, g.mean - (g.std || 0));
      hi = Math.max(hi, g.max, g.mean + (g.std || 0));
    }
    if (!(hi > lo)) {
      lo -= 1;
      hi += 1;
    }
    const pos = (v) => `${(((v - lo) / (hi - lo)) * 100).toFixed(2)}%`;
    const zero = lo < 0 && hi > 0 ? 0 : lo;
    const rows = groups.map((g) => {
      const bar = h(
        "div",
        { class: "spread" },
        h("div", { class: "spread-range", style: { left: pos(g.min), width: `calc(${pos(g.max)} - ${pos(g.min)})` }, title: `min ${g.min} · max ${g.max}` }),
        h("div", {
          class: "spread-bar",
          style: { left: pos(Math.min(zero, g.mean)), width: `calc(${pos(Math.max(zero, g.mean))} - ${pos(Math.min(zero, g.mean))})` },
        }),
        h("div", { class: "spread-whisker", style: { left: pos(g.mean - g.std), width: `calc(${pos(g.mean + g.std)} - ${pos(g.mean - g.std)})` }, title: `mean ± std` }),
        h("div", { class: "spread-mean", style: { left: pos(g.mean) } })
      );
      return h(
        "tr",
        { "data-testid": "group-row", "data-group": g.group_id },
        h("td", { class: "mono" }, g.group_id),
        h("td", { class: "num" }, String(g.count)),
        h("td", { class: "num", "data-value": String(g.mean) }, AT.fmtNum(g.mean, 4)),
        h("td", { class: "num" }, AT.fmtNum(g.std, 4)),
        h("td", { class: "num" }, AT.fmtNum(g.min, 4)),
        h("td", { class: "num" }, AT.fmtNum(g.max, 4)),
        h("td", { class: "spread-cell" }, bar)
      );
    });
    return h(
      "table",
      { class: "groups", "data-testid": "groups-table" },
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          h("th", null, "Group"),
          h("th", { class: "num" }, "Episodes"),
          h("th", { class: "num" }, "Mean return"),
          h("th", { class: "num" }, "Std"),
          h("th", { class: "num" }, "Min"),
          h("th", { class: "num" }, "Max"),
          h("th", null, `mean (bar) ± std (whisker), min–max (band): ${AT.fmtNum(lo, 3)} … ${AT.fmtNum(hi, 3)}`)
        )
      ),
      h("tbody", null, rows)
    );
  }

  function page(root, params, app) {
    const filters = AT.filters.fromParams(params);
    let info = app.info;
    let sequence = 0;
    let loading = null;
    let again = false;
    const filterBox = h("div", { class: "filter-box" });
    const status = h("p", { class: "muted", "data-testid": "plots-status" });
    const grid = h("div", { class: "plot-grid" });
    const groups = h("div");
    const section = h(
      "section",
      { class: "page page-plots", "data-testid": "page-plots", "data-state": "loading" },
      filterBox,
      status,
      grid,
      h("section", { class: "card" }, h("h2", null, "Return by group"), groups)
    );
    root.appendChild(section);

    function buildFilters() {
      clear(filterBox).appendChild(
        AT.filters.build(info, filters, (_f, how) => {
          if (how && how.rebuild) buildFilters();
          refresh();
        })
      );
    }

    function refresh() {
      section.setAttribute("data-state", "loading");
      AT.replaceHash("/plots", AT.filters.toParams(filters));
      if (loading) {
        again = true;
        return;
      }
      loading = load().finally(() => {
        loading = null;
        if (again) {
          again = false;
          refresh();
        }
      });
    }

    async function load() {
      const mine = ++sequence;
      let data;
      try {
        data = await AT.api("plots", AT.filters.toParams(filters));
      } catch (err) {
        if (mine !== sequence) return;
        clear(status).appendChild(AT.message(String(err.message || err), "error"));
        section.setAttribute("data-state", "error");
        return;
      }
      if (mine !== sequence || !section.isConnected) return;
      draw(data);
      section.setAttribute("data-state", "ready");
      section.setAttribute("data-points", data.x.length);
    }

    function draw(d) {
      C.destroyAll();
      clear(grid);
      clear(groups);
      const n = d.x.length;
      // Downsampled: each point is already the mean of `window` consecutive episodes.
      const last = n ? d.x[n - 1] : 0;
      status.textContent = !n
        ? "No episodes match."
        : d.downsampled
          ? `${AT.fmtInt(last)} episodes, ${AT.fmtInt(n)} points: each the mean of ${d.window} consecutive episodes (band: their p10–p90)`
          : `${AT.fmtInt(n)} episodes · rolling window ${d.window}`;
      if (!n) return;
      const w = d.window || 20;
      const panels = {};
      for (const [id, title] of [
        ["plot-return", "Return over episodes"],
        ["plot-length", "Length"],
        ["plot-step-ms", "Step latency (ms, mean per episode)"],
        ["plot-llm-ms", "LLM call latency (ms, mean per episode)"],
        ["plot-tokens", "Tokens per episode"],
      ]) {
        panels[id] = C.panel(title, id);
        grid.appendChild(h("div", { class: "card" }, panels[id].node));
      }
      const band = "#805ad5";
      // Downsampled, each point is a bucket's mean already: drawn as a line, with no rolling
      // mean over it. Otherwise one dot per episode and its rolling mean.
      const points = (label, color) => (d.downsampled ? series(label, color, { width: 1 }) : scatter(label, color));
      const meanOf = (values) =>
        d.downsampled ? null : { series: series(`mean (${w})`, "#dd6b20", { width: 2 }), values: rolling(values, w) };
      // Token counts of episodes without model calls are 0: nothing recorded when all are.
      const recorded = (values) => (values.some((v) => v) ? values : values.map(() => null));
      plotOver(
        panels["plot-return"],
        d.x,
        [
          { series: series("p90", band + "66", { width: 1 }), values: d.return_p90 },
          { series: series("p10", band + "66", { width: 1 }), values: d.return_p10 },
          { series: series("p50", band, { width: 1, dash: [5, 4] }), values: d.return_p50 },
          d.downsampled ? null : { series: series(`mean (${w})`, "#dd6b20", { width: 2 }), values: d.return_mean },
          { series: points(d.downsampled ? "mean return" : "return", "#3182ce"), values: d.return }, // on top
        ],
        "return",
        { bands: [{ series: [1, 2], fill: band + "22" }] }
      );
      plotOver(panels["plot-length"], d.x, [{ series: points("length", "#319795"), values: d.length }, meanOf(d.length)], "steps");
      plotOver(panels["plot-step-ms"], d.x, [{ series: points("step ms", "#4a5568"), values: d.step_ms }, meanOf(d.step_ms)], "ms");
      plotOver(panels["plot-llm-ms"], d.x, [{ series: points("LLM ms", "#d53f8c"), values: d.llm_ms }, meanOf(d.llm_ms)], "ms");
      plotOver(
        panels["plot-tokens"],
        d.x,
        [
          { series: points("input", "#3182ce"), values: recorded(d.input_tokens) },
          { series: points("output", "#2f855a"), values: recorded(d.output_tokens) },
        ],
        "tokens"
      );
      groups.appendChild(groupTable(d.groups));
    }

    buildFilters();
    refresh();
    return {
      onIndexed(newInfo) {
        info = newInfo;
        refresh();
      },
      leave() {
        sequence++;
      },
    };
  }

  AT.plots = { rolling };
  AT.pages = AT.pages || {};
  AT.pages.plots = page;
})(window.AT);
