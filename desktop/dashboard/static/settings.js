// Settings page (issue 31, DT-9): idle lock, lock on screen lock, clipboard clear time, theme,
// the tray's transcript watcher (AG-11) and start at login. Each control saves on change (a number when the field is left or Enter
// is pressed) through POST /api/settings; the engine checks and stores it, and the answer or
// the typed error shows under the control. The theme applies to the page at once and at every
// load. Uses app.js's helpers (api, $); every value is inserted with textContent.
"use strict";

(() => {
  const NUMBERS = ["idle_lock_minutes", "clipboard_clear_seconds"];
  const CHECKS = ["lock_on_screen_lock", "start_at_login"];
  const CHOICES = ["theme", "transcript_watcher"]; // radio groups named after their setting

  function applyTheme(theme) {
    if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
    else delete document.documentElement.dataset.theme;
  }

  function result(name, text, cls) {
    const node = $("result-" + name);
    node.textContent = text;
    node.classList.remove("saved", "error");
    if (cls) node.classList.add(cls);
  }

  function fill(data) {
    const settings = data.settings;
    for (const name of NUMBERS) {
      $("set-" + name).value = String(settings[name].value);
      $("set-" + name).removeAttribute("aria-invalid");
    }
    for (const name of CHECKS) $("set-" + name).checked = settings[name].value === true;
    for (const name of CHOICES) {
      for (const radio of document.querySelectorAll(`input[name="${name}"]`)) radio.checked = radio.value === settings[name].value;
    }
    for (const name of [...NUMBERS, ...CHECKS, ...CHOICES]) $("where-" + name).textContent = "Stored in " + settings[name].stored_in;
    $("screen-lock-how").textContent = data.screen_lock.how;
    $("set-lock_on_screen_lock").disabled = !data.screen_lock.implemented;
    applyTheme(settings.theme.value);
  }

  async function load() {
    try {
      const data = await api("/api/settings");
      if (!data.available) {
        $("settings-form").hidden = true;
        $("settings-note").textContent = "The settings show when the engine answers: " + data.message;
        return;
      }
      $("settings-form").hidden = false;
      fill(data);
      $("settings-note").textContent = data.tray ? "" : "The screen-lock setting acts while the tray runs; this dashboard runs without one.";
    } catch (err) {
      $("settings-note").textContent = err.message || "The settings are unavailable.";
    }
  }

  async function save(name, value, control) {
    result(name, "Saving…");
    try {
      const done = await api("/api/settings", { method: "POST", body: JSON.stringify({ name, value }) });
      if (control) control.removeAttribute("aria-invalid");
      const shown = typeof done.value === "boolean" ? (done.value ? "on" : "off") : String(done.value);
      result(name, "Saved: " + shown + ".", "saved");
      if (name === "theme") applyTheme(done.value);
      if (name === "start_at_login" && done.stored_in) $("where-start_at_login").textContent = "Stored in " + done.stored_in;
    } catch (err) {
      if (control && control.type === "checkbox") control.checked = !control.checked; // it did not change
      else if (control) control.setAttribute("aria-invalid", "true");
      result(name, (err.message || "Not saved.") + " Nothing was changed.", "error");
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    load(); // the theme applies at every load, whichever page is shown
    $("nav-settings").addEventListener("click", load);
    document.addEventListener("memories:engine-open", load); // an engine that was away at load
    $("settings-form").addEventListener("submit", (event) => event.preventDefault());
    for (const name of NUMBERS) {
      const input = $("set-" + name);
      // The field's text as typed ("" when the browser cannot read a number): the engine says what is wrong.
      input.addEventListener("change", () => save(name, input.value.trim() === "" ? "" : Number(input.value), input));
    }
    for (const name of CHECKS) {
      const box = $("set-" + name);
      box.addEventListener("change", () => save(name, box.checked, box));
    }
    for (const name of CHOICES) {
      for (const radio of document.querySelectorAll(`input[name="${name}"]`)) {
        radio.addEventListener("change", () => radio.checked && save(name, radio.value, null));
      }
    }
  });
})();
