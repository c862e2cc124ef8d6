// Memories dashboard. Every value from the engine is inserted with textContent, never as
// HTML. The per-launch token arrives in the URL fragment, moves to sessionStorage and is
// sent as a bearer header; the fragment is then removed from the address bar.
"use strict";

const TOKEN_KEY = "memories-dashboard-token";
const STATE_TEXT = {
  starting: "starting…",
  not_running: "engine not running",
  not_responding: "engine not responding",
  locked: "locked",
  unlocked: "unlocked",
  busy: "syncing / busy",
  attention: "needs attention",
};
const STATUS_LABELS = {
  vaults: "Vaults",
  assets: "Assets",
  conflicts: "In conflict",
  connections: "Remote connections",
  providers: "Cloud providers",
  sync_queue: "Sync queue",
};

let kinds = [];
let current = null; // {id, kind, revision}

function token() {
  const fromHash = location.hash.length > 1 ? decodeURIComponent(location.hash.slice(1)) : "";
  if (fromHash) {
    sessionStorage.setItem(TOKEN_KEY, fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

async function api(path, options = {}) {
  const headers = { Authorization: "Bearer " + token() };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method: options.method || "GET", headers, body: options.body, cache: "no-store" });
  } catch (err) {
    throw { code: "dashboard_unreachable", message: "The dashboard is not reachable (the tray may have quit)." };
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    if (response.status === 401) document.getElementById("auth-missing").hidden = false;
    throw (data && data.error) || { code: "http_" + response.status, message: response.statusText };
  }
  return data;
}

function show(page) {
  for (const section of document.querySelectorAll(".page")) section.hidden = section.id !== "page-" + page;
  for (const button of document.querySelectorAll("nav .nav")) button.classList.toggle("active", button.dataset.page === page);
  if (page === "cards") loadCards();
}

function setResult(id, text, cls) {
  const el = document.getElementById(id);
  el.textContent = text;
  el.className = cls || "";
}

function renderStatus(data) {
  const state = data.tray_state;
  const badge = document.getElementById("badge");
  badge.dataset.state = state;
  badge.textContent = STATE_TEXT[state] || state;
  const line = document.getElementById("status-line");
  line.textContent = "Engine: " + (STATE_TEXT[state] || state);
  line.dataset.state = state;
  const dl = document.getElementById("status-fields");
  dl.replaceChildren();
  const status = data.probe.status || {};
  for (const key of Object.keys(STATUS_LABELS)) {
    if (!(key in status)) continue;
    let value = status[key];
    if (Array.isArray(value)) value = value.length ? value.join(", ") : "none";
    else if (value && typeof value === "object") value = Object.entries(value).map(([k, v]) => k + " " + v).join(", ");
    const dt = document.createElement("dt");
    dt.textContent = STATUS_LABELS[key];
    const dd = document.createElement("dd");
    dd.textContent = String(value);
    dd.id = "status-" + key;
    dl.append(dt, dd);
  }
  document.getElementById("backend").textContent = data.desktop.backend;
  document.getElementById("mode").textContent = data.desktop.mode;
  document.getElementById("quit").hidden = !data.desktop.can_quit;
  document.getElementById("lock").disabled = state !== "unlocked" && state !== "busy" && state !== "attention";
}

async function pollStatus() {
  try {
    renderStatus(await api("/api/status"));
  } catch (err) {
    const badge = document.getElementById("badge");
    badge.dataset.state = "not_responding";
    badge.textContent = err.code === "dashboard_unreachable" ? "dashboard stopped" : "error";
  }
  setTimeout(pollStatus, 1000);
}

async function loadKinds() {
  kinds = (await api("/api/kinds")).kinds;
  const select = document.getElementById("kind");
  select.replaceChildren();
  for (const k of kinds) {
    const option = document.createElement("option");
    option.value = k.kind;
    option.textContent = k.label;
    select.append(option);
  }
}

async function loadCards() {
  const list = document.getElementById("card-list");
  try {
    if (!kinds.length) await loadKinds();
    const kind = document.getElementById("kind").value || "memory";
    const data = await api("/api/cards?kind=" + encodeURIComponent(kind));
    list.replaceChildren();
    for (const item of data.items) {
      const li = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "card" + (item.conflict ? " conflict" : "");
      button.dataset.id = item.id;
      button.textContent = (item.title || "(untitled)") + (item.conflict ? "  ⚠ conflict" : "");
      button.addEventListener("click", () => openCard(item.id));
      li.append(button);
      list.append(li);
    }
    setResult("list-note", data.total + " card(s)");
  } catch (err) {
    list.replaceChildren();
    setResult("list-note", err.message, "error");
  }
}

function fieldInput(spec, value) {
  const label = document.createElement("label");
  label.textContent = spec.label;
  label.htmlFor = "field-" + spec.name;
  let input;
  if (spec.widget === "textarea") input = document.createElement("textarea");
  else input = document.createElement("input");
  input.id = "field-" + spec.name;
  input.name = spec.name;
  input.dataset.widget = spec.widget;
  if (spec.widget !== "tags") input.maxLength = spec.max_length;
  input.value = spec.widget === "tags" ? (value || []).join(", ") : value || "";
  return [label, input];
}

async function openCard(id) {
  setResult("save-result", "");
  try {
    const card = await api("/api/cards/" + encodeURIComponent(id));
    const spec = kinds.find((k) => k.kind === card.kind);
    current = { id: card.id, kind: card.kind, revision: card.revision, conflict: card.conflict };
    document.getElementById("card-id").textContent = card.short_id;
    document.getElementById("card-rev").textContent = card.short_revision;
    const fields = document.getElementById("fields");
    fields.replaceChildren();
    for (const f of spec.fields) fields.append(...fieldInput(f, card.fields[f.name]));
    document.getElementById("editor").hidden = false;
    if (card.conflict) {
      setResult("save-result", "This card is in conflict (" + card.heads + " versions). Resolve it with `memories edit " + card.short_id + " --resolve`.", "conflict");
    }
  } catch (err) {
    setResult("save-result", err.message, "error");
  }
}

async function save(event) {
  event.preventDefault();
  if (!current) return;
  const fields = {};
  for (const input of document.querySelectorAll("#fields [name]")) {
    fields[input.name] = input.dataset.widget === "tags"
      ? input.value.split(",").map((t) => t.trim()).filter((t) => t)
      : input.value;
  }
  try {
    const result = await api("/api/cards/" + encodeURIComponent(current.id), {
      method: "POST",
      body: JSON.stringify({ base: current.revision, fields }),
    });
    if (result.conflict) {
      setResult("save-result", "Conflict: this card changed elsewhere since you opened it. Both versions were kept; nothing was overwritten. Resolve it with `memories edit " + current.id.slice(0, 8) + " --resolve`.", "conflict");
    } else {
      setResult("save-result", "Saved revision " + result.short_revision + ".", "saved");
    }
    current.revision = result.revision;
    document.getElementById("card-rev").textContent = result.short_revision;
    loadCards();
  } catch (err) {
    setResult("save-result", err.message, "error");
  }
}

async function post(path, resultId, okText) {
  try {
    await api(path, { method: "POST", body: "{}" });
    setResult(resultId, okText);
  } catch (err) {
    setResult(resultId, err.message, "error");
  }
}

document.addEventListener("DOMContentLoaded", () => {
  if (!token()) document.getElementById("auth-missing").hidden = false;
  for (const button of document.querySelectorAll("nav .nav")) button.addEventListener("click", () => show(button.dataset.page));
  document.getElementById("lock").addEventListener("click", () => post("/api/lock", "action-result", "Locked."));
  document.getElementById("quit").addEventListener("click", () => post("/api/quit", "action-result", "The tray is quitting."));
  document.getElementById("reload").addEventListener("click", loadCards);
  document.getElementById("kind").addEventListener("change", loadCards);
  document.getElementById("editor").addEventListener("submit", save);
  show("status");
  pollStatus();
});
