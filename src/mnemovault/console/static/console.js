// mnemovault console: the few lines the pages need (no inline script: CSP script-src 'self').
(function () {
  "use strict";
  var csrf = (document.querySelector('meta[name="csrf"]') || {}).content || "";

  // review queue and flagged list: j / k move between items (focus), like a mail client
  var items = Array.prototype.slice.call(document.querySelectorAll("article.item[tabindex]"));
  function focusItem(i) {
    if (!items.length) return;
    i = Math.max(0, Math.min(items.length - 1, i));
    items.forEach(function (el) { el.classList.remove("current"); });
    items[i].classList.add("current");
    items[i].focus();
  }
  document.addEventListener("keydown", function (ev) {
    var t = ev.target;
    if (!items.length || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT")) return;
    var at = items.indexOf(document.activeElement && document.activeElement.closest ?
      document.activeElement.closest("article.item") : null);
    if (ev.key === "j") { focusItem(at + 1); ev.preventDefault(); }
    else if (ev.key === "k") { focusItem(at < 0 ? 0 : at - 1); ev.preventDefault(); }
  });

  // placeholders: one value revealed in place, by an explicit click (audited server-side)
  document.querySelectorAll("form.reveal").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var body = new URLSearchParams(new FormData(form));
      fetch(form.action, {method: "POST", body: body, credentials: "same-origin",
                          headers: {"Accept": "application/json"}})
        .then(function (r) { return r.json().then(function (j) { return [r.ok, j]; }); })
        .then(function (res) {
          var span = form.parentNode;
          var out = document.createElement("strong");
          out.className = res[0] ? "revealed" : "why";
          out.textContent = res[0] ? (res[1].value === null ? "[erased]" : res[1].value) : res[1].error;
          span.replaceChild(out, form);
        });
    });
  });

  // tenant export: follow the job until it is done or failed
  var job = document.getElementById("job");
  if (job && job.dataset.state !== "done" && job.dataset.state !== "failed") {
    var poll = function () {
      fetch(location.pathname + "?format=json", {credentials: "same-origin"})
        .then(function (r) { return r.json(); })
        .then(function (j) {
          job.dataset.state = j.state;
          job.querySelector(".state").textContent = j.state;
          job.querySelector("progress").value = j.progress.percent;
          job.querySelector(".pct").textContent = Math.round(j.progress.percent) + "%";
          if (j.state !== "done" && j.state !== "failed") setTimeout(poll, 1500);
          else location.reload();
        });
    };
    setTimeout(poll, 1500);
  }

  // tenant delete: the grace period's countdown
  var cd = document.getElementById("countdown");
  if (cd) {
    var left = parseInt(cd.dataset.seconds, 10);
    var show = function () {
      var d = Math.floor(left / 86400), h = Math.floor(left % 86400 / 3600),
          m = Math.floor(left % 3600 / 60), s = left % 60;
      cd.textContent = d + " days " + h + " h " + m + " min " + s + " s";
    };
    show();
    setInterval(function () { if (left > 0) { left -= 1; show(); } }, 1000);
  }
  void csrf;
})();
