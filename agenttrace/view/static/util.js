// agenttrace view: shared helpers (DOM building, API calls, formatting, hash routes).
// Every piece of data reaches the page as text nodes or attributes, never as HTML.
"use strict";

window.AT = window.AT || {};

(function (AT) {
  // ---- DOM ---------------------------------------------------------------------------

  // h("div", {class: "x", "data-testid": "y", onclick: fn}, child, "text", [more])
  // Children may be nodes, strings, numbers, null/undefined/false (skipped) or arrays.
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    if (attrs) {
      for (const [name, value] of Object.entries(attrs)) {
        if (value === null || value === undefined || value === false) continue;
        if (name.startsWith("on") && typeof value === "function") {
          node.addEventListener(name.slice(2), value);
        } else if (name === "value" || name === "checked" || name === "disabled") {
          node[name] = value;
        } else if (name === "style" && typeof value === "object") {
          Object.assign(node.style, value);
        } else {
          node.setAttribute(name, value === true ? "" : String(value));
        }
      }
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(node, child);
      else if (child instanceof Node) node.appendChild(child);
      else node.appendChild(document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  // ---- API ---------------------------------------------------------------------------

  class ApiError extends Error {}

  // Relative URLs: the page is served at the viewer's root, so "api/..." works behind a
  // path prefix too.
  async function api(path, params) {
    const query = params ? queryString(params) : "";
    const response = await fetch("api/" + path + (query ? "?" + query : ""), {
      headers: { Accept: "application/json" },
    });
    let body = null;
    try {
      body = await response.json();
    } catch (err) {
      throw new ApiError(`${path}: HTTP ${response.status}, not JSON`);
    }
    if (!response.ok) {
      throw new ApiError((body && body.error) || `${path}: HTTP ${response.status}`);
    }
    return body;
  }

  // Parameters with empty values ("" / null / undefined / []) are left out.
  function queryString(params) {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) {
      if (value === null || value === undefined || value === "") continue;
      if (Array.isArray(value)) {
        if (value.length) search.set(name, value.join(","));
      } else {
        search.set(name, String(value));
      }
    }
    return search.toString();
  }

  // ---- hash routes: "#/path?query" -----------------------------------------------------

  function parseHash(hash) {
    let text = (hash || "").replace(/^#/, "");
    if (!text.startsWith("/")) text = "/" + text;
    const at = text.indexOf("?");
    const path = at < 0 ? text : text.slice(0, at);
    const query = new URLSearchParams(at < 0 ? "" : text.slice(at + 1));
    const params = {};
    for (const [name, value] of query) params[name] = value;
    return { path, params };
  }

  function hashFor(path, params) {
    const query = params ? queryString(params) : "";
    return "#" + path + (query ? "?" + query : "");
  }

  // Changes the address without a hashchange event (the page updates itself).
  function replaceHash(path, params) {
    const hash = hashFor(path, params);
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }

  // ---- formatting --------------------------------------------------------------------

  function isNumber(value) {
    return typeof value === "number" && Number.isFinite(value);
  }

  // A number for reading: up to `digits` significant decimals, trailing zeros dropped.
  function fmtNum(value, digits = 4) {
    if (value === null || value === undefined) return "—";
    if (typeof value !== "number") return String(value);
    if (!Number.isFinite(value)) return String(value);
    if (Number.isInteger(value)) return String(value);
    const abs = Math.abs(value);
    if (abs < 1e-9) return "≈0"; // float noise such as 0.1 * 3 - 0.3 (the exact value: title)
    if (abs < 1e-4 || abs >= 1e9) return value.toExponential(3);
    return String(Number(value.toFixed(digits)));
  }

  function fmtInt(value) {
    return value === null || value === undefined ? "—" : Number(value).toLocaleString("en-US");
  }

  function fmtSeconds(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
    if (seconds < 1e-3) return (seconds * 1e6).toFixed(0) + " µs";
    if (seconds < 1) return (seconds * 1e3).toFixed(1) + " ms";
    if (seconds < 120) return seconds.toFixed(2) + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 120) return `${minutes} min ${Math.round(seconds - minutes * 60)} s`;
    return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
    return ms < 10 ? ms.toFixed(2) : ms < 1000 ? ms.toFixed(1) : Math.round(ms).toString();
  }

  // Nanoseconds since the epoch -> local "YYYY-MM-DD HH:MM:SS.mmm".
  function fmtTime(ns) {
    if (ns === null || ns === undefined) return "—";
    const date = new Date(Number(ns) / 1e6);
    const pad = (n, w = 2) => String(n).padStart(w, "0");
    return (
      `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
      `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.` +
      pad(date.getMilliseconds(), 3)
    );
  }

  // (end - start) in ns -> ms, or null.
  function spanMs(start, end) {
    if (start === null || start === undefined || end === null || end === undefined) return null;
    return (Number(end) - Number(start)) / 1e6;
  }

  const STATUS_COLORS = {
    completed: "#2f855a",
    truncated: "#d69e2e",
    errored: "#c53030",
    incomplete: "#718096",
  };
  const PALETTE = ["#3182ce", "#805ad5", "#dd6b20", "#319795", "#d53f8c", "#4a5568"];

  function statusColor(status, index = 0) {
    return STATUS_COLORS[status] || PALETTE[index % PALETTE.length];
  }

  function statusBadge(status) {
    const known = status in STATUS_COLORS ? status : "other";
    return h("span", { class: `badge status-${known}`, "data-status": status }, status);
  }

  function message(text, kind = "info") {
    return h("div", { class: `notice notice-${kind}`, "data-testid": `notice-${kind}` }, text);
  }

  // Fill a page when its data comes: `show(data)` into a cleared `body`, or the error there;
  // the section's data-state says which (tests wait on it). Returns the page's handle: once
  // it is left, a late answer is dropped.
  function loadPage(section, body, request, show) {
    let gone = false;
    request
      .then((data) => {
        if (gone) return;
        clear(body);
        show(data);
        section.setAttribute("data-state", "ready");
      })
      .catch((err) => {
        if (gone) return;
        clear(body).appendChild(message(String(err.message || err), "error"));
        section.setAttribute("data-state", "error");
      });
    return {
      leave() {
        gone = true;
      },
    };
  }

  // Run `fn` at most once per `ms`, the last call winning (search boxes).
  function debounce(fn, ms) {
    let timer = null;
    return (...args) => {
      clearTimeout(timer);
      timer = setTimeout(() => fn(...args), ms);
    };
  }

  Object.assign(AT, {
    h,
    append,
    clear,
    api,
    ApiError,
    queryString,
    parseHash,
    hashFor,
    replaceHash,
    isNumber,
    fmtNum,
    fmtInt,
    fmtSeconds,
    fmtMs,
    fmtTime,
    spanMs,
    statusColor,
    statusBadge,
    message,
    loadPage,
    debounce,
    PALETTE,
  });
})(window.AT);
