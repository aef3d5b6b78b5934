// agenttrace view: the page's shell. Hash routes, the header (episode counter, live
// state) and the server-sent events that keep the open page current.
//
//   #/                      runs and episodes (table.js)
//   #/episode/<key>         one episode (episode.js, transcript.js)
//   #/plots?<filters>       plots over episodes (plots.js)
//   #/compare/runs?a=&b=    two runs (compare.js)
//   #/compare/episodes?a=&b=  two episodes step by step (compare.js)
"use strict";

(function (AT) {
  const { h, clear } = AT;
  const root = document.getElementById("app");
  const counter = document.querySelector("[data-testid=episode-count]");
  const indexing = document.querySelector("[data-testid=indexing]");
  const liveState = document.querySelector("[data-testid=live-status]");
  const sources = document.querySelector("[data-testid=sources]");
  const problems = document.querySelector("[data-testid=problems]");

  const app = { info: null };
  let current = null; // the page shown: {onIndexed?, leave?}
  let renderCount = 0;

  function routeOf(path) {
    const pages = AT.pages;
    if (path === "/" || path === "") return { page: pages.episodes, title: "Episodes", nav: "/" };
    const episode = /^\/episode\/(.+)$/.exec(path);
    if (episode) return { page: pages.episode, arg: decodeURIComponent(episode[1]), title: "Episode", nav: "/" };
    if (path === "/plots") return { page: pages.plots, title: "Plots", nav: "/plots" };
    if (path === "/compare/runs") return { page: pages.compareRuns, title: "Compare runs", nav: "/compare/runs" };
    if (path === "/compare/episodes") return { page: pages.compareEpisodes, title: "Compare episodes", nav: "/" };
    return null;
  }

  function render() {
    if (current && current.leave) current.leave();
    current = null;
    AT.charts.destroyAll();
    clear(root);
    renderCount++;
    const { path, params } = AT.parseHash(location.hash);
    const route = routeOf(path);
    for (const link of document.querySelectorAll("nav a")) {
      link.classList.toggle("active", !!route && link.getAttribute("data-route") === route.nav);
    }
    if (!route) {
      root.appendChild(AT.message(`No page at ${path}.`, "error"));
      return;
    }
    document.title = `${route.title} · agenttrace view`;
    root.setAttribute("data-page", route.title);
    try {
      current = route.page(root, params, app, route.arg) || null;
    } catch (err) {
      root.appendChild(AT.message("This page failed: " + (err.message || err), "error"));
      console.error(err);
    }
  }

  function showInfo(info) {
    showCount(info.episodes, info.indexing);
    const list = info.sources || [];
    sources.textContent = list.length === 1 ? list[0] : `${list.length} sources`;
    sources.title = list.join("\n");
    // Records the index could not read (counted; the first few given).
    const count = info.problems || 0;
    problems.hidden = !count;
    problems.textContent = `${AT.fmtInt(count)} problem${count === 1 ? "" : "s"}`;
    problems.title = (info.first_problems || []).join("\n");
  }

  function showCount(episodes, busy) {
    counter.textContent = `${AT.fmtInt(episodes)} episode${episodes === 1 ? "" : "s"}`;
    counter.setAttribute("data-count", episodes);
    indexing.hidden = !busy;
  }

  // ---- live: GET /events ------------------------------------------------------------------

  let infoLoading = null;
  let infoAgain = false;

  // /api/info again, then the open page's onIndexed (one request at a time).
  function reloadInfo() {
    if (infoLoading) {
      infoAgain = true;
      return;
    }
    infoLoading = AT.api("info")
      .then((info) => {
        app.info = info;
        showInfo(info);
        if (current && current.onIndexed) current.onIndexed(info);
      })
      .catch((err) => console.warn("agenttrace view: /api/info", err))
      .finally(() => {
        infoLoading = null;
        if (infoAgain) {
          infoAgain = false;
          reloadInfo();
        }
      });
  }

  function listen() {
    if (!window.EventSource) return;
    const events = new EventSource("events");
    events.addEventListener("open", () => {
      liveState.textContent = "● live";
      liveState.className = "live on";
    });
    events.addEventListener("error", () => {
      liveState.textContent = "○ reconnecting";
      liveState.className = "live off";
    });
    events.addEventListener("indexed", (event) => {
      let data;
      try {
        data = JSON.parse(event.data);
      } catch (err) {
        return;
      }
      const known = app.info ? app.info.episodes : null;
      showCount(data.episodes, data.indexing);
      if (app.info && (data.episodes !== known || data.added > 0 || data.indexing !== app.info.indexing)) {
        app.info.episodes = data.episodes;
        app.info.indexing = data.indexing;
        reloadInfo();
      }
    });
    AT.events = events;
  }

  async function start() {
    try {
      app.info = await AT.api("info");
    } catch (err) {
      root.appendChild(AT.message("The viewer's API did not answer: " + (err.message || err), "error"));
      return;
    }
    showInfo(app.info);
    window.addEventListener("hashchange", render);
    render();
    listen();
  }

  AT.app = app;
  AT.rerender = render;
  start();
})(window.AT);
