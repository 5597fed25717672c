// Refreshes the overview's live part every few seconds.  The page works
// without it: this only saves pressing reload.  It fetches the same page
// and swaps in its [data-live] section; nothing else on the page changes.
(function () {
  "use strict";
  var script = document.currentScript;
  var every = parseInt((script && script.getAttribute("data-refresh-ms")) || "0", 10);
  if (!(every > 0) || !window.fetch || !window.DOMParser) { return; }
  function refresh() {
    if (document.hidden) { return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("[data-live]");
        var live = document.querySelector("[data-live]");
        if (fresh && live) { live.replaceWith(fresh); }
      })
      .catch(function () { /* the next round tries again */ });
  }
  window.setInterval(refresh, every);
})();
