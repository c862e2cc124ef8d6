// The window stays current (SPEC DT-7). One stream of change events from the engine, relayed
// by the dashboard on /api/events (server-sent events read with fetch, so the bearer token
// goes in a header as on every other call). Events carry IDs and kinds only; what a page
// shows is then read through the ordinary routes. The list, the counts and tags, an open
// item and the Needs-attention view follow the CLI, agents, imports and syncs by themselves.
// Every value is inserted with textContent, never as HTML.
"use strict";

const LIVE = {
  connected: false,
  everConnected: false,
  retryMs: 1000,
  refreshTimer: null,
  refreshing: false,
  refreshAgain: false,
  syncFailed: false, // from the last /api/attention: the last sync session failed
};
const LIVE_TEXT = { connecting: "Connecting…", live: "Live", reconnecting: "Reconnecting…", offline: "Engine not reachable" };
const REFRESH_DELAY_MS = 250;

function setLive(state) {
  const node = $("live-state");
  node.dataset.state = state;
  $("live-text").textContent = LIVE_TEXT[state];
}

// -- the stream --------------------------------------------------------------------------
async function connectLive() {
  setLive(LIVE.everConnected ? "reconnecting" : "connecting");
  let response;
  try {
    response = await fetch("/api/events", {
      headers: { Authorization: "Bearer " + token(), Accept: "text/event-stream" },
      cache: "no-store",
    });
  } catch (err) {
    return retryLive();
  }
  if (!response.ok || !response.body) {
    if (response.status === 401) $("auth-missing").hidden = false;
    return retryLive();
  }
  LIVE.retryMs = 1000;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let at;
      while ((at = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        const event = parseBlock(block);
        if (event) onLiveEvent(event);
      }
    }
  } catch (err) {
    // the dashboard stopped or the connection broke: reconnect below
  }
  LIVE.connected = false;
  retryLive();
}

function retryLive() {
  setLive(LIVE.everConnected ? "reconnecting" : "connecting");
  setTimeout(connectLive, LIVE.retryMs);
  LIVE.retryMs = Math.min(LIVE.retryMs * 2, 10000);
}

function parseBlock(block) {
  let data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!data) return null; // a comment (keep-alive)
  try {
    return JSON.parse(data);
  } catch (err) {
    return null;
  }
}

function onLiveEvent(event) {
  switch (event.type) {
    case "hello":
      // A (re)connected stream: anything may have changed while it was down.
      LIVE.connected = true;
      setLive("live");
      if (LIVE.everConnected) resyncAll();
      LIVE.everConnected = true;
      loadAttentionCount();
      loadTicketCount();
      break;
    case "item":
      scheduleRefresh();
      openItemChanged(event);
      break;
    case "items":
      scheduleRefresh();
      recheckOpenItem();
      break;
    case "counts":
      scheduleRefresh();
      break;
    case "attention":
      renderAttentionCount(event);
      if (!$("page-attention").hidden) loadAttention();
      break;
    case "job":
      // A sync session ended: it may have brought conflicts, or failed.
      if ((event.job === "sync" || event.job === "cloud-sync") && event.state !== "running") {
        loadAttentionCount();
        if (!$("page-attention").hidden) loadAttention();
      }
      break;
    case "session":
      if (event.state === "unlocked") resyncAll();
      break;
    case "tickets":
      if (Number.isInteger(event.pending)) renderTicketCount(event.pending);
      document.dispatchEvent(new CustomEvent("memories:tickets"));
      break;
    case "resync":
      resyncAll();
      break;
    case "engine":
      setLive("offline");
      break;
    default:
      break;
  }
}

function resyncAll() {
  setLive("live");
  scheduleRefresh();
  recheckOpenItem();
  loadAttentionCount();
  loadTicketCount();
  document.dispatchEvent(new CustomEvent("memories:tickets"));
  if (!$("page-attention").hidden) loadAttention();
}

// Many events in a burst (an import commits in batches) make one reload of the list, and
// never two at once: a change during a reload makes one more when it ends.
function scheduleRefresh() {
  clearTimeout(LIVE.refreshTimer);
  LIVE.refreshTimer = setTimeout(runRefresh, REFRESH_DELAY_MS);
}

async function runRefresh() {
  if (!view.open || $("page-cards").hidden) return; // the vault page reloads when shown again
  if (LIVE.refreshing) {
    LIVE.refreshAgain = true;
    return;
  }
  LIVE.refreshing = true;
  try {
    await refreshList();
  } finally {
    LIVE.refreshing = false;
    if (LIVE.refreshAgain) {
      LIVE.refreshAgain = false;
      scheduleRefresh();
    }
  }
}

// -- the open item -----------------------------------------------------------------------
function currentTab() {
  const on = document.querySelector("#tabs [aria-selected='true']");
  return on ? on.id.replace(/^tab-/, "") : "edit";
}

async function openItemChanged(event) {
  const current = view.current;
  if (!current || current.isNew || current.locked || current.id !== event.id) return;
  if (view.saving) await view.saving; // our own save may be what this event reports
  if (view.current !== current || event.revision === current.revision) return;
  itemChangedElsewhere(current, event.change === "deleted");
}

// After a bulk change or a reconnect: is the open item still at the revision the page holds?
async function recheckOpenItem() {
  const current = view.current;
  if (!current || current.isNew || current.locked || !view.open) return;
  if (view.saving) await view.saving;
  try {
    const card = await api("/api/cards/" + encodeURIComponent(current.id));
    if (view.current === current && card.revision !== current.revision) itemChangedElsewhere(current, false);
  } catch (err) {
    if (view.current === current && err.code === "not_found") itemChangedElsewhere(current, true);
  }
}

// Nothing typed here yet: show the new version at once. Unsaved edits: never replace them
// silently; a banner says what happened and offers the two ways on.
function itemChangedElsewhere(current, deleted) {
  if (deleted) return showChanged("deleted");
  if (!view.dirty) {
    openCard(current.id, true).then(() => {
      if (view.current && view.current.id === current.id) setResult("save-result", "Updated: this item was changed elsewhere.", "saved");
    });
    return;
  }
  showChanged("changed");
}

function showChanged(kind) {
  const deleted = kind === "deleted";
  setResult("save-result", "");
  $("changed-banner").hidden = false;
  $("changed-banner").dataset.kind = kind;
  $("changed-title").textContent = deleted ? "This item was deleted elsewhere" : "This item was changed elsewhere";
  $("changed-text").textContent = deleted
    ? "It stays in its history. Your unsaved text is still here to copy; it cannot be saved onto a deleted item."
    : "A newer version was saved in a terminal, by an agent or on another device while you were editing. Saving will not overwrite it: load the new version (your unsaved edits are discarded), or keep both and choose later.";
  $("changed-load").hidden = deleted;
  $("changed-keep").hidden = deleted || !view.dirty;
  $("changed-close").hidden = !deleted;
  $("save").disabled = deleted;
}

function hideChanged() {
  $("changed-banner").hidden = true;
  $("save").disabled = false;
}

// -- Needs attention ---------------------------------------------------------------------
function renderAttentionCount(summary) {
  if (summary.sync_failed !== undefined) LIVE.syncFailed = summary.sync_failed;
  const cloud = (summary.not_arriving || 0) + (summary.not_taken || 0) > 0 ? 1 : 0;
  const synced = LIVE.syncFailed ? 1 : 0;
  const total = (summary.conflicts || 0) + (summary.quarantined || 0) + (summary.forks || 0) + cloud + synced;
  const count = $("attention-count");
  count.textContent = String(total);
  count.hidden = total === 0;
}

async function loadAttentionCount() {
  if (!view.open) return;
  try {
    renderAttention(await api("/api/attention"), $("page-attention").hidden);
  } catch (err) {
    // locked or not running: the gate says so; the count stays as it was
  }
}

async function loadAttention() {
  if (!view.open) {
    $("attention-note").textContent = "The vault is locked; unlock it to see what needs attention.";
    return;
  }
  try {
    renderAttention(await api("/api/attention"), false);
  } catch (err) {
    $("attention-note").textContent = err.message;
  }
}

function commandLine(text) {
  const code = el("code", text, "attention-command");
  return code;
}

function renderAttention(data, countOnly) {
  const delivery = data.cloud_delivery;
  renderAttentionCount({
    conflicts: data.conflicts.length,
    quarantined: data.quarantine.count,
    forks: data.forks.count,
    not_arriving: delivery.not_arriving,
    not_taken: delivery.not_taken,
    sync_failed: Boolean(data.sync_failed),
  });
  if (countOnly) return;
  $("attention-note").textContent = "";
  const list = $("attention-conflict-list");
  list.replaceChildren(
    ...data.conflicts.map((item) => {
      const li = el("li", undefined, "attention-item");
      li.dataset.id = item.id;
      const head = el("div", undefined, "attention-head");
      head.append(el("span", item.title || "(untitled)", "attention-item-title"), el("span", kindLabel(item.kind), "pill"));
      const when = item.changed_ms ? " · last changed " + new Date(item.changed_ms).toLocaleString() : "";
      li.append(head, el("p", `${item.versions} versions${when}`, "meta"));
      const act = el("div", undefined, "attention-act");
      if (item.resolve_here) {
        const open = el("button", "Resolve…", "primary small");
        open.type = "button";
        open.addEventListener("click", async () => {
          if (!(await confirmDiscard())) return;
          show("cards");
          openCard(item.id);
        });
        act.append(open, el("span", "Compare the versions and keep one.", "meta"));
      } else {
        act.append(el("span", "Resolve it in a terminal:", "meta"), commandLine(item.command));
      }
      li.append(act);
      return li;
    }),
  );
  $("attention-conflicts").hidden = !data.conflicts.length;
  const other = [];
  if (data.quarantine.count) {
    const n = data.quarantine.count;
    const why = data.quarantine.reasons.map((r) => `${r.reason} (${r.count})`).join("; ");
    other.push({
      key: "quarantine",
      title: n === 1 ? "1 revision held back by a sync" : `${n.toLocaleString()} revisions held back by a sync`,
      text: "Written by a device that may no longer write to the vault. They are not in the vault until you review them: reapply or discard each (needs sudo)." + (why ? " Why: " + why + "." : ""),
      command: "memories quarantine list",
    });
  }
  if (data.forks.count) {
    other.push({
      key: "forks",
      title: data.forks.count === 1 ? "A vault's members changed on two devices" : `${data.forks.count} vault member changes made on two devices`,
      text: "An owner keeps one branch; until then the vault follows the safer one.",
      command: "memories vault forks",
    });
  }
  if (data.sync_failed) {
    other.push({
      key: "sync",
      title: "The last sync did not finish",
      text: "It ended in an error or left a vault unmerged, so this device may be missing another's changes. Sync again; the status shows each session's outcome.",
      command: "memories sync status",
    });
  }
  if (delivery.not_arriving || delivery.not_taken) {
    other.push({
      key: "cloud_delivery",
      title: deliveryText(delivery).replace(/ \(run .*\)$/, ""),
      text: "A cloud sync retries what is missing by its content address; if this stays, the other device may not be syncing.",
      command: "memories cloud sync",
    });
  }
  $("attention-other-list").replaceChildren(
    ...other.map((entry) => {
      const li = el("li", undefined, "attention-item");
      li.dataset.kind = entry.key;
      li.append(el("p", entry.title, "attention-item-title"), el("p", entry.text, "meta"));
      const act = el("div", undefined, "attention-act");
      act.append(el("span", "In a terminal:", "meta"), commandLine(entry.command));
      li.append(act);
      return li;
    }),
  );
  $("attention-other").hidden = !other.length;
  $("attention-clear").hidden = data.conflicts.length > 0 || other.length > 0;
}

document.addEventListener("DOMContentLoaded", () => {
  $("changed-load").addEventListener("click", () => {
    const current = view.current;
    if (!current) return;
    setDirty(false);
    openCard(current.id, true);
  });
  $("changed-keep").addEventListener("click", () => save(null, true));
  $("changed-close").addEventListener("click", () => closeEditor(true));
  if (token()) connectLive();
});
