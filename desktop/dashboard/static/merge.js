// Conflicts (issue 31, DT-8): each version's time and device, and a line-level merge the user
// edits before saving it as the resolution. The server proposes the merge (a three-way merge
// against the common base revision, conflicting lines between <<<<<<< / ======= / >>>>>>>);
// the page shows it in a textarea and sends back what the user made of it. Uses app.js's
// helpers (api, el, $, view, openCard, setResult, refreshList); every value is inserted as text.
"use strict";

let mergeState = null; // {id, heads} of the proposal on screen

function whenWritten(ms) {
  return typeof ms === "number" ? new Date(ms).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" }) : "time unknown";
}

function conflictLines(text) {
  return text.split("\n").filter((line) => line.startsWith("<<<<<<<")).length;
}

function showLeft() {
  const left = conflictLines($("merge-body").value);
  $("merge-left").textContent = left
    ? `${left} conflict${left === 1 ? "" : "s"} left: edit the lines between <<<<<<< and >>>>>>> into the text you want.`
    : "No conflict markers left.";
}

// Called by app.js whenever an item in conflict is shown.
async function conflictShown(card) {
  $("merge").hidden = true;
  $("merge-open").hidden = false;
  setResult("merge-result", "");
  mergeState = null;
  let proposal;
  try {
    proposal = await api("/api/cards/" + encodeURIComponent(card.id) + "/merge");
  } catch (err) {
    $("merge-open").hidden = true;
    return;
  }
  if (!view.current || view.current.id !== card.id) return; // another item opened meanwhile
  for (const side of proposal.sides) {
    const col = [...document.querySelectorAll("#versions .version")].find((node) => node.dataset.revision === side.revision);
    if (col) col.querySelector(".version-when").textContent = `${whenWritten(side.created_ms)} · ${side.author}`;
  }
  mergeState = { id: card.id, heads: proposal.heads, proposal };
}

function openMerge() {
  if (!mergeState) return;
  const { proposal } = mergeState;
  const base = proposal.base
    ? `Merged against their common version ${proposal.base.short_revision} (${whenWritten(proposal.base.created_ms)}, ${proposal.base.author}).`
    : "The history has no common version of the two: every line that differs is a conflict.";
  const changed = proposal.conflicts
    ? ` ${proposal.conflicts} place${proposal.conflicts === 1 ? "" : "s"} changed on both sides.`
    : " The changes do not overlap.";
  $("merge-summary").textContent = base + changed + (proposal.title_conflict ? " The title changed on both sides; check it." : "");
  $("merge-title").value = proposal.merged.title;
  $("merge-tags").value = proposal.merged.tags.join(", ");
  $("merge-body").value = proposal.merged.body;
  showLeft();
  $("merge").hidden = false;
  $("merge-open").hidden = true;
  $("merge-body").focus();
}

async function saveMerge() {
  if (!mergeState) return;
  const id = mergeState.id;
  const tags = $("merge-tags").value.split(",").map((t) => t.trim()).filter(Boolean);
  const fields = { title: $("merge-title").value, tags, body: $("merge-body").value };
  // Our own write: live.js waits for it (as for a save) instead of reporting "changed elsewhere".
  let settle;
  view.saving = new Promise((done) => { settle = done; });
  $("merge-save").disabled = true;
  try {
    const done = await api("/api/cards/" + encodeURIComponent(id) + "/merge", {
      method: "POST",
      body: JSON.stringify({ heads: mergeState.heads, fields }),
    });
    await openCard(id);
    setResult("save-result", "Resolved: saved the merge as a new version (revision " + done.short_revision + ").", "saved");
    refreshList();
  } catch (err) {
    setResult("merge-result", err.message, "error");
  } finally {
    $("merge-save").disabled = false;
    view.saving = null;
    settle();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("merge-open").addEventListener("click", openMerge);
  $("merge-save").addEventListener("click", saveMerge);
  $("merge-cancel").addEventListener("click", () => {
    $("merge").hidden = true;
    $("merge-open").hidden = false;
  });
  $("merge-body").addEventListener("input", showLeft);
  for (const id of ["merge-title", "merge-tags"]) {
    // Enter in a one-line field would submit the editor's form (its Save is for a single version).
    $(id).addEventListener("keydown", (event) => {
      if (event.key === "Enter") event.preventDefault();
    });
  }
});
