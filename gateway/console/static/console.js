// The Ignara console's only script (served from the gateway; the CSP allows no other):
// asks before destructive changes. Every page works without it.
"use strict";
document.addEventListener("submit", (event) => {
  const button = event.submitter;
  if (button && button.classList.contains("danger") && !window.confirm(button.textContent + "?")) {
    event.preventDefault();
  }
});
