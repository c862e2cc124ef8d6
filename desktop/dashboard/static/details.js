// Item details (issue 17): the History tab (revisions and a line diff of two), the Links tab
// (links both ways and the neighbourhood, grouped by distance), and the read-only view of
// protected cards, logins and credentials, which shows their title and kind and the terminal
// command that copies their secret, never the secret. Uses app.js's helpers (api, el, $,
// view, ...); every value is inserted with textContent.
"use strict";

const TABS = ["read", "edit", "history", "links"];
const DISTANCE_TEXT = { 1: "One link away", 2: "Two links away" };

// -- tabs --------------------------------------------------------------------------------
function itemOpened(current) {
  const fresh = !current || current.isNew;
  $("tab-history").hidden = fresh;
  $("tab-read").hidden = fresh || !!current.locked;
  $("rendered").replaceChildren();
  $("raw-text").textContent = "";
  $("read-note").textContent = "";
  $("tab-links").hidden = fresh || current.kind === "credential"; // credentials are never linked
  $("tab-edit").textContent = current && current.locked ? "Details" : "Edit";
  $("revisions").replaceChildren();
  $("diff-rows").replaceChildren();
  $("diff-box").hidden = true;
  $("history-note").textContent = "";
  $("restore-note").textContent = "";
  for (const id of ["links-out", "links-in", "hood", "hood-graph"]) $(id).replaceChildren();
  $("links-note").textContent = "";
  selectTab("edit", false);
}

function selectTab(name, focus) {
  for (const tab of TABS) {
    const button = $("tab-" + tab);
    const on = tab === name;
    button.setAttribute("aria-selected", on ? "true" : "false");
    button.tabIndex = on ? 0 : -1;
    $("panel-" + tab).hidden = !on;
    if (on && focus) button.focus();
  }
  if (name === "read") loadRendered();
  if (name === "history") loadHistory();
  if (name === "links") loadLinks();
}

// A tab the user picks (click or arrow keys) counts, so that an item still opening keeps it:
// opening selects Edit when the item arrives, which would otherwise undo a pick made meanwhile.
function pickTab(name, focus) {
  view.tabPicks++;
  selectTab(name, focus);
}

function onTabKey(event) {
  const visible = TABS.filter((t) => !$("tab-" + t).hidden);
  const at = visible.indexOf(event.target.id.replace("tab-", ""));
  let next = null;
  if (event.key === "ArrowRight") next = visible[(at + 1) % visible.length];
  else if (event.key === "ArrowLeft") next = visible[(at - 1 + visible.length) % visible.length];
  else if (event.key === "Home") next = visible[0];
  else if (event.key === "End") next = visible[visible.length - 1];
  if (next) {
    event.preventDefault();
    pickTab(next, true);
  }
}

// -- the Read tab (DT-8): Markdown rendered and sanitized by the server ---------------------
const readView = { seq: 0, raw: false };

async function loadRendered() {
  const current = view.current;
  if (!current || current.isNew || current.locked) return;
  const seq = ++readView.seq;
  $("read-note").textContent = "Rendering…";
  try {
    const data = await api("/api/cards/" + encodeURIComponent(current.id) + "/rendered");
    const card = await api("/api/cards/" + encodeURIComponent(current.id));
    if (seq !== readView.seq || view.current !== current) return;
    // The one place the page inserts HTML: the server's markdown-it output after nh3's
    // allowlist (desktop/dashboard/markdown.py); the CSP forbids any script in it anyway.
    $("rendered").innerHTML = data.html;
    if (!$("rendered").textContent.trim()) $("rendered").replaceChildren(el("p", "This item has no text.", "meta"));
    $("raw-text").textContent = (card.fields && card.fields.body) || "";
    // Counted in the rendered text: a [[…]] inside code is not a link.
    const missing = $("rendered").querySelectorAll(".wikilink.missing").length;
    $("read-note").textContent = missing === 1 ? "1 linked title matches no item." : missing ? `${missing} linked titles match no item.` : "";
    showRaw(readView.raw);
  } catch (err) {
    if (seq === readView.seq) $("read-note").textContent = err.message;
  }
}

function showRaw(raw) {
  readView.raw = raw;
  $("rendered").hidden = raw;
  $("raw-text").hidden = !raw;
  $("read-raw").textContent = raw ? "Show formatted" : "Show raw text";
  $("read-raw").setAttribute("aria-pressed", raw ? "true" : "false");
}

async function onRenderedClick(event) {
  const link = event.target.closest("a");
  if (!link) return;
  const href = link.getAttribute("href") || "";
  if (href.startsWith("#item=")) {
    event.preventDefault();
    const id = href.slice("#item=".length);
    if (!(await confirmDiscard())) return;
    markSelected(view.items.findIndex((i) => i.id === id));
    await openCard(id);
    selectTab("read", false);
    return;
  }
  // Outside links open in the user's browser tab of their own, never inside the dashboard.
  event.preventDefault();
  window.open(link.href, "_blank", "noopener,noreferrer");
}

// -- protected items: title and kind only ------------------------------------------------
async function openLocked(id) {
  setResult("save-result", "");
  $("confirm-delete").hidden = true;
  // The previous item's protected-values block (its `memories copy ID:LABEL` lines) must not
  // stay on screen under this item (issue 27, item 6): cleared before anything is awaited.
  $("item-secrets").hidden = true;
  $("item-secret-list").replaceChildren();
  $("locked-commands").replaceChildren();
  try {
    const seq = ++view.openSeq;
    if (!view.kinds.length) await loadKinds();
    const item = await api("/api/protected/" + encodeURIComponent(id));
    if (seq !== view.openSeq) return; // closed, or another item opened, meanwhile
    view.current = { id: item.id, kind: item.kind, revision: item.revision, locked: true, shortId: item.short_id };
    $("fields").replaceChildren(); // no editor inputs exist for it
    $("conflict").hidden = true;
    $("new-kind-label").hidden = true;
    $("card-kind").hidden = false;
    $("card-kind").textContent = kindLabel(item.kind);
    $("card-id").textContent = item.short_id;
    $("card-rev").textContent = item.short_revision;
    $("locked-title").replaceChildren(lockIcon(), el("span", item.title || "(untitled)"));
    $("locked-commands").replaceChildren(...item.commands.map(commandRow));
    $("locked").hidden = false;
    $("editor").classList.add("is-locked");
    itemOpened(view.current);
    setDirty(false);
    showEditor();
  } catch (err) {
    setResult("save-result", err.message, "error");
  }
}

function commandRow(entry) {
  const li = el("li", undefined, "command");
  li.append(el("span", entry.label, "command-label"));
  const line = el("div", undefined, "command-line");
  line.append(el("code", entry.command));
  const copy = el("button", "Copy command", "ghost small");
  copy.type = "button";
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(entry.command); // the command, never a secret
      copy.textContent = "Copied";
    } catch (err) {
      copy.textContent = "Select and copy it";
    }
  });
  line.append(copy);
  li.append(line);
  return li;
}

// -- history and diff --------------------------------------------------------------------
const revisionView = { id: null, revisions: [], selected: null, seq: 0 };

function when(ms) {
  return ms === null ? "" : new Date(ms).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

async function loadHistory() {
  const current = view.current;
  if (!current || !current.id) return;
  const seq = ++revisionView.seq;
  $("history-note").textContent = "Loading the history…";
  try {
    const data = await api("/api/cards/" + encodeURIComponent(current.id) + "/history");
    if (seq !== revisionView.seq || view.current !== current) return;
    revisionView.id = current.id;
    revisionView.revisions = data.revisions;
    revisionView.diffable = data.diffable;
    const count = data.revisions.length;
    $("history-note").textContent =
      `${count} revision${count === 1 ? "" : "s"}, newest first.` +
      (data.diffable ? " Select one to see what it changed." : " Protected items show their revisions by title only.");
    renderRevisions();
    if (data.diffable && count) pickRevision(data.revisions[0].revision);
    const restored = revisionView.restored;
    if (restored && restored.id === current.id) $("restore-note").textContent = restored.text;
  } catch (err) {
    if (seq === revisionView.seq) $("history-note").textContent = err.message;
  }
}

function renderRevisions() {
  const rows = revisionView.revisions.map((rev) => {
    const li = el("li");
    const button = el("button", undefined, "rev");
    button.type = "button";
    button.dataset.revision = rev.revision;
    const top = el("span", undefined, "rev-top");
    top.append(el("span", when(rev.created_ms), "rev-when"));
    if (rev.head) top.append(el("span", "current", "rev-badge"));
    if (rev.tombstone) top.append(el("span", "deleted", "rev-badge warn"));
    if (rev.parents.length > 1) top.append(el("span", "merge", "rev-badge"));
    button.append(top);
    button.append(el("span", rev.title || "(untitled)", "rev-title"));
    const meta = el("span", undefined, "rev-meta");
    meta.append(el("span", rev.author), el("code", rev.short_revision || ""));
    button.append(meta);
    button.disabled = !revisionView.diffable;
    button.addEventListener("click", () => {
      revisionView.restored = null;
      $("restore-note").textContent = "";
      pickRevision(rev.revision);
    });
    li.append(button);
    return li;
  });
  $("revisions").replaceChildren(...rows);
}

function pickRevision(revision) {
  revisionView.selected = revision;
  for (const button of document.querySelectorAll("#revisions button.rev")) {
    const on = button.dataset.revision === revision;
    button.classList.toggle("selected", on);
    if (on) button.setAttribute("aria-current", "true");
    else button.removeAttribute("aria-current");
  }
  const rev = revisionView.revisions.find((r) => r.revision === revision);
  const select = $("diff-from");
  const before = el("option", "nothing (before the first revision)");
  before.value = "";
  const options = [before];
  for (const other of revisionView.revisions) {
    if (other.revision === revision) continue;
    const option = el("option", `${other.short_revision} · ${when(other.created_ms)} · ${other.title || "(untitled)"}`);
    option.value = other.revision;
    options.push(option);
  }
  select.replaceChildren(...options);
  select.value = rev && rev.parents.length ? rev.parents[0] : ""; // default: what it was based on
  $("diff-to").textContent = rev ? `${rev.short_revision} (${when(rev.created_ms)})` : "";
  // DT-8: any earlier revision with content can come back as a new revision.
  $("restore-rev").hidden = !rev || rev.head || rev.tombstone || !!view.current.conflict;
  $("diff-box").hidden = false;
  loadDiff();
}

async function restoreRevision() {
  const current = view.current;
  const revision = revisionView.selected;
  if (!current || !revision) return;
  if (!(await confirmDiscard())) return;
  $("restore-rev").disabled = true;
  try {
    const done = await api("/api/cards/" + encodeURIComponent(current.id) + "/restore", {
      method: "POST",
      body: JSON.stringify({ revision }),
    });
    // Kept until History has reloaded: reopening the item (here, or the change feed's own
    // reload of a changed item) clears the panel first.
    revisionView.restored = { id: current.id, text: `Restored: it is now revision ${done.short_revision}. The history keeps every version.` };
    await openCard(current.id, true); // the editor now holds the restored text; History reloads
  } catch (err) {
    $("restore-note").textContent = err.message;
  } finally {
    $("restore-rev").disabled = false;
  }
}

async function loadDiff() {
  const current = view.current;
  if (!current || !revisionView.selected) return;
  const seq = ++revisionView.seq;
  const params = new URLSearchParams({ to: revisionView.selected });
  if ($("diff-from").value) params.set("from", $("diff-from").value);
  $("diff-note").textContent = "Comparing…";
  try {
    const data = await api("/api/cards/" + encodeURIComponent(current.id) + "/diff?" + params);
    if (seq !== revisionView.seq || view.current !== current) return;
    renderDiff(data);
  } catch (err) {
    if (seq === revisionView.seq) {
      $("diff-rows").replaceChildren();
      $("diff-note").textContent = err.message;
    }
  }
}

function renderDiff(data) {
  const body = $("diff-rows");
  $("diff").dataset.from = data.from || "";
  $("diff").dataset.to = data.to;
  if (data.too_large) {
    body.replaceChildren();
    $("diff-note").textContent = "Too large to compare here; run memories diff in a terminal.";
    return;
  }
  const added = data.rows.filter((r) => r.op === "+").length;
  const removed = data.rows.filter((r) => r.op === "-").length;
  $("diff-note").textContent = data.rows.length ? `${added} line${added === 1 ? "" : "s"} added, ${removed} removed.` : "No changes between these two.";
  const names = { "+": "added", "-": "removed", " ": "same" };
  body.replaceChildren(
    ...data.rows.map((row) => {
      const tr = el("tr", undefined, "diff-" + (names[row.op] || "hunk"));
      if (row.op === "@") {
        const td = el("td", row.text, "diff-hunk");
        td.colSpan = 4;
        tr.append(td);
        return tr;
      }
      const sign = el("td", row.op === " " ? "" : row.op === "+" ? "+" : "−", "diff-sign");
      sign.append(el("span", names[row.op], "sr-only"));
      tr.append(el("td", row.old ? String(row.old) : "", "diff-no"), el("td", row.new ? String(row.new) : "", "diff-no"), sign,
                el("td", row.text, "diff-text"));
      return tr;
    }),
  );
}

// -- links and neighbourhood -------------------------------------------------------------
async function loadLinks() {
  const current = view.current;
  if (!current || !current.id) return;
  $("links-note").textContent = "Loading links…";
  try {
    const data = await api("/api/cards/" + encodeURIComponent(current.id) + "/links");
    if (view.current !== current) return;
    fillLinks("links-out", data.outgoing, "No links from this item. Add one with memories card link.");
    fillLinks("links-in", data.incoming, "Nothing links here yet.");
    const hood = $("hood");
    hood.replaceChildren();
    for (const group of data.neighbourhood) {
      const section = el("section", undefined, "hood-group");
      const title = el("h4", DISTANCE_TEXT[group.distance] || `${group.distance} links away`, "hood-title");
      title.id = "hood-" + group.distance;
      section.setAttribute("aria-labelledby", title.id);
      const list = el("ul", undefined, "link-list");
      list.append(...group.nodes.map((node) => {
        const li = el("li");
        li.append(nodeButton(node));
        return li;
      }));
      section.append(title, list);
      hood.append(section);
    }
    drawGraph(current, data);
    const none = !data.neighbourhood.length;
    $("links-note").textContent = none
      ? "This item has no links. Link items with memories card link SRC DST --rel RELATION."
      : data.truncated ? "Showing the nearest 200 items." : "";
    hood.hidden = none;
  } catch (err) {
    $("links-note").textContent = err.message;
  }
}

// The neighbourhood as a drawing: the item in the middle, one link away on the inner ring,
// two links away on the outer ring, a line per link. Each node is an SVG link (Tab reaches
// it, Enter opens it) named by its title, kind and distance; the lines and the centre are
// decoration (aria-hidden), the lists above say the same in text.
const SVG_NS = "http://www.w3.org/2000/svg";
const GRAPH = { width: 640, height: 440, rings: [0, 105, 190], label: 22 };

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  return node;
}

function shortTitle(title) {
  const text = title || "(untitled)";
  return text.length > GRAPH.label ? text.slice(0, GRAPH.label - 1) + "…" : text;
}

function graphLayout(rootId, data) {
  const cx = GRAPH.width / 2, cy = GRAPH.height / 2;
  const at = new Map([[rootId, { x: cx, y: cy, angle: 0 }]]);
  const neighbours = new Map();
  for (const edge of data.edges || []) {
    for (const [a, b] of [[edge.src, edge.dst], [edge.dst, edge.src]]) {
      if (!neighbours.has(a)) neighbours.set(a, []);
      neighbours.get(a).push(b);
    }
  }
  for (const group of data.neighbourhood) {
    const ring = GRAPH.rings[Math.min(group.distance, GRAPH.rings.length - 1)];
    // Outer nodes sit near the inner node they hang from, so few lines cross.
    const anchor = (node) => {
      const near = (neighbours.get(node.id) || []).map((id) => at.get(id)).filter(Boolean);
      return near.length ? Math.min(...near.map((p) => p.angle)) : 0;
    };
    const nodes = group.distance > 1 ? [...group.nodes].sort((a, b) => anchor(a) - anchor(b)) : group.nodes;
    const offset = group.distance > 1 ? Math.PI / Math.max(nodes.length, 1) / 2 : 0;
    nodes.forEach((node, i) => {
      const angle = -Math.PI / 2 + offset + (2 * Math.PI * i) / nodes.length;
      at.set(node.id, { x: cx + ring * Math.cos(angle), y: cy + ring * Math.sin(angle), angle: angle + Math.PI / 2 });
    });
  }
  return at;
}

function drawGraph(current, data) {
  const box = $("hood-graph");
  box.replaceChildren();
  box.hidden = !data.neighbourhood.length;
  if (box.hidden) return;
  const at = graphLayout(current.id, data);
  const count = data.neighbourhood.reduce((n, g) => n + g.nodes.length, 0);
  const drawing = svg("svg", {
    viewBox: `0 0 ${GRAPH.width} ${GRAPH.height}`,
    role: "group",
    "aria-label": `Neighbourhood graph: ${count} item${count === 1 ? "" : "s"} within two links`,
    class: "graph",
  });
  const lines = svg("g", { "aria-hidden": "true", class: "graph-lines" });
  for (const edge of data.edges || []) {
    const a = at.get(edge.src), b = at.get(edge.dst);
    if (a && b) lines.append(svg("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y }));
  }
  const centre = svg("g", { "aria-hidden": "true", class: "graph-root" });
  const root = at.get(current.id);
  centre.append(svg("circle", { cx: root.x, cy: root.y, r: 10 }));
  const rootLabel = svg("text", { x: root.x, y: root.y + 26, "text-anchor": "middle" });
  rootLabel.textContent = "This item";
  centre.append(rootLabel);
  drawing.append(lines, centre);
  for (const group of data.neighbourhood) {
    for (const node of group.nodes) {
      const p = at.get(node.id);
      const link = svg("a", {
        href: "#",
        class: "graph-node" + (node.locked ? " locked" : ""),
        "data-id": node.id,
        "aria-label": `${node.title || "(untitled)"}, ${kindLabel(node.kind)}, ${(DISTANCE_TEXT[group.distance] || group.distance + " links away").toLowerCase()}`,
      });
      link.append(svg("circle", { cx: p.x, cy: p.y, r: group.distance === 1 ? 8 : 6 }));
      const label = svg("text", { x: p.x, y: p.y + (p.y < root.y ? -14 : 22), "text-anchor": "middle" });
      label.textContent = shortTitle(node.title);
      link.append(label);
      link.addEventListener("click", (event) => {
        event.preventDefault();
        followLink(node);
      });
      drawing.append(link);
    }
  }
  box.append(drawing);
}

function fillLinks(id, links, emptyText) {
  const list = $(id);
  if (!links.length) {
    list.replaceChildren(el("li", emptyText, "meta"));
    return;
  }
  list.replaceChildren(...links.map((link) => {
    const li = el("li", undefined, "link");
    const weak = link.confidence !== null && link.confidence < 1;
    const rel = el("span", (link.rel || "linked") + (weak ? ` · ${link.confidence}` : ""), "rel");
    if (weak) rel.title = `confidence ${link.confidence}`;
    li.append(rel, nodeButton(link.node));
    return li;
  }));
}

function nodeButton(node) {
  const button = el("button", undefined, "node");
  button.type = "button";
  button.dataset.id = node.id;
  if (node.locked) button.append(lockIcon());
  button.append(el("span", node.title || "(untitled)", "node-title"), el("span", kindLabel(node.kind), "node-kind"));
  button.addEventListener("click", () => followLink(node));
  return button;
}

async function followLink(node) {
  if (!(await confirmDiscard())) return;
  const at = view.items.findIndex((i) => i.id === node.id);
  markSelected(at);
  await openItem(node);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const tab of TABS) {
    $("tab-" + tab).addEventListener("click", () => pickTab(tab, false));
    $("tab-" + tab).addEventListener("keydown", onTabKey);
  }
  $("diff-from").addEventListener("change", loadDiff);
  $("read-raw").addEventListener("click", () => showRaw(!readView.raw));
  $("restore-rev").addEventListener("click", restoreRevision);
  $("rendered").addEventListener("click", onRenderedClick);
});
