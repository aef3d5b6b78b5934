// agenttrace view: uPlot charts (vendor/uPlot.iife.min.js), sized to their box and
// destroyed when the page changes.
"use strict";

(function (AT) {
  const { h } = AT;
  let live = [];

  // A chart in `box` (its width follows the box). `options` are uPlot's, without width.
  function make(box, options, data) {
    const width = Math.max(240, box.clientWidth || 600);
    const plot = new uPlot(
      Object.assign({ width, height: 220, legend: { live: true } }, options, { width }),
      data,
      box
    );
    const observer = new ResizeObserver(() => {
      const w = Math.max(240, box.clientWidth);
      if (Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height: plot.height });
    });
    observer.observe(box);
    live.push({ plot, observer });
    return plot;
  }

  function destroyAll() {
    for (const { plot, observer } of live) {
      observer.disconnect();
      plot.destroy();
    }
    live = [];
  }

  function destroy(plot) {
    live = live.filter((entry) => {
      if (entry.plot !== plot) return true;
      entry.observer.disconnect();
      plot.destroy();
      return false;
    });
  }

  // A titled box for one chart; `testid` names it for tests.
  function panel(title, testid, note) {
    const box = h("div", { class: "chart-box" });
    const node = h(
      "figure",
      { class: "chart", "data-testid": testid },
      h("figcaption", null, title, note ? h("span", { class: "muted" }, " " + note) : null),
      box
    );
    return { node, box };
  }

  function numberAxis(label, extra) {
    return Object.assign(
      {
        label,
        labelSize: label ? 18 : 0,
        size: 56,
        stroke: "#4a5568",
        grid: { stroke: "#edf2f7" },
        ticks: { stroke: "#e2e8f0" },
        values: (u, splits) => splits.map((v) => (v === null ? "" : AT.fmtNum(v, 3))),
      },
      extra || {}
    );
  }

  // An axis of whole numbers (steps, episode ordinals): ticks on integers only.
  const WHOLE = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 50000, 100000, 1e6, 1e7];
  function wholeAxis(label) {
    return numberAxis(label, { incrs: WHOLE, values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : "")) });
  }

  const bars = () => uPlot.paths.bars({ size: [0.9, 60], align: 0 });

  // Histogram bins (equal width) over values; edges has bins + 1 numbers.
  function histogram(values, bins, lo, hi) {
    const finite = values.filter((v) => Number.isFinite(v));
    if (lo === undefined) lo = Math.min(...finite);
    if (hi === undefined) hi = Math.max(...finite);
    if (!finite.length) return { edges: [], counts: [] };
    if (hi === lo) {
      lo -= 0.5;
      hi += 0.5;
    }
    const edges = [];
    for (let i = 0; i <= bins; i++) edges.push(lo + ((hi - lo) * i) / bins);
    const counts = new Array(bins).fill(0);
    for (const v of finite) {
      let bin = Math.floor(((v - lo) / (hi - lo)) * bins);
      if (bin >= bins) bin = bins - 1;
      if (bin < 0) bin = 0;
      counts[bin]++;
    }
    return { edges, counts };
  }

  function centers(edges) {
    const out = [];
    for (let i = 0; i + 1 < edges.length; i++) out.push((edges[i] + edges[i + 1]) / 2);
    return out;
  }

  // Stacked bars: one series per name, drawn tallest (the running total) first.
  function stackedBars(box, edges, countsByName, colorOf, options) {
    const names = Object.keys(countsByName);
    const x = centers(edges);
    const running = [];
    let total = new Array(x.length).fill(0);
    for (const name of names) {
      total = total.map((t, i) => t + (countsByName[name][i] || 0));
      running.push(total);
    }
    const series = [{ label: options.xLabel || "x", value: (u, v) => (v === null ? "—" : AT.fmtNum(v, 3)) }];
    const data = [x];
    for (let n = names.length - 1; n >= 0; n--) {
      const name = names[n];
      const color = colorOf(name, n);
      series.push({
        label: name,
        stroke: color,
        fill: color + "cc",
        width: 1,
        paths: bars(),
        points: { show: false },
        value: (u, v, si, idx) => (idx === null || idx === undefined ? "—" : String(countsByName[name][idx] || 0)),
      });
      data.push(running[n].map((v) => (v > 0 ? v : null))); // (no sliver for an empty bin)
    }
    return make(
      box,
      {
        height: options.height || 200,
        scales: { x: { time: false }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.05)] } },
        axes: [numberAxis(options.xLabel || ""), numberAxis("episodes", { size: 44 })],
        series,
        cursor: { points: { show: false } },
      },
      data
    );
  }

  AT.charts = { make, destroy, destroyAll, panel, numberAxis, wholeAxis, bars, histogram, centers, stackedBars };
})(window.AT);
