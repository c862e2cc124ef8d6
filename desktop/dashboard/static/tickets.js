// Tickets page (DT-5): pending remote-exec tickets with their full instruction and fingerprint.
// Approve asks for the vault password for that one ticket. Values are inserted with
// textContent only. The token is the one app.js moved into sessionStorage.
"use strict";

(() => {
  const TOKEN_KEY = "memories-dashboard-token";

  async function call(path, body) {
    const headers = { Authorization: "Bearer " + (sessionStorage.getItem(TOKEN_KEY) || "") };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, { method: body === undefined ? "GET" : "POST", headers, body, cache: "no-store" });
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
    const password = el("input");
    password.type = "password";
    password.autocomplete = "current-password";
    password.placeholder = "Vault password for this ticket";
    password.className = "ticket-password";
    password.setAttribute("aria-label", "Vault password to approve this ticket");
    const approve = el("button", "Approve", "ticket-approve primary");
    approve.type = "button";
    const reject = el("button", "Reject", "ticket-reject");
    reject.type = "button";
    const result = el("p", "", "ticket-result");
    result.setAttribute("role", "status");
    approve.addEventListener("click", async () => {
      approve.disabled = true;
      try {
        const body = JSON.stringify({ fingerprint: ticket.fingerprint, password: password.value });
        password.value = "";  // never kept in the page
        const done = await call("/api/tickets/" + ticket.ticket + "/approve", body);
        result.textContent = "Approved (" + done.state + ").";
        result.className = "ticket-result ok";
      } catch (err) {
        result.textContent = err.message || "Approval failed.";
        result.className = "ticket-result error";
        approve.disabled = false;
      }
    });
    reject.addEventListener("click", async () => {
      try {
        await call("/api/tickets/" + ticket.ticket + "/reject", "{}");
        result.textContent = "Rejected.";
        result.className = "ticket-result ok";
      } catch (err) {
        result.textContent = err.message || "Reject failed.";
        result.className = "ticket-result error";
      }
    });
    item.append(fields, password, approve, reject, result);
    return item;
  }

  async function load() {
    const list = document.getElementById("ticket-list");
    const note = document.getElementById("ticket-note");
    if (!list) return;
    try {
      const data = await call("/api/tickets");
      list.replaceChildren(...data.tickets.map(row));
      note.textContent = data.tickets.length ? "" : "No pending tickets.";
    } catch (err) {
      note.textContent = err.message || "Tickets are unavailable.";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const nav = document.getElementById("nav-tickets");
    if (nav) nav.addEventListener("click", load);
    const reload = document.getElementById("ticket-reload");
    if (reload) reload.addEventListener("click", load);
  });
})();
