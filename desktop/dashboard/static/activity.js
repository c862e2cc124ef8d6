// Activity page (issue 17): the last 24 hours of the audit log as time, who, operation and
// item titles — never content. Values are inserted with textContent only.
"use strict";

(() => {
  // Requests and elements come from app.js (loaded first): api() carries the token it keeps
  // in sessionStorage and shows the "token missing" notice on a 401; el() sets text only.
  // The desktop's own requests carry a client label (engine/service/caller.py); say them as names.
  const WHO_TEXT = { dashboard: "Dashboard", tray: "Tray" };

  // The audit log names operations as the engine does (`card_read`); a person reads what happened.
  // Unknown ones fall back to their words; the raw name stays in the cell's title and data-op.
  const OP_TEXT = {
    put: "Added", edit: "Edited", delete: "Deleted", get: "Opened", search: "Searched", diff: "Compared versions",
    export: "Exported", file_add: "Added a file", file_edit: "Changed a file's details", file_get: "Downloaded a file", card_read: "Opened a card", login_secret: "Read a login's password",
    credential_copy: "Copied a secret", run_bound: "Ran a program with secrets", "job.plan": "Planned a signing job",
    "job.run": "Ran a signing job", job_run: "Ran a signing job", backup: "Made a backup", restore: "Restored a backup",
    import: "Imported", login_import_batch: "Imported logins", login_new: "Added a login",
    protected_card: "Added a protected card", protect_secret: "Protected a value", "credential.create": "Added a credential",
    init: "Created the vault", vault_new: "Added a vault", device_join: "A device joined", policy_change: "Changed who has access",
    sync_serve: "Synced with a device", sync_token_new: "Made a sync token", sync_token_revoke: "Revoked a sync token",
    cloud_add: "Added cloud sync", cloud_remove: "Removed cloud sync", cloud_login: "Signed in to cloud storage",
    mcp_grant: "Gave an agent access", mcp_revoke: "Took an agent's access away", ask: "Answered a question",
    recall_turn: "Recalled a conversation", recall_session: "Recalled a conversation", transcript_show: "Opened a transcript",
    quarantine_show: "Looked at held-back changes", quarantine_discard: "Discarded held-back changes",
    quarantine_reapply: "Applied held-back changes", card_unlink: "Removed a link", audit: "Read the activity log",
    dashboard_activity: "Read the activity log", card_link: "Linked items", card_write: "Saved a card",
    restore_revision: "Restored a version",
  };

  function opText(op) {
    if (Object.prototype.hasOwnProperty.call(OP_TEXT, op)) return OP_TEXT[op];
    const words = String(op).replace(/[._]+/g, " ").trim();
    return words ? words.charAt(0).toUpperCase() + words.slice(1) : "";
  }

  function opCell(op) {
    const cell = el("td", opText(op), "activity-op");
    cell.title = op;
    cell.dataset.op = op;
    return cell;
  }

  function row(entry) {
    const tr = el("tr", undefined, "activity-row");
    const when = entry.ts_ms === null ? "" : new Date(entry.ts_ms).toLocaleTimeString();
    const items = entry.items.map((i) => (i.title === null ? "(deleted item)" : i.title) + (i.kind ? " · " + i.kind : ""));
    tr.append(el("td", when, "activity-time"), el("td", WHO_TEXT[entry.who] || entry.who, "activity-who"), opCell(entry.op),
              el("td", items.join(", "), "activity-items"));
    return tr;
  }

  async function load() {
    const body = document.getElementById("activity-rows");
    const note = document.getElementById("activity-note");
    if (!body) return;
    try {
      const data = await api("/api/activity");
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
