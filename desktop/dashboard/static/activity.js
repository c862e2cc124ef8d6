// Activity page (issue 17): the last 24 hours of the audit log as time, who, operation and
// item titles — never content. Values are inserted with textContent only. The token is the
// one app.js moved into sessionStorage.
"use strict";

(() => {
  const TOKEN_KEY = "memories-dashboard-token";

  async function call(path) {
    const headers = { Authorization: "Bearer " + (sessionStorage.getItem(TOKEN_KEY) || "") };
    let response;
    try {
      response = await fetch(path, { method: "GET", headers, cache: "no-store" });
    } catch (err) {
      throw { code: "dashboard_unreachable", message: "The dashboard is not reachable." };
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw (data && data.error) || { code: "http_" + response.status, message: response.statusText };
    return data;
  }

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }

  // The desktop's own requests carry a client label (engine/service/caller.py); say them as names.
  const WHO_TEXT = { dashboard: "Dashboard", tray: "Tray" };

  function row(entry) {
    const tr = el("tr", undefined, "activity-row");
    const when = entry.ts_ms === null ? "" : new Date(entry.ts_ms).toLocaleTimeString();
    const items = entry.items.map((i) => (i.title === null ? "(deleted item)" : i.title) + (i.kind ? " · " + i.kind : ""));
    tr.append(el("td", when, "activity-time"), el("td", WHO_TEXT[entry.who] || entry.who, "activity-who"), el("td", entry.op, "activity-op"),
              el("td", items.join(", "), "activity-items"));
    return tr;
  }

  async function load() {
    const body = document.getElementById("activity-rows");
    const note = document.getElementById("activity-note");
    if (!body) return;
    try {
      const data = await call("/api/activity");
      body.replaceChildren(...data.entries.map(row));
      note.textContent = data.entries.length ? (data.more ? "Showing the newest " + data.entries.length + "." : "")
                                             : "Nothing happened in the last 24 hours.";
    } catch (err) {
      body.replaceChildren();
      note.textContent = err.message || "Activity is unavailable.";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const nav = document.getElementById("nav-activity");
    if (nav) nav.addEventListener("click", load);
    const reload = document.getElementById("activity-reload");
    if (reload) reload.addEventListener("click", load);
  });
})();
