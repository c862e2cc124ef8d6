// Tickets page (DT-5): pending remote-exec tickets with their full instruction and fingerprint.
// Approve asks the tray, which shows its own window with the ticket and takes the vault
// password there (DT-6): this page never has a password field. Values are inserted with
// textContent only.
"use strict";

(() => {
  // Requests and elements come from app.js (loaded first): api() carries the token it keeps
  // in sessionStorage and shows the "token missing" notice on a 401; el() sets text only.
  function row(ticket) {
    const item = el("li", undefined, "ticket");
    item.dataset.ticket = ticket.ticket;
    const fields = el("dl");
    for (const [label, value] of [["Target", ticket.target], ["Session", ticket.session + " #" + ticket.seq],
                                  ["Instruction", ticket.instruction], ["Fingerprint", ticket.fingerprint]]) {
      fields.append(el("dt", label));
      const dd = el("dd", value);
      dd.className = "ticket-" + label.toLowerCase();
      fields.append(dd);
    }
    const approve = el("button", "Approve", "ticket-approve primary");
    approve.type = "button";
    const reject = el("button", "Reject", "ticket-reject");
    reject.type = "button";
    const result = el("p", "", "ticket-result");
    result.setAttribute("role", "status");
    const OUTCOMES = {
      approved: ["Approved. The command can run once.", "ok"],
      cancelled: ["Not approved: the tray window was closed.", "error"],
      busy: ["Another approval window is open in the tray; finish that one first.", "error"],
      no_dialog: ["This dashboard has no tray window to ask for the password. Approve in a terminal: memories sudo && memories remote approve "
                  + ticket.ticket, "error"],
    };
    approve.addEventListener("click", async () => {
      approve.disabled = true;
      result.textContent = "Waiting for the tray window: check the ticket there and type the vault password.";
      result.className = "ticket-result";
      try {
        const done = await api("/api/tickets/" + ticket.ticket + "/approve", { method: "POST", body: JSON.stringify({ fingerprint: ticket.fingerprint }) });
        const [text, cls] = OUTCOMES[done.outcome] || ["Approval ended (" + done.outcome + ").", "error"];
        result.textContent = text;
        result.className = "ticket-result " + cls;
        if (done.outcome !== "approved") approve.disabled = false;
      } catch (err) {
        const refused = { wrong_password: "Refused: the password typed in the tray window was wrong.",
                          rate_limited: "Refused: too many password attempts. Wait a minute, then try again." };
        result.textContent = refused[err.code] || err.message || "Approval failed.";
        result.className = "ticket-result error";
        approve.disabled = err.code === "ticket_used" || err.code === "session_closed";
      }
    });
    reject.addEventListener("click", async () => {
      try {
        await api("/api/tickets/" + ticket.ticket + "/reject", { method: "POST", body: "{}" });
        result.textContent = "Rejected.";
        result.className = "ticket-result ok";
      } catch (err) {
        result.textContent = err.message || "Reject failed.";
        result.className = "ticket-result error";
      }
    });
    item.append(fields, approve, reject, result);
    return item;
  }

  // On a change-feed reload a row the user acted on here (its result line says so) stays
  // with its outcome until the next Reload; a row whose ticket left the pending list
  // elsewhere (approved in a terminal, rejected by the agent, its session closed) goes; a new
  // ticket is added. Rows still pending are kept as they are, so a reload never resets an
  // approval that is waiting for the tray window.
  function reconcile(list, tickets, keepActed) {
    const pending = new Set(tickets.map((t) => t.ticket));
    for (const item of [...list.children]) {
      const acted = item.querySelector(".ticket-result").textContent !== "";
      if (!pending.has(item.dataset.ticket) && !(acted && keepActed)) item.remove();
    }
    const shown = new Set([...list.children].map((item) => item.dataset.ticket));
    for (const ticket of tickets) if (!shown.has(ticket.ticket)) list.append(row(ticket));
    return pending.size;
  }

  async function load(keepActed) {
    const list = document.getElementById("ticket-list");
    const note = document.getElementById("ticket-note");
    if (!list) return;
    try {
      const data = await api("/api/tickets");
      const pending = reconcile(list, data.tickets, keepActed === true);
      note.textContent = pending ? "" : "No pending tickets.";
    } catch (err) {
      note.textContent = err.message || "Tickets are unavailable.";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const nav = document.getElementById("nav-tickets");
    if (nav) nav.addEventListener("click", () => load(false));
    const reload = document.getElementById("ticket-reload");
    if (reload) reload.addEventListener("click", () => load(false));
    // live.js relays the change feed's "tickets" event (a count only): the open page re-reads
    // its list so a ticket proposed or settled elsewhere shows without pressing Reload.
    document.addEventListener("memories:tickets", () => {
      const page = document.getElementById("page-tickets");
      if (page && !page.hidden) load(true);
    });
  });
})();
