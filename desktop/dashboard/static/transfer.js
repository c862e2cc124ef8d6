// Export from the window (issue 31, DT-9). The page names a format only: POST /api/export asks
// the tray, whose own window takes the destination folder and the vault password (the CLI's
// `memories sudo`), so no password field is ever on this page. The answer says whether the job
// started; its progress and outcome come with every /api/status answer ("memories:status"),
// shown under the button and on the Status page. Every value is inserted with textContent.
"use strict";

(() => {
  const OUTCOMES = {
    started: "The export started; its progress shows below and on the Status page.",
    cancelled: "Cancelled in the tray's window; nothing was exported.",
    busy: "An export window or an export is already open; finish it first.",
  };

  function progress(t) {
    const fmt = t.format ? " (" + t.format + ")" : "";
    if (t.state === "elevating") return "Export" + fmt + ": checking the password in the tray…";
    if (t.state === "running") return "Export" + fmt + " running into " + t.dir + "…";
    if (t.state === "done") return "Export" + fmt + " done: " + t.exported + " item(s) written to " + t.dir + ".";
    if (t.state === "failed") return "Export" + fmt + " failed: " + ((t.error && t.error.message) || "unknown error") + " (" + ((t.error && t.error.code) || "internal") + ")";
    return "No export has run since the tray started.";
  }

  function show(text, cls) {
    const node = $("export-result");
    node.textContent = text;
    node.classList.remove("saved", "error");
    if (cls) node.classList.add(cls);
  }

  async function start() {
    const button = $("export-start");
    const fmt = $("export-format").value;
    button.disabled = true;
    show("The tray's window asks where to export and for the vault password…");
    try {
      const done = await api("/api/export", { method: "POST", body: JSON.stringify({ format: fmt }) });
      if (done.outcome === "no_dialog") {
        show("This dashboard runs without the tray's windows: in a terminal run memories sudo && memories export --format " + fmt + " FOLDER", "error");
      } else {
        show(OUTCOMES[done.outcome] || String(done.outcome), done.outcome === "started" ? "saved" : null);
      }
    } catch (err) {
      show((err.message || "The export did not start.") + " Nothing was exported.", "error");
    } finally {
      button.disabled = false;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("export-start").addEventListener("click", start);
  });
  document.addEventListener("memories:status", (event) => {
    const data = event.detail;
    const t = data.transfer || { state: "idle" };
    const text = progress(t);
    for (const id of ["export-progress", "status-transfer"]) {
      const node = $(id);
      node.textContent = text;
      node.dataset.state = t.state;
    }
    $("export-start").hidden = !data.desktop.can_export;
    $("export-none").hidden = Boolean(data.desktop.can_export);
  });
})();
