// The desk's only script: keeps an open page current. Every 2 s it asks whether any case changed
// since the page was drawn (one small JSON answer); if so it fetches the page again and swaps the
// part marked data-live, keeping focus and what is being typed. No framework, no inline script.
(function () {
  "use strict";
  var live = document.querySelector("[data-live]");
  if (!live) return;
  var mark = live.getAttribute("data-live");
  var busy = false;
  function typing() {
    var el = document.activeElement;
    return el && live.contains(el) && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT") && el.value;
  }
  function tick() {
    if (busy || document.hidden) return;
    busy = true;
    fetch("/desk/changes?since=" + encodeURIComponent(mark), {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body || !body.changed || typing()) return null;
        return fetch(window.location.href, {credentials: "same-origin"}).then(function (r) { return r.ok ? r.text() : null; });
      })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector("[data-live]");
        if (!fresh) return;
        live.innerHTML = fresh.innerHTML;
        mark = fresh.getAttribute("data-live");
        live.setAttribute("data-live", mark);
        var status = document.getElementById("live-status");
        if (status) status.textContent = "Updated just now.";
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }
  setInterval(tick, 2000);
})();
