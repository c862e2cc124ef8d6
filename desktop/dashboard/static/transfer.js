// Import and export from the window (issue 31, DT-9). The page names a format only: POST
// /api/export asks the tray, whose own window takes the destination folder and the vault
// password (the CLI's `memories sudo`), so no password field is ever on this page. POST
// /api/import names nothing: the tray's window asks for the file or folder. The answer says
// whether the job started; its progress and outcome come with every /api/status answer
// ("memories:status"), shown under the buttons and on the Status page. Every value is
// inserted with textContent.
"use strict";

(() => {
  const OUTCOMES = {
    started: "Started; its progress shows below and on the Status page.",
    cancelled: "Cancelled in the tray's window; nothing was changed.",
    busy: "An import or export window or job is already open; finish it first.",
  };

  function importProgress(t) {
    if (t.state === "running") return "Import from " + t.source + " running…";
    if (t.state === "done") {
      let text = "Import from " + t.source + " done: " + t.created + " new, " + t.skipped + " already present";
      if (Number.isInteger(t.links)) text += ", " + t.links + " link(s)";
      if (t.warnings) text += "; " + t.warnings + " file(s) skipped (run memories import in a terminal to see why)";
      return text + ".";
    }
    if (t.state === "failed") return "Import from " + t.source + " failed: " + ((t.error && t.error.message) || "unknown error") + " (" + ((t.error && t.error.code) || "internal") + ")";
    return "";
  }

  function progress(t) {
    if (t.kind === "import") return importProgress(t);
    const fmt = t.format ? " (" + t.format + ")" : "";
    if (t.state === "elevating") return "Export" + fmt + ": checking the password in the tray…";
    if (t.state === "running") return "Export" + fmt + " running into " + t.dir + "…";
    if (t.state === "done") return "Export" + fmt + " done: " + t.exported + " item(s) written to " + t.dir + ".";
    if (t.state === "failed") return "Export" + fmt + " failed: " + ((t.error && t.error.message) || "unknown error") + " (" + ((t.error && t.error.code) || "internal") + ")";
    return "No import or export has run since the tray started.";
  }

  function show(text, cls) {
    const node = $("export-result");
    node.textContent = text;
    node.classList.remove("saved", "error");
    if (cls) node.classList.add(cls);
  }

  async function start(path, body, asking, terminal) {
    const buttons = [$("export-start"), $("import-start")];
    for (const b of buttons) b.disabled = true;
    show(asking);
    try {
      const done = await api(path, { method: "POST", body: JSON.stringify(body) });
      if (done.outcome === "no_dialog") show("This dashboard runs without the tray's windows: in a terminal run " + terminal, "error");
      else show(OUTCOMES[done.outcome] || String(done.outcome), done.outcome === "started" ? "saved" : null);
    } catch (err) {
      show((err.message || "It did not start.") + " Nothing was changed.", "error");
    } finally {
      for (const b of buttons) b.disabled = false;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("export-start").addEventListener("click", () => {
      const fmt = $("export-format").value;
      start("/api/export", { format: fmt }, "The tray's window asks where to export and for the vault password…", "memories sudo && memories export --format " + fmt + " FOLDER");
    });
    $("import-start").addEventListener("click", () => {
      start("/api/import", {}, "The tray's window asks what to import…", "memories import PATH");
    });
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
    $("import-start").hidden = !data.desktop.can_import;
    $("export-none").hidden = Boolean(data.desktop.can_export && data.desktop.can_import);
  });
})();
