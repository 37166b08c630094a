// acta dashboard: a little progressive enhancement; every page works without it.
// 1. Actions ask in a dialog (confirm()) instead of a confirmation page.
// 2. Pages marked data-live refresh their content every few seconds (paused while the
//    tab is hidden, or by the button).
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.dataset ? form.dataset.confirm : undefined;
  if (!question) return;
  if (!window.confirm(question)) {
    event.preventDefault();
    return;
  }
  const flag = form.querySelector("input[name=confirmed]");
  if (flag) flag.value = "1";
});

(function live() {
  const seconds = Number(document.body.dataset.live || 0);
  if (!seconds) return;
  const toggle = document.getElementById("live-toggle");
  let paused = false;
  if (toggle) {
    toggle.hidden = false;
    toggle.addEventListener("click", () => {
      paused = !paused;
      toggle.textContent = paused ? "Resume refresh" : "Pause refresh";
    });
  }
  async function refresh() {
    if (paused || document.hidden) return;
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin" });
      if (!response.ok || response.redirected) return;
      const html = await response.text();
      const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
      const current = document.getElementById("live");
      if (fresh && current) current.replaceWith(fresh);
    } catch (_) {
      // The next tick tries again; a stale page is better than a broken one.
    }
  }
  window.setInterval(refresh, seconds * 1000);
})();
