// Memories dashboard: the vault's window for ordinary items (SPEC DT-5, API-6).
// Every value from the engine is inserted with textContent or as a text node, never as
// HTML; search highlights are <mark> elements built around text nodes. The per-launch
// token arrives in the URL fragment, moves to sessionStorage and is sent as a bearer
// header; the fragment is then removed from the address bar.
"use strict";

const TOKEN_KEY = "memories-dashboard-token";
const PAGE_SIZE = 100;
const SEARCH_DELAY_MS = 180;
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
  assets: "Items",
  conflicts: "In conflict",
  connections: "Remote connections",
  providers: "Cloud providers",
  sync_queue: "Sync queue",
  cloud_delivery: "Cloud delivery", // CL-5: not_arriving / not_taken device counts
  storage: "On disk", // issue 32: the store, its pack files (large files) and the full-disk reserve
};
const OPEN_STATES = new Set(["unlocked", "busy", "attention"]);
// Background jobs by their fixed engine names (desktop/status.py says the same in the tray).
const JOB_TEXT = {
  "search-build": "Indexing",
  "search-catch-up": "Indexing new items",
  verify: "Checking signatures",
  "segmenter-warm": "Preparing search",
  sync: "Syncing",
  "cloud-sync": "Syncing with the cloud",
  "job-run": "Running an approved job",
  "memory-cycle": "Distilling new conversation turns",
};
// Jobs whose counts are items; the others report steps, said as "…" (the bar still fills).
const COUNTED_JOBS = new Set(["search-build", "search-catch-up"]);

const view = {
  kinds: [], // the allowlist from /api/kinds
  protectedKinds: [], // [{kind, label}]: shown by title and kind only (/api/protected)
  facets: null, // the last ordinary listing's {kinds, tags}, kept while a protected kind is listed
  kind: "all",
  tag: null,
  offset: 0,
  total: 0,
  query: "",
  items: [], // rows currently listed (page or search results)
  selected: -1,
  current: null, // {id, kind, revision, conflict, locked} or {isNew: true}
  dirty: false,
  open: false, // the vault answered (unlocked)
  searchSeq: 0,
  listSeq: 0,
  tabPicks: 0, // bumped by every tab the user picks: openCard keeps one picked while it loads
  openSeq: 0, // bumped by every open and close: a slower answer for an older open is dropped
};

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

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

function setResult(id, text, cls) {
  const node = $(id);
  node.textContent = text;
  node.classList.remove("saved", "error", "conflict");
  if (cls) node.classList.add(cls);
}

// One item's kind, as its pill and list row name it.
const KIND_NAMES = {
  memory: "Memory",
  knowledge: "Knowledge",
  brain: "Brain",
  persona: "Persona",
  protected: "Protected card",
  login: "Login",
  credential: "Credential",
};

function kindLabel(kind) {
  return KIND_NAMES[kind] || kind;
}

// A kind as the sidebar's filter names its group ("Memories", "Knowledge").
function kindGroupLabel(kind) {
  const spec = view.kinds.find((k) => k.kind === kind);
  return spec ? spec.label.replace(/ cards$/, "") : kindLabel(kind);
}

function isProtectedKind(kind) {
  return view.protectedKinds.some((k) => k.kind === kind);
}

// -- pages -------------------------------------------------------------------------------
function show(page) {
  for (const section of document.querySelectorAll(".page")) section.hidden = section.id !== "page-" + page;
  for (const button of document.querySelectorAll("nav .nav")) {
    button.classList.toggle("active", button.dataset.page === page);
    if (button.dataset.page === page) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  $("filters").hidden = page !== "cards" || !view.open;
  if (page === "cards" && view.open) refreshList();
  if (page === "attention") loadAttention();
}

// -- status ------------------------------------------------------------------------------
function renderStatus(data) {
  const state = data.tray_state;
  const badge = $("badge");
  badge.dataset.state = state;
  badge.textContent = data.probe.state === "uninitialized" ? "no vault" : STATE_TEXT[state] || state;
  const line = $("status-line");
  const status = data.probe.status || {};
  const reasons = state === "attention" ? attentionReasons(status) : [];
  line.textContent = reasons.length ? "Needs attention: " + reasons.join("; ") : "Engine: " + (STATE_TEXT[state] || state);
  line.dataset.state = state;
  const dl = $("status-fields");
  dl.replaceChildren();
  if (reasons.length) {
    // DT-7: "needs attention" says why, and where to act on it.
    const dd = el("dd");
    dd.id = "status-attention";
    dd.dataset.state = "attention";
    dd.append(document.createTextNode(reasons.join("; ") + " · "));
    const go = el("button", "Open Needs attention", "linklike");
    go.type = "button";
    go.addEventListener("click", () => show("attention"));
    dd.append(go);
    dl.append(el("dt", "Needs attention"), dd);
  }
  for (const key of Object.keys(STATUS_LABELS)) {
    if (!(key in status)) continue;
    let value = status[key];
    if (key === "cloud_delivery") value = deliveryText(value);
    else if (key === "storage") value = storageText(value);
    else if (Array.isArray(value)) value = value.length ? value.join(", ") : "none";
    else if (value && typeof value === "object") value = Object.entries(value).map(([k, v]) => k + " " + v).join(", ");
    const dd = el("dd", String(value));
    dd.id = "status-" + key;
    if (key === "cloud_delivery" && value !== DELIVERY_OK) dd.dataset.state = "attention";
    dl.append(el("dt", STATUS_LABELS[key]), dd);
  }
  renderActivity(OPEN_STATES.has(state) && Array.isArray(status.activity) ? status.activity : []);
  $("backend").textContent = data.desktop.backend;
  $("mode").textContent = data.desktop.mode;
  $("quit").hidden = !data.desktop.can_quit;
  quitLocks = Boolean(data.desktop.quit_locks);
  $("quit").textContent = quitLocks ? "Quit tray and lock" : "Quit tray";
  $("quit").title = quitLocks
    ? "Quits the tray and its dashboard, and locks the vault"
    : "Quits the tray and its dashboard; the vault stays unlocked until its idle timer";
  $("lock").disabled = !OPEN_STATES.has(state);
  renderGate(state, data.probe.state);
  // Other pages' scripts follow the status from here (transfer.js: the export's progress).
  document.dispatchEvent(new CustomEvent("memories:status", { detail: data }));
}

// Sizes in binary units, as the CLI prints them (`memories status`).
function sizeText(bytes) {
  if (!Number.isFinite(bytes) || bytes < 0) return "?";
  if (bytes < 1024 * 1024) return Math.ceil(bytes / 1024) + " KiB";
  if (bytes < 1024 ** 3) return (bytes / 1024 ** 2).toFixed(1) + " MiB";
  return (bytes / 1024 ** 3).toFixed(1) + " GiB";
}

function storageText(storage) {
  const total = sizeText(Number(storage.total_bytes));
  const packs = Number.isInteger(storage.packs) ? storage.packs : 0;
  if (!packs) return total;
  const files = "large files " + sizeText(Number(storage.pack_bytes)) + " in " + packs + (packs === 1 ? " pack" : " packs");
  return total + " (store " + sizeText(Number(storage.store_bytes)) + ", " + files + ")";
}

// DT-7: why the engine asks for attention, from the status's fixed reason codes.
function attentionReasons(status) {
  const codes = Array.isArray(status.attention_reasons) ? status.attention_reasons : [];
  const out = [];
  for (const code of codes) {
    if (code === "conflicts") {
      const n = Number.isInteger(status.conflicts) ? status.conflicts : 0;
      out.push(n === 1 ? "1 item in conflict" : `${n.toLocaleString()} items in conflict`);
    } else if (code === "quarantine") out.push("revisions held back by a sync");
    else if (code === "forks") out.push("a vault's members changed on two devices");
    else if (code === "cloud_delivery") out.push(deliveryText(status.cloud_delivery).replace(/ \(run .*\)$/, ""));
    else if (code === "tickets") out.push("a ticket waiting for approval");
  }
  return out;
}

// CL-5: the cloud delivery attention item from its two counts (the tray says the same).
const DELIVERY_OK = "every device's writes arriving";
function deliveryText(delivery) {
  const parts = [];
  const arriving = delivery && Number.isInteger(delivery.not_arriving) ? delivery.not_arriving : 0;
  const taken = delivery && Number.isInteger(delivery.not_taken) ? delivery.not_taken : 0;
  if (arriving > 0) parts.push(arriving === 1 ? "1 device's writes not arriving" : `${arriving} devices' writes not arriving`);
  if (taken > 0) parts.push(taken === 1 ? "1 device has not taken ours" : `${taken} devices have not taken ours`);
  return parts.length ? parts.join(", ") + " (run memories cloud sync for details)" : DELIVERY_OK;
}

// Running background work (issue 17): "Indexing 3,000 of 10,000…" with a progress bar in the
// side bar and one row per job on the Status tab; gone when the work ends or the vault locks.
function jobText(job) {
  const label = JOB_TEXT[job.job];
  if (!label) return null;
  const counted = COUNTED_JOBS.has(job.job) && Number.isInteger(job.total) && job.total > 0 && Number.isInteger(job.done);
  return counted ? `${label} ${job.done.toLocaleString("en-US")} of ${job.total.toLocaleString("en-US")}…` : label + "…";
}

function setProgress(bar, job) {
  if (Number.isInteger(job.total) && job.total > 0) {
    bar.max = job.total;
    bar.value = Math.min(job.done, job.total);
  } else {
    bar.removeAttribute("value"); // indeterminate
  }
}

function renderActivity(jobs) {
  const known = jobs.filter((job) => jobText(job) !== null);
  const bar = $("activity-bar");
  bar.hidden = !known.length;
  if (known.length) {
    $("activity-text").textContent = jobText(known[0]);
    setProgress($("activity-progress"), known[0]);
  }
  const list = $("status-jobs");
  list.replaceChildren(
    ...known.map((job) => {
      const text = jobText(job);
      const progress = document.createElement("progress");
      progress.setAttribute("aria-label", text);
      setProgress(progress, job);
      const li = el("li", text);
      li.dataset.job = job.job;
      li.append(progress);
      return li;
    }),
  );
  $("status-jobs-idle").hidden = known.length > 0;
}

function renderGate(state, probeState) {
  const open = OPEN_STATES.has(state);
  const gate = $("gate");
  gate.hidden = open;
  $("listpane").hidden = !open;
  $("detail").hidden = !open;
  if (!open) {
    let title, parts;
    if (probeState === "uninitialized") {
      title = "No vault yet";
      parts = ["Create one from the tray's menu, or run ", ["memories init"], " in a terminal. This page updates by itself."];
    } else if (state === "locked") {
      title = "The vault is locked";
      parts = ["Unlock it with the tray's Unlock…, or run ", ["memories unlock"], " in a terminal. This page never asks for your password; it updates by itself."];
    } else if (state === "not_responding") {
      // Seen for a moment while the engine restarts after a lock (it clears its memory that
      // way), or when it hangs: neither means it stopped.
      title = "The engine is not answering";
      parts = ["It may be busy or restarting after a lock. If this stays, run ", ["memories status"], " in a terminal. This page updates by itself."];
    } else {
      title = "The engine is not running";
      parts = ["Start it from the tray, or run ", ["memories daemon start"], " in a terminal. This page updates by itself."];
    }
    $("gate-title").textContent = title;
    $("gate-text").replaceChildren(...parts.map((p) => (Array.isArray(p) ? el("code", p[0]) : document.createTextNode(p))));
  }
  gate.dataset.state = state;
  $("filters").hidden = !open || $("page-cards").hidden;
  if (open && !view.open) {
    view.open = true;
    loadTicketCount(); // the change feed may have said hello while the vault was still locked
    if (!$("page-cards").hidden) refreshList();
    // The engine answers now: settings.js reads the theme (and the page's values) again.
    document.dispatchEvent(new Event("memories:engine-open"));
  } else if (!open && view.open) {
    view.open = false;
    view.items = [];
    $("card-list").replaceChildren();
    $("kind-filter").replaceChildren();  // nothing from the vault stays on a locked page
    $("tag-filter").replaceChildren();
    $("protected-filter").replaceChildren();
    view.facets = null;
    $("list-note").textContent = "";
    $("search").value = "";
    view.query = "";
    // The vault locked under an unsaved edit: it cannot be saved any more, and nothing from
    // the vault may stay on a locked page; say so instead of dropping it silently.
    $("gate-lost").hidden = !view.dirty;
    closeEditor(true);
  }
}

async function pollStatus() {
  try {
    renderStatus(await api("/api/status"));
  } catch (err) {
    const badge = $("badge");
    badge.dataset.state = "not_responding";
    badge.textContent = err.code === "dashboard_unreachable" ? "dashboard stopped" : "error";
  }
  setTimeout(pollStatus, 1000);
}

// The Tickets badge follows the change feed's "tickets" events (live.js: a count, never ticket
// text). It is read here when the stream (re)connects, and every 30 s only while it is down.
const TICKET_FALLBACK_MS = 30000;

function renderTicketCount(pending) {
  const count = $("ticket-count");
  count.textContent = String(pending);
  count.hidden = pending === 0;
}

async function loadTicketCount() {
  if (!view.open) return; // locked or not running: the gate says so (and no request fails in the console)
  try {
    const data = await api("/api/tickets");
    renderTicketCount(data.tickets.length);
  } catch (err) {
    $("ticket-count").hidden = true;
  }
}

async function pollTickets() {
  if (view.open && !LIVE.connected) await loadTicketCount();
  setTimeout(pollTickets, TICKET_FALLBACK_MS);
}

// -- filters -----------------------------------------------------------------------------
async function loadKinds() {
  view.kinds = (await api("/api/kinds")).kinds;
  view.protectedKinds = (await api("/api/protected")).kinds;
  const select = $("new-kind");
  select.replaceChildren();
  for (const k of view.kinds) {
    const option = el("option", kindLabel(k.kind));
    option.value = k.kind;
    select.append(option);
  }
}

function facetButton(label, count, active, onClick, data) {
  const li = el("li");
  const button = el("button", undefined, "facet-item" + (active ? " active" : ""));
  button.type = "button";
  Object.assign(button.dataset, data);
  button.append(el("span", label, "facet-label"), el("span", String(count), "facet-count"));
  button.addEventListener("click", onClick);
  if (active) button.setAttribute("aria-pressed", "true");
  li.append(button);
  return li;
}

function renderProtectedFacets(counts) {
  const list = $("protected-filter");
  list.replaceChildren();
  for (const k of view.protectedKinds) {
    list.append(facetButton(k.label, counts[k.kind] || 0, view.kind === k.kind, () => setKind(k.kind), { kind: k.kind }));
  }
}

function renderFacets(kinds, tags) {
  const all = Object.values(kinds).reduce((a, b) => a + b, 0);
  const kindList = $("kind-filter");
  kindList.replaceChildren(facetButton("All items", all, view.kind === "all", () => setKind("all"), { kind: "all" }));
  for (const k of view.kinds) {
    kindList.append(facetButton(kindGroupLabel(k.kind), kinds[k.kind] || 0, view.kind === k.kind, () => setKind(k.kind), { kind: k.kind }));
  }
  const tagList = $("tag-filter");
  tagList.replaceChildren();
  if (view.tag && !tags.some((t) => t.tag === view.tag)) tags = [{ tag: view.tag, count: 0 }, ...tags];
  for (const t of tags.slice(0, 40)) {
    tagList.append(facetButton("#" + t.tag, t.count, view.tag === t.tag, () => setTag(view.tag === t.tag ? null : t.tag), { tag: t.tag }));
  }
  if (!tags.length) tagList.append(el("li", "No tags yet", "meta"));
}

// A filter only changes the list; an open item (and its unsaved edits) stays as it is.
function setKind(kind) {
  view.kind = kind;
  if (isProtectedKind(kind)) view.tag = null;
  view.offset = 0;
  refreshList();
}

function setTag(tag) {
  if (isProtectedKind(view.kind)) view.kind = "all";
  view.tag = tag;
  view.offset = 0;
  refreshList();
}

// -- the list ----------------------------------------------------------------------------
function refreshList() {
  if (view.query && !isProtectedKind(view.kind)) return runSearch();
  return loadPage();
}

// Protected cards, logins and credentials: a page of titles (the search box filters titles).
async function loadProtectedPage(seq) {
  const params = new URLSearchParams({ kind: view.kind, offset: String(view.offset) });
  if (view.query) params.set("q", view.query);
  const [data, counts] = await Promise.all([api("/api/protected?" + params), api("/api/protected")]);
  if (!view.facets) {
    const ordinary = await api("/api/cards?limit=1");
    view.facets = { kinds: ordinary.kinds, tags: ordinary.tags };
  }
  if (seq !== view.listSeq) return;
  view.total = data.total;
  renderFacets(view.facets.kinds, view.facets.tags);
  renderProtectedFacets(counts.counts);
  renderItems(data.items, null);
  const last = Math.min(data.offset + data.items.length, data.total);
  const label = kindLabel(view.kind).toLowerCase();
  const none = view.query ? `No ${label} titled “${view.query}”.` : `No ${label}s in this vault.`;
  setResult("list-note", data.total ? `${data.offset + 1}–${last} of ${data.total.toLocaleString()} · titles only` : none);
  $("pager").hidden = false;
  renderPager(true);
}

async function loadPage() {
  const seq = ++view.listSeq;
  try {
    if (!view.kinds.length) await loadKinds();
    if (isProtectedKind(view.kind)) return await loadProtectedPage(seq);
    const params = new URLSearchParams({ kind: view.kind, offset: String(view.offset), limit: String(PAGE_SIZE) });
    if (view.tag) params.set("tag", view.tag);
    const [data, counts] = await Promise.all([api("/api/cards?" + params), api("/api/protected")]);
    if (seq !== view.listSeq || view.query) return;
    $("search-conflicts").hidden = true;
    view.total = data.total;
    view.facets = { kinds: data.kinds, tags: data.tags };
    renderFacets(data.kinds, data.tags);
    renderProtectedFacets(counts.counts);
    renderItems(data.items, null);
    const last = Math.min(data.offset + data.items.length, data.total);
    setResult("list-note", data.total ? `${data.offset + 1}–${last} of ${data.total.toLocaleString()}` : emptyText());
    renderPager();
  } catch (err) {
    if (seq !== view.listSeq) return;
    $("card-list").replaceChildren();
    setResult("list-note", err.message, "error");
  }
}

function emptyText() {
  if (view.tag) return "Nothing tagged #" + view.tag + " here.";
  return "Nothing here yet. Press New to write the first item.";
}

function pageSize() {
  return view.query && !isProtectedKind(view.kind) ? view.pageSize || PAGE_SIZE : PAGE_SIZE;
}

function renderPager(filtered) {
  const pager = $("pager");
  const size = pageSize();
  const pages = Math.max(1, Math.ceil(view.total / size));
  const page = Math.floor(view.offset / size) + 1;
  pager.hidden = (!!view.query && !filtered) || pages <= 1;
  $("page-label").textContent = `Page ${page} of ${pages}`;
  $("page-first").disabled = $("page-prev").disabled = page <= 1;
  $("page-next").disabled = $("page-last").disabled = page >= pages;
}

function goPage(which) {
  const size = pageSize();
  const lastOffset = Math.max(0, (Math.ceil(view.total / size) - 1) * size);
  const target = { first: 0, prev: view.offset - size, next: view.offset + size, last: lastOffset }[which];
  view.offset = Math.min(Math.max(0, target), lastOffset);
  refreshList().then(() => $("card-list").scrollTo(0, 0));
}

function appendSnippet(parent, parts) {
  for (const [text, marked] of parts) {
    if (marked) parent.append(el("mark", text));
    else parent.append(document.createTextNode(text));
  }
}

function renderItems(items, hits) {
  view.items = items;
  const list = $("card-list");
  const rows = items.map((item, index) => {
    const li = el("li");
    const button = el("button", undefined, "card" + (item.conflict ? " conflict" : ""));
    button.type = "button";
    button.dataset.id = item.id;
    button.dataset.index = String(index);
    const top = el("span", undefined, "card-top");
    if (item.locked) top.append(lockIcon());
    top.append(el("span", item.title || "(untitled)", "card-title"));
    if (item.conflict) top.append(el("span", "conflict", "tag warn"));
    button.append(top);
    const hit = hits && hits[index];
    if (hit && hit.snippet.length) {
      const snip = el("span", undefined, "snippet");
      appendSnippet(snip, hit.snippet);
      button.append(snip);
    }
    const meta = el("span", undefined, "card-meta");
    meta.append(el("span", kindLabel(item.kind), "kind-" + item.kind + " kind"));
    for (const tag of (item.tags || []).slice(0, 4)) meta.append(el("span", "#" + tag, "tag"));
    if (item.updated_ms) meta.append(el("span", new Date(item.updated_ms).toLocaleDateString(), "when"));
    button.append(meta);
    button.addEventListener("click", () => select(index, true));
    li.append(button);
    return li;
  });
  list.replaceChildren(...rows);
  view.selected = -1;
  if (view.current && view.current.id) {
    const at = items.findIndex((i) => i.id === view.current.id);
    if (at >= 0) markSelected(at);
  }
}

function markSelected(index) {
  view.selected = index;
  for (const button of document.querySelectorAll("#card-list button.card")) {
    const on = Number(button.dataset.index) === index;
    button.classList.toggle("selected", on);
    if (on) {
      button.setAttribute("aria-current", "true");
      button.scrollIntoView({ block: "nearest" });
    } else button.removeAttribute("aria-current");
  }
}

// A padlock drawn as inline SVG (no emoji font needed); decorative: the kind says "protected".
function lockIcon() {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("class", "lock-icon");
  svg.setAttribute("aria-hidden", "true");
  const body = document.createElementNS(ns, "rect");
  for (const [k, v] of Object.entries({ x: "3", y: "7", width: "10", height: "7.5", rx: "1.5" })) body.setAttribute(k, v);
  const shackle = document.createElementNS(ns, "path");
  shackle.setAttribute("d", "M5.2 7V5a2.8 2.8 0 0 1 5.6 0v2");
  svg.append(body, shackle);
  return svg;
}

async function select(index, open) {
  if (index < 0 || index >= view.items.length) return;
  const item = view.items[index];
  if (open && view.current && view.current.id === item.id) return markSelected(index);
  if (open && !(await confirmDiscard())) return;
  markSelected(index);
  if (open) openItem(item);
}

// Opens any item the page shows: the editor for ordinary ones, the read-only view otherwise.
function openItem(item) {
  if (item.locked || isProtectedKind(item.kind)) return openLocked(item.id);
  return openCard(item.id);
}

// -- search ------------------------------------------------------------------------------
let searchTimer = null;
let quitLocks = true; // from /api/status: whether the tray locks the vault when it quits

function onSearchInput() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    view.query = $("search").value.trim();
    view.offset = 0;
    refreshList();
  }, SEARCH_DELAY_MS);
}

async function runSearch() {
  const seq = ++view.searchSeq;
  ++view.listSeq; // a page answer arriving now is stale
  const query = view.query;
  setResult("list-note", "Searching…");
  try {
    if (!view.kinds.length) await loadKinds();
    const params = new URLSearchParams({ q: query, kind: view.kind, offset: String(view.offset) });
    const data = await api("/api/search?" + params);
    if (seq !== view.searchSeq || query !== view.query) return; // a newer keystroke won
    let results = data.results;
    if (view.tag) results = results.filter((r) => (r.tags || []).includes(view.tag));
    renderItems(results, results);
    // DT-7: the count is every match, and the pager walks through them a page at a time.
    view.total = data.total;
    view.pageSize = data.limit;
    const total = data.total;
    let count = total ? `${total.toLocaleString()} result${total === 1 ? "" : "s"}` : "No results";
    if (total > data.results.length) {
      count += ` (${(data.offset + 1).toLocaleString()}–${(data.offset + data.results.length).toLocaleString()} shown)`;
    }
    setResult("list-note", `${count} for “${query}”` + (data.partial ? ". Still indexing: results may be incomplete" : ""));
    renderUnsearched(data.conflicted || []);
    renderPager(true);
  } catch (err) {
    if (seq !== view.searchSeq) return;
    $("card-list").replaceChildren();
    setResult("list-note", err.message, "error");
  }
}

// Items in conflict are not in the search index (seed 001): a search that would have matched
// one says so, with the way to resolve it (DT-7).
function renderUnsearched(conflicted) {
  const box = $("search-conflicts");
  box.hidden = !conflicted.length || !view.query;
  if (box.hidden) return;
  const one = conflicted.length === 1;
  $("search-conflicts-text").textContent = one
    ? "1 item in conflict is not searched:"
    : `${conflicted.length.toLocaleString()} items in conflict are not searched:`;
  const link = $("search-conflicts-link");
  link.textContent = one ? "resolve it" : "resolve them";
  link.onclick = async () => {
    if (!one) return show("attention");
    if (await confirmDiscard()) openCard(conflicted[0].id);
  };
}

// -- the editor --------------------------------------------------------------------------
function fieldInput(spec, value) {
  const wrap = el("div", undefined, "field");
  const label = el("label", spec.label);
  label.htmlFor = "field-" + spec.name;
  const input = document.createElement(spec.widget === "textarea" ? "textarea" : "input");
  input.id = "field-" + spec.name;
  input.name = spec.name;
  input.dataset.widget = spec.widget;
  if (spec.widget !== "tags") input.maxLength = spec.max_length;
  if (spec.widget === "tags") input.placeholder = "comma, separated, tags";
  if (spec.required) input.required = true;
  input.value = spec.widget === "tags" ? (value || []).join(", ") : value || "";
  input.addEventListener("input", () => setDirty(true));
  wrap.append(label, input);
  return wrap;
}

function setDirty(dirty) {
  view.dirty = dirty;
  $("dirty").hidden = !dirty;
}

// Unsaved edits are never thrown away silently: every way out of a dirty editor (another
// item, New, Back/Esc, another page, Lock now) asks here first. Resolves true to go on.
function confirmDiscard() {
  if (!view.dirty) return Promise.resolve(true);
  const dialog = $("discard-dialog");
  if (dialog.open) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (discard) => {
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      if (discard) setDirty(false);
      resolve(discard);
    };
    const onClose = () => done(false); // Esc closes the dialog: keep editing
    dialog.addEventListener("close", onClose);
    $("discard-yes").onclick = () => done(true);
    $("discard-keep").onclick = () => done(false);
    dialog.showModal();
  });
}

function showEditor() {
  $("empty").hidden = true;
  $("editor").hidden = false;
  $("app").classList.add("show-detail");
}

async function closeEditor(force) {
  if (!force && !(await confirmDiscard())) return;
  setDirty(false);
  view.openSeq++;
  view.current = null;
  hideChanged();
  $("editor").hidden = true;
  $("empty").hidden = false;
  $("app").classList.remove("show-detail");
  markSelected(-1);
}

function renderFields(spec, values) {
  $("fields").replaceChildren(...spec.fields.map((f) => fieldInput(f, values[f.name])));
}

function renderVersions(card) {
  const box = $("versions");
  box.replaceChildren();
  $("conflict").hidden = !card.conflict;
  if (!card.conflict) return;
  card.versions.forEach((version, i) => {
    const col = el("div", undefined, "version");
    col.dataset.revision = version.revision;
    col.append(el("h3", `Version ${i + 1} · ${version.short_revision}`));
    col.append(el("p", version.fields.title || "(untitled)", "version-title"));
    col.append(el("pre", version.fields.body || "", "version-body"));
    if ((version.fields.tags || []).length) col.append(el("p", version.fields.tags.map((t) => "#" + t).join(" "), "meta"));
    const keep = el("button", "Keep this version", "keep");
    keep.type = "button";
    keep.addEventListener("click", () => resolve(version.revision));
    col.append(el("p", "", "meta version-when"), keep);
    box.append(col);
  });
  // merge.js fills in each version's time and device and offers the line-level merge (DT-8).
  if (typeof conflictShown === "function") conflictShown(card);
}

async function openCard(id, keepTab) {
  setResult("save-result", "");
  $("confirm-delete").hidden = true;
  const kept = keepTab ? currentTab() : null;
  const picks = view.tabPicks;
  try {
    const seq = ++view.openSeq;
    if (!view.kinds.length) await loadKinds();
    const card = await api("/api/cards/" + encodeURIComponent(id));
    if (seq !== view.openSeq) return; // closed, or another item opened, meanwhile
    // A tab the user picked while this item was opening is the one they want for it.
    const tab = view.tabPicks !== picks ? currentTab() : kept;
    const spec = view.kinds.find((k) => k.kind === card.kind);
    view.current = { id: card.id, kind: card.kind, revision: card.revision, conflict: card.conflict, shortId: card.short_id };
    $("locked").hidden = true;
    $("editor").classList.remove("is-locked");
    itemOpened(view.current);
    $("new-kind-label").hidden = true;
    $("card-kind").hidden = false;
    $("card-kind").textContent = kindLabel(card.kind);
    $("card-id").textContent = card.short_id;
    $("card-rev").textContent = card.short_revision;
    renderFields(spec, card.fields);
    renderSecrets(card);
    renderVersions(card);
    $("fields").hidden = card.conflict;
    $("save").hidden = card.conflict;
    $("delete").hidden = false;
    hideChanged();
    setDirty(false);
    showEditor();
    if (tab && tab !== "edit" && !$("tab-" + tab).hidden) selectTab(tab, false);
  } catch (err) {
    setResult("save-result", err.message, "error");
  }
}

// The values `memories secret protect` moved out of this item show in its text as
// {{secret:LABEL}}; their credentials belong to the item (and are not counted under
// Credentials), so the item says how to copy each one. Only labels the page already shows.
const SECRET_PLACEHOLDER = /\{\{secret:([A-Za-z0-9][A-Za-z0-9_.-]{0,63})\}\}/g;

function renderSecrets(card) {
  const labels = new Set();
  for (const value of Object.values(card.fields || {})) {
    if (typeof value === "string") for (const match of value.matchAll(SECRET_PLACEHOLDER)) labels.add(match[1]);
  }
  $("item-secrets").hidden = !labels.size;
  $("item-secret-list").replaceChildren(
    ...[...labels].sort().map((label) => {
      const li = el("li");
      li.append(el("code", label), document.createTextNode(" — "), el("code", `memories sudo && memories copy ${card.short_id}:${label}`));
      return li;
    }),
  );
}

async function newCard() {
  if (!view.open || !(await confirmDiscard())) return;
  if ($("page-cards").hidden) show("cards");
  if (!view.kinds.length) await loadKinds();
  const kind = view.kinds.some((k) => k.kind === view.kind) ? view.kind : "memory";
  view.openSeq++;
  view.current = { isNew: true, kind };
  hideChanged();
  $("item-secrets").hidden = true;
  $("locked").hidden = true;
  $("editor").classList.remove("is-locked");
  itemOpened(view.current);
  $("new-kind").value = kind;
  $("new-kind-label").hidden = false;
  $("card-kind").hidden = true;
  $("card-id").textContent = "new";
  $("card-rev").textContent = "–";
  renderFields(view.kinds.find((k) => k.kind === kind), view.tag ? { tags: [view.tag] } : {});
  $("conflict").hidden = true;
  $("fields").hidden = false;
  $("save").hidden = false;
  $("delete").hidden = true;
  $("confirm-delete").hidden = true;
  setResult("save-result", "");
  setDirty(false);
  markSelected(-1);
  showEditor();
  $("field-title").focus();
}

function collectFields() {
  const fields = {};
  for (const input of document.querySelectorAll("#fields [name]")) {
    fields[input.name] = input.dataset.widget === "tags"
      ? input.value.split(",").map((t) => t.trim()).filter((t) => t)
      : input.value;
  }
  return fields;
}

async function save(event, keepBoth) {
  if (event) event.preventDefault();
  const current = view.current;
  if (!current) return;
  const fields = collectFields();
  // While the save is on its way, a change event for this item may arrive first: live.js waits
  // for this before it decides whether the change was ours.
  let settle;
  view.saving = new Promise((resolve) => { settle = resolve; });
  try {
    if (current.isNew) {
      const kind = $("new-kind").value;
      const made = await api("/api/cards", { method: "POST", body: JSON.stringify({ kind, fields }) });
      setDirty(false);
      await openCard(made.id);
      setResult("save-result", "Created.", "saved");
      refreshList();
      return;
    }
    const body = { base: current.revision, fields };
    if (keepBoth) body.keep_both = true;
    const result = await api("/api/cards/" + encodeURIComponent(current.id), { method: "POST", body: JSON.stringify(body) });
    current.revision = result.revision;
    setDirty(false);
    hideChanged();
    if (result.conflict) {
      setResult("save-result", "Conflict: this item changed elsewhere since you opened it. Both versions were kept; nothing was overwritten. Choose the one to keep below.", "conflict");
      const keep = $("save-result").textContent;
      await openCard(current.id);
      setResult("save-result", keep, "conflict");
    } else {
      setResult("save-result", "Saved revision " + result.short_revision + ".", "saved");
      $("card-rev").textContent = result.short_revision;
    }
    refreshList();
  } catch (err) {
    // DT-7: the engine refused to save over a change made elsewhere; say so where the edit is.
    if (err.code === "stale_base") showChanged("changed");
    else if (err.code === "not_found") showChanged("deleted");
    setResult("save-result", err.message, "error");
  } finally {
    view.saving = null;
    settle();
  }
}

async function removeCard() {
  const current = view.current;
  if (!current || current.isNew) return;
  try {
    await api("/api/cards/" + encodeURIComponent(current.id), { method: "DELETE" });
    closeEditor(true);
    await refreshList();
    setResult("list-note", "Deleted. It stays in the item's history.", "saved");
  } catch (err) {
    setResult("save-result", err.message, "error");
  }
}

async function resolve(revision) {
  const current = view.current;
  if (!current) return;
  // A resolve is our own write: live.js waits for it (as for a save) and then sees the item
  // reopened, instead of reporting it as "changed elsewhere" over the result.
  let settle;
  view.saving = new Promise((done) => { settle = done; });
  try {
    const done = await api("/api/cards/" + encodeURIComponent(current.id) + "/resolve", {
      method: "POST",
      body: JSON.stringify({ keep: revision }),
    });
    await openCard(current.id);
    setResult("save-result", "Resolved: kept one version (revision " + done.short_revision + ").", "saved");
    refreshList();
  } catch (err) {
    setResult("save-result", err.message, "error");
  } finally {
    view.saving = null;
    settle();
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

// -- keyboard ----------------------------------------------------------------------------
function typing(target) {
  return target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement;
}

function onKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
  if ($("discard-dialog").open) return; // the dialog handles its own keys (Esc keeps editing)
  const onVault = !$("page-cards").hidden && view.open;
  if (event.key === "Escape") {
    if (typing(event.target)) {
      if (event.target.id === "search" && event.target.value) {
        event.target.value = "";
        onSearchInput();
      }
      event.target.blur();
    } else if (!$("editor").hidden) {
      // Handled here: without this the browser treats the same Esc as a close request and
      // shuts the "discard?" dialog that closeEditor has just opened.
      event.preventDefault();
      closeEditor(false);
    }
    return;
  }
  if (typing(event.target) || event.target.isContentEditable || !view.open) return;
  if (event.key === "/" || event.key === "n") {
    // From any page: back to the vault (asking first if an edit would be lost there).
    event.preventDefault();
    if (!onVault) show("cards");
    if (event.key === "/") $("search").focus();
    else newCard();
    return;
  }
  if (!onVault) return;
  if (event.key === "j" || event.key === "k") {
    event.preventDefault();
    const step = event.key === "j" ? 1 : -1;
    const next = view.selected < 0 ? 0 : Math.min(Math.max(view.selected + step, 0), view.items.length - 1);
    select(next, true);
  } else if (event.key === "e") {
    if (!$("editor").hidden && $("field-title") && !(view.current && view.current.conflict)) {
      event.preventDefault();
      selectTab("edit", false);
      $("field-title").focus();
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  if (!token()) $("auth-missing").hidden = false;
  // Another page only hides the open item: an unsaved edit is still there on coming back.
  for (const button of document.querySelectorAll("nav .nav")) button.addEventListener("click", () => show(button.dataset.page));
  $("lock").addEventListener("click", async () => {
    if (await confirmDiscard()) post("/api/lock", "list-note", "Locked.");
  });
  $("quit").addEventListener("click", () =>
    post(
      "/api/quit",
      "action-result",
      quitLocks
        ? "The tray is quitting and locks the vault. Unlock again from a new tray or with `memories unlock`."
        : "The tray is quitting; the vault stays unlocked until its idle timer or `memories lock`.",
    ),
  );
  $("search").addEventListener("input", onSearchInput);
  $("new").addEventListener("click", newCard);
  $("back").addEventListener("click", () => closeEditor(false));
  $("editor").addEventListener("submit", save);
  $("delete").addEventListener("click", () => { $("confirm-delete").hidden = false; $("delete-yes").focus(); });
  $("delete-no").addEventListener("click", () => { $("confirm-delete").hidden = true; });
  $("delete-yes").addEventListener("click", removeCard);
  $("new-kind").addEventListener("change", () => { view.current.kind = $("new-kind").value; });
  for (const which of ["first", "prev", "next", "last"]) $("page-" + which).addEventListener("click", () => goPage(which));
  document.addEventListener("keydown", onKey);
  window.addEventListener("beforeunload", (event) => {
    if (!view.dirty) return;
    event.preventDefault(); // the browser asks "Leave site?"; its own wording, no custom text
    event.returnValue = true; // older browsers ask only when this is set
  });
  show("cards");
  pollStatus();
  pollTickets();
});
