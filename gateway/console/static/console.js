// The Ignara console's only script (served from the gateway; the CSP allows no other):
// asks before destructive changes. Every page works without it.
"use strict";
document.addEventListener("submit", (event) => {
  const button = event.submitter;
  if (button && button.classList.contains("danger") && !window.confirm(button.textContent + "?")) {
    event.preventDefault();
  }
});

// Live updates: where a page has an element with data-source (the dashboard's live
// table), follow the gateway's event stream (relayed by the console with the session's
// key) and, a moment after any event, fetch that element's HTML again. The relay answers
// 204 where the gateway has no stream, and EventSource then stops asking. Where the
// gateway refuses one (too many open, say), the relay sends one "unavailable" event: the
// page says why above the table, and asks again when the relay said to (retry: true)
// or stops (retry: false). The next event clears the notice.
const EVENTS = ["submitted", "admitted", "dispatched", "running", "preempted", "requeued",
  "finished", "failed", "cancelled", "config", "message"];
const live = document.querySelectorAll("[data-source]");
if (live.length > 0 && window.EventSource) {
  const stream = new EventSource("/console/events");
  let timer = null;
  const refresh = () => {
    live.forEach((element) => {
      fetch(element.dataset.source, { credentials: "same-origin" })
        .then((response) => (response.ok ? response.text() : Promise.reject(response.status)))
        .then((html) => { element.innerHTML = html; element.dataset.refreshed = String(Date.now()); })
        .catch(() => {});
    });
  };
  let notice = null;
  EVENTS.forEach((name) => stream.addEventListener(name, () => {
    if (notice) { notice.remove(); notice = null; }
    clearTimeout(timer);
    timer = setTimeout(refresh, 300);
  }));
  stream.addEventListener("unavailable", (event) => {
    let refusal = {};
    try { refusal = JSON.parse(event.data); } catch (error) { refusal = {}; }
    if (!notice) {
      notice = document.createElement("div");
      notice.className = "note";
      notice.dataset.testid = "live-notice";
      live[0].before(notice);
    }
    const message = String(refusal.message || "the gateway gave no event stream");
    notice.textContent = refusal.retry
      ? "Live updates paused: " + message + ". This page will ask again shortly."
      : "Live updates stopped: " + message + ". Reload the page to try again.";
    if (!refusal.retry) { stream.close(); }
  });
  window.addEventListener("beforeunload", () => stream.close());
}
