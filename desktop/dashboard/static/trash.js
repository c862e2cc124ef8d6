// Trash page (issue 31, DT-8): deleted items by title, kind and time, each with a Restore
// button that brings it back as a new revision after its tombstone. Uses app.js's helpers
// (api, el, $, show, openCard); every value is inserted with textContent.
"use strict";

(() => {
  function whenDeleted(ms) {
    return ms === null ? "" : new Date(ms).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  }

  function row(item) {
    const tr = el("tr", undefined, "trash-row");
    tr.dataset.id = item.id;
    const action = el("td");
    const button = el("button", "Restore", "small");
    button.type = "button";
    button.setAttribute("aria-label", "Restore " + (item.title || "(untitled)"));
    button.addEventListener("click", () => restore(item, button));
    action.append(button);
    tr.append(el("td", whenDeleted(item.deleted_ms), "activity-time"), el("td", item.title || "(untitled)"),
              el("td", kindLabel(item.kind), "activity-who"), action);
    return tr;
  }

  async function restore(item, button) {
    button.disabled = true;
    try {
      const done = await api("/api/trash/" + encodeURIComponent(item.id) + "/restore", { method: "POST", body: "{}" });
      await load();
      const note = $("trash-note");
      note.replaceChildren(document.createTextNode(`Restored “${item.title || "(untitled)"}” (revision ${done.short_revision}). `));
      const open = el("button", "Open it", "ghost small");
      open.type = "button";
      open.addEventListener("click", async () => {
        show("cards");
        await openCard(item.id);
      });
      note.append(open);
    } catch (err) {
      button.disabled = false;
      $("trash-note").textContent = err.message;
    }
  }

  async function load() {
    try {
      const data = await api("/api/trash");
      $("trash-rows").replaceChildren(...data.items.map(row));
      $("trash-note").textContent = data.items.length ? "" : "The trash is empty.";
    } catch (err) {
      $("trash-rows").replaceChildren();
      $("trash-note").textContent = err.message || "The trash is unavailable.";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("nav-trash").addEventListener("click", load);
    $("trash-reload").addEventListener("click", load);
  });
})();
