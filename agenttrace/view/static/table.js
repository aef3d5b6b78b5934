// agenttrace view: #/ (runs and episodes): counts by status, a return histogram by status,
// and the sortable, filterable, paginated episode table (pages come from the server).
"use strict";

(function (AT) {
  const { h, clear } = AT;
  const PAGE = 50;

  // Rows picked for "Compare" (kept across pages and filter changes): key -> label.
  const picked = new Map();

  const COLUMNS = [
    { key: "status", label: "Status", sort: "status" },
    { key: "return", label: "Return", sort: "return", num: true },
    { key: "length", label: "Length", sort: "length", num: true },
    { key: "task_id", label: "Task", sort: "task_id" },
    { key: "group_id", label: "Group", sort: "group_id" },
    { key: "duration_s", label: "Duration", sort: "duration_s", num: true },
    { key: "error", label: "Error" },
    // (one column per score name goes here)
    { key: "run", label: "Run", sort: "run" },
    { key: "episode_id", label: "Episode", sort: "episode_id" },
  ];

  function page(root, params, app) {
    const state = {
      filters: AT.filters.fromParams(params),
      sort: params.sort || "key",
      order: params.order === "desc" ? "desc" : params.order === "asc" ? "asc" : "",
      offset: Math.max(0, parseInt(params.offset || "0", 10) || 0),
    };
    let info = app.info;
    let sequence = 0;
    let histogram = null;
    let refreshing = null;
    let again = false;

    const filterBox = h("div", { class: "filter-box" });
    const statusCounts = h("div", { class: "status-counts", "data-testid": "status-counts" });
    const histPanel = AT.charts.panel("Return by status", "return-histogram");
    const matching = h("span", { class: "matching", "data-testid": "matching-count" });
    const pickedInfo = h("span", { class: "picked", "data-testid": "picked-count" });
    const compareButton = h(
      "button",
      {
        type: "button",
        "data-testid": "compare-button",
        onclick: () => {
          const [a, b] = [...picked.keys()];
          location.hash = AT.hashFor("/compare/episodes", { a, b });
        },
      },
      "Compare"
    );
    const clearButton = h(
      "button",
      {
        type: "button",
        class: "secondary",
        "data-testid": "clear-picked",
        onclick: () => {
          picked.clear();
          for (const box of tbody.querySelectorAll("input[type=checkbox]")) box.checked = false;
          showPicked();
        },
      },
      "Clear"
    );
    const pager = h("div", { class: "pager" });
    const thead = h("thead");
    const tbody = h("tbody");
    const table = h(
      "table",
      { class: "episodes", "data-testid": "episodes-table", "data-state": "loading" },
      thead,
      tbody
    );
    const errorBox = h("div");
    const runCompare = h("div", { class: "run-compare" });

    root.appendChild(
      h(
        "section",
        { class: "page page-episodes", "data-testid": "page-episodes" },
        filterBox,
        h("div", { class: "overview" }, statusCounts, h("div", { class: "overview-chart" }, histPanel.node)),
        errorBox,
        h(
          "div",
          { class: "table-bar" },
          matching,
          h("span", { class: "spacer" }),
          pickedInfo,
          compareButton,
          clearButton,
          pager
        ),
        h("div", { class: "table-wrap" }, table),
        runCompare
      )
    );

    function buildFilters() {
      clear(filterBox).appendChild(AT.filters.build(info, state.filters, onFilters));
    }

    function onFilters(_filters, how) {
      state.offset = 0;
      if (how && how.rebuild) buildFilters();
      refresh();
    }

    function scoreNames() {
      return info.scores || [];
    }

    function columns() {
      const cols = COLUMNS.slice();
      const at = cols.findIndex((c) => c.key === "run");
      const scores = scoreNames().map((name) => ({
        key: "score:" + name,
        label: name,
        sort: "score:" + name,
        num: true,
        score: name,
      }));
      cols.splice(at, 0, ...scores);
      return cols;
    }

    function buildHead() {
      const row = h("tr", null, h("th", { class: "pick" }, ""));
      for (const col of columns()) {
        const active = state.sort === col.sort;
        const order = active ? state.order || "asc" : "";
        const th = h(
          "th",
          {
            class: (col.num ? "num " : "") + (col.sort ? "sortable" : ""),
            "data-sort": col.sort || null,
            "data-testid": col.sort ? "sort-" + col.sort : null,
            "aria-sort": active ? (order === "asc" ? "ascending" : "descending") : null,
            title: col.sort ? "Sort by " + col.label : null,
            onclick: col.sort
              ? () => {
                  if (state.sort === col.sort) state.order = (state.order || "asc") === "asc" ? "desc" : "asc";
                  else {
                    state.sort = col.sort;
                    state.order = col.num ? "desc" : "asc";
                  }
                  state.offset = 0;
                  buildHead();
                  refresh();
                }
              : null,
          },
          col.label,
          active ? h("span", { class: "sort-mark" }, order === "asc" ? " ▲" : " ▼") : null
        );
        row.appendChild(th);
      }
      clear(thead).appendChild(row);
    }

    function query() {
      return AT.filters.toParams(state.filters);
    }

    function tableParams() {
      return Object.assign(query(), {
        sort: state.sort === "key" ? "" : state.sort,
        order: state.order,
        offset: state.offset || "",
        limit: PAGE,
      });
    }

    function saveHash() {
      const params = tableParams();
      delete params.limit;
      AT.replaceHash("/", params);
    }

    // Loads counts, histogram and the current page. One load at a time; a change during a
    // load runs one more load after it.
    function refresh() {
      table.setAttribute("data-state", "loading");
      saveHash();
      if (refreshing) {
        again = true;
        return refreshing;
      }
      refreshing = load().finally(() => {
        refreshing = null;
        if (again) {
          again = false;
          refresh();
        }
      });
      return refreshing;
    }

    async function load() {
      const mine = ++sequence;
      const params = tableParams();
      try {
        const [summary, rows] = await Promise.all([
          AT.api("summary", query()),
          AT.api("episodes", params),
        ]);
        if (mine !== sequence || !root.isConnected) return;
        clear(errorBox);
        showSummary(summary);
        showRows(rows, params);
      } catch (err) {
        if (mine !== sequence) return;
        clear(errorBox).appendChild(AT.message(String(err.message || err), "error"));
        table.setAttribute("data-state", "error");
      }
    }

    function showSummary(summary) {
      clear(statusCounts);
      const entries = Object.entries(summary.by_status || {}).sort((a, b) => b[1].count - a[1].count);
      statusCounts.appendChild(
        h(
          "div",
          { class: "status-total", "data-testid": "status-total", "data-count": summary.total },
          h("strong", null, AT.fmtInt(summary.total)),
          " matching"
        )
      );
      entries.forEach(([status, stats], index) => {
        statusCounts.appendChild(
          h(
            "div",
            {
              class: "status-count",
              "data-testid": "status-count",
              "data-status": status,
              "data-count": stats.count,
              style: { borderLeftColor: AT.statusColor(status, index) },
            },
            h("div", { class: "status-name" }, status),
            h("div", { class: "status-number" }, AT.fmtInt(stats.count)),
            h(
              "div",
              { class: "muted" },
              `return ${AT.fmtNum(stats.mean_return, 3)} · length ${AT.fmtNum(stats.mean_length, 1)}`
            )
          )
        );
      });
      if (histogram) {
        AT.charts.destroy(histogram);
        histogram = null;
      }
      clear(histPanel.box);
      const hist = summary.histogram || {};
      const counts = hist.counts || {};
      if (!hist.edges || hist.edges.length < 2 || !Object.keys(counts).length) {
        histPanel.box.appendChild(h("div", { class: "muted empty-chart" }, "no returns to show"));
        return;
      }
      const statuses = Object.keys(counts);
      histogram = AT.charts.stackedBars(histPanel.box, hist.edges, counts, (name) => AT.statusColor(name, statuses.indexOf(name)), {
        xLabel: "return",
        height: 170,
      });
    }

    function cell(col, row) {
      if (col.key === "status") return h("td", null, AT.statusBadge(row.status));
      if (col.score) {
        const value = row.scores ? row.scores[col.score] : undefined;
        return h("td", { class: "num", "data-score": col.score }, value === undefined ? "—" : AT.fmtNum(value));
      }
      const value = row[col.key];
      if (col.key === "return") {
        return h("td", { class: "num", "data-testid": "row-return", "data-value": value === null ? "" : String(value), title: value === null ? null : String(value) }, AT.fmtNum(value));
      }
      if (col.key === "duration_s") return h("td", { class: "num" }, AT.fmtSeconds(value));
      if (col.key === "error") {
        return h("td", { class: "error-cell", title: value || null }, value ? h("span", { class: "error-text" }, value) : "");
      }
      if (col.key === "episode_id") return h("td", { class: "mono", title: value }, value);
      if (col.num) return h("td", { class: "num" }, AT.fmtNum(value));
      return h("td", { title: value || null, "data-col": col.key }, value === null || value === undefined ? "—" : value);
    }

    function showRows(body, params) {
      clear(tbody);
      const cols = columns();
      for (const row of body.rows) {
        const checkbox = h("input", {
          type: "checkbox",
          "data-testid": "pick-episode",
          "aria-label": "pick " + row.episode_id,
          checked: picked.has(row.key),
          onclick: (event) => event.stopPropagation(),
          onchange: (event) => {
            if (event.target.checked) picked.set(row.key, row.episode_id);
            else picked.delete(row.key);
            showPicked();
          },
        });
        const tr = h(
          "tr",
          {
            class: "episode-row" + (row.error ? " has-error" : ""),
            "data-testid": "episode-row",
            "data-key": row.key,
            "data-episode-id": row.episode_id,
            "data-status": row.status,
            tabindex: 0,
            onclick: () => (location.hash = "#/episode/" + encodeURIComponent(row.key)),
            onkeydown: (event) => {
              if (event.key === "Enter") location.hash = "#/episode/" + encodeURIComponent(row.key);
            },
          },
          h("td", { class: "pick", onclick: (event) => event.stopPropagation() }, checkbox),
          cols.map((col) => cell(col, row))
        );
        tbody.appendChild(tr);
      }
      if (!body.rows.length) {
        tbody.appendChild(
          h("tr", null, h("td", { colspan: cols.length + 1, class: "empty", "data-testid": "no-episodes" }, "No episodes match."))
        );
      }
      const first = body.total ? body.offset + 1 : 0;
      const last = body.offset + body.rows.length;
      matching.textContent = `${AT.fmtInt(body.total)} matching`;
      matching.setAttribute("data-count", body.total);
      clear(pager).appendChild(
        h(
          "span",
          { class: "pager-inner" },
          h(
            "button",
            {
              type: "button",
              class: "secondary",
              "data-testid": "page-prev",
              disabled: body.offset <= 0,
              onclick: () => {
                state.offset = Math.max(0, state.offset - PAGE);
                refresh();
              },
            },
            "‹ Prev"
          ),
          h("span", { "data-testid": "page-info", class: "page-info" }, `${first}–${last} of ${AT.fmtInt(body.total)}`),
          h(
            "button",
            {
              type: "button",
              class: "secondary",
              "data-testid": "page-next",
              disabled: last >= body.total,
              onclick: () => {
                state.offset += PAGE;
                refresh();
              },
            },
            "Next ›"
          )
        )
      );
      // A page past the end (rows filtered away meanwhile): back to the last page.
      if (!body.rows.length && body.total > 0 && state.offset > 0) {
        state.offset = Math.floor((body.total - 1) / PAGE) * PAGE;
        refresh();
        return;
      }
      table.setAttribute("data-query", AT.queryString(params));
      table.setAttribute("data-total", body.total);
      table.setAttribute("data-state", "ready");
    }

    function showPicked() {
      const n = picked.size;
      pickedInfo.textContent = n ? `${n} picked` : "pick two episodes to compare";
      compareButton.disabled = n !== 2;
      clearButton.hidden = n === 0;
    }

    function showRunCompare() {
      clear(runCompare);
      const runs = info.runs || [];
      if (runs.length < 2) return;
      const select = (testid, chosen) => {
        const node = h("select", { "data-testid": testid });
        for (const run of runs) node.appendChild(h("option", { value: run, selected: run === chosen }, run));
        return node;
      };
      const a = select("compare-run-a", runs[0]);
      const b = select("compare-run-b", runs[1]);
      runCompare.appendChild(
        h(
          "div",
          { class: "run-compare-form" },
          h("strong", null, "Compare runs "),
          a,
          " vs ",
          b,
          h(
            "button",
            {
              type: "button",
              "data-testid": "compare-runs-button",
              onclick: () => (location.hash = AT.hashFor("/compare/runs", { a: a.value, b: b.value })),
            },
            "Compare runs"
          )
        )
      );
    }

    buildFilters();
    buildHead();
    showPicked();
    showRunCompare();
    refresh();

    return {
      // New episodes indexed (server-sent event): counts and this page again.
      onIndexed(newInfo) {
        const hadScores = scoreNames().join("\n");
        const hadRuns = (info.runs || []).join("\n");
        const hadStatuses = (info.statuses || []).join("\n");
        info = newInfo;
        if (scoreNames().join("\n") !== hadScores) buildHead();
        if ((info.runs || []).join("\n") !== hadRuns || (info.statuses || []).join("\n") !== hadStatuses) {
          buildFilters();
          showRunCompare();
        }
        refresh();
      },
      leave() {
        sequence++;
      },
    };
  }

  AT.pages = AT.pages || {};
  AT.pages.episodes = page;
})(window.AT);
