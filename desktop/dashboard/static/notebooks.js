// Agents page (AG-13): each connected agent's private notebook, read-only. Values are inserted
// with textContent only (an agent wrote them: never markup). Export and delete are
// `memories agent notebook NAME --export FILE | --delete` in a terminal.
"use strict";

(() => {
  // Requests and elements come from app.js (loaded first): api() carries the token it keeps
  // in sessionStorage and shows the "token missing" notice on a 401; el() sets text only.
  function when(ms) {
    return ms === null || ms === undefined ? "" : new Date(ms).toLocaleString();
  }

  async function open(agent) {
    const view = document.getElementById("notebook-view");
    const note = document.getElementById("notebooks-note");
    try {
      const data = await api("/api/notebooks/" + encodeURIComponent(agent));
      const parts = [el("h3", "Notebook of " + data.notebook.agent + (data.notebook.agent_active ? "" : " (revoked)"))];
      for (const entry of data.entries) {
        const article = el("article", undefined, "notebook-entry");
        article.dataset.id = entry.id;
        article.append(el("h4", entry.title + (entry.forgotten ? " (forgotten by the agent)" : "")),
                       el("p", "rev " + entry.rev + " · " + when(entry.updated_ms) + (entry.tags.length ? " · " + entry.tags.join(", ") : ""), "meta"),
                       el("pre", entry.body, "notebook-body"));
        parts.push(article);
      }
      if (data.scratch) {
        const pad = el("article", undefined, "notebook-scratch");
        pad.append(el("h4", "Scratch pad"), el("p", "rev " + data.scratch.rev + " · " + when(data.scratch.at_ms), "meta"),
                   el("pre", data.scratch.text, "notebook-body"));
        parts.push(pad);
      }
      if (!data.entries.length && !data.scratch) parts.push(el("p", "This notebook is empty.", "meta"));
      view.replaceChildren(...parts);
      note.textContent = "";
    } catch (err) {
      view.replaceChildren();
      note.textContent = err.message || "The notebook is unavailable.";
    }
  }

  function row(book) {
    const tr = el("tr", undefined, "notebook-row");
    const button = el("button", book.agent, "link");
    button.type = "button";
    button.addEventListener("click", () => open(book.agent));
    const name = el("td", undefined, "notebook-agent");
    name.append(button);
    tr.append(name, el("td", book.agent_active ? "active" : "revoked", "notebook-state"),
              el("td", String(book.entries), "notebook-entries"), el("td", String(book.revisions)), el("td", when(book.created_ms)));
    return tr;
  }

  async function load() {
    const body = document.getElementById("notebook-rows");
    const note = document.getElementById("notebooks-note");
    if (!body) return;
    document.getElementById("notebook-view").replaceChildren();
    try {
      const data = await api("/api/notebooks");
      body.replaceChildren(...data.notebooks.map(row));
      note.textContent = data.notebooks.length ? "" : "No agent has written in a notebook yet.";
    } catch (err) {
      body.replaceChildren();
      note.textContent = err.message || "Notebooks are unavailable.";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const nav = document.getElementById("nav-agents");
    if (nav) nav.addEventListener("click", load);
    const reload = document.getElementById("notebooks-reload");
    if (reload) reload.addEventListener("click", load);
  });
})();
