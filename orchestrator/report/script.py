"""The page's script, inlined into every page so a report file needs no network.

Small and hand-written: it sorts and filters the trial table, opens a trial's detail in a
drawer (`#trial=<job>/<trial>`), and, on a served page only, polls `api/state` and swaps in
the new content when a job changed.
"""

from __future__ import annotations

JS = r"""
(function () {
  "use strict";
  var body = document.body;
  var live = body.dataset.live === "1";
  var state = {};  // per job: filters and sort, kept across live refreshes

  function jobState(job) {
    if (!state[job]) state[job] = {filters: {}, sort: null, desc: false};
    return state[job];
  }

  function num(v) { return v === "" || v === undefined ? NaN : parseFloat(v); }

  function matches(tr, f) {
    var d = tr.dataset;
    if (f.status && d.status !== f.status) return false;
    if (f.category && d.category !== f.category) return false;
    var r = num(d.reward);
    if (f.reward === "some" && isNaN(r)) return false;
    if (f.reward === "none" && !isNaN(r)) return false;
    if (f.reward === "zero" && r !== 0) return false;
    if (f.reward === "positive" && !(r > 0)) return false;
    if (f.seconds && !(num(d.total) >= parseFloat(f.seconds))) return false;
    if (f.text) {
      var hay = (d.trial + " " + d.task + " " + d.error).toLowerCase();
      if (hay.indexOf(f.text.toLowerCase()) < 0) return false;
    }
    return true;
  }

  function apply(section) {
    var job = section.dataset.job, s = jobState(job), f = s.filters;
    section.querySelectorAll("[data-filter]").forEach(function (el) {
      if (el.tagName === "BUTTON") {
        el.classList.toggle("active", f[el.dataset.filter] === el.dataset.value);
      } else if ((f[el.dataset.filter] || "") !== el.value) {
        el.value = f[el.dataset.filter] || "";
      }
    });
    var tbody = section.querySelector("table.trials tbody");
    if (!tbody) return;
    var rows = Array.prototype.slice.call(tbody.rows), shown = {}, n = 0;
    if (s.sort) {
      var numeric = section.querySelector('th[data-key="' + s.sort + '"]').dataset.num === "1";
      rows.sort(function (a, b) {
        var x = a.dataset[s.sort], y = b.dataset[s.sort], c;
        if (numeric) {
          x = num(x); y = num(y);
          c = isNaN(x) ? (isNaN(y) ? 0 : 1) : isNaN(y) ? -1 : x - y;
        } else {
          c = x < y ? -1 : x > y ? 1 : 0;
        }
        return s.desc ? -c : c;
      });
      rows.forEach(function (tr) { tbody.appendChild(tr); });
    }
    section.querySelectorAll("th[data-key]").forEach(function (th) {
      th.classList.toggle("asc", th.dataset.key === s.sort && !s.desc);
      th.classList.toggle("desc", th.dataset.key === s.sort && s.desc);
    });
    rows.forEach(function (tr) {
      var ok = matches(tr, f);
      tr.classList.toggle("hide", !ok);
      if (ok) { shown[tr.dataset.trial] = true; n++; }
    });
    section.querySelectorAll(".lane").forEach(function (lane) {
      lane.classList.toggle("hide", !shown[lane.dataset.trial]);
    });
    var count = section.querySelector(".filters .shown");
    if (count) count.textContent = "showing " + n + " of " + rows.length;
  }

  function wire(root) {
    root.querySelectorAll("section.job").forEach(function (section) {
      var job = section.dataset.job;
      section.querySelectorAll("th[data-key]").forEach(function (th) {
        th.addEventListener("click", function () {
          var s = jobState(job);
          s.desc = s.sort === th.dataset.key ? !s.desc : false;
          s.sort = th.dataset.key;
          apply(section);
        });
      });
      section.querySelectorAll("input[data-filter], select[data-filter]").forEach(function (el) {
        el.addEventListener("input", function () {
          jobState(job).filters[el.dataset.filter] = el.value;
          apply(section);
        });
      });
      section.querySelectorAll("button[data-filter]").forEach(function (el) {
        el.addEventListener("click", function () {
          var f = jobState(job).filters, key = el.dataset.filter;
          f[key] = f[key] === el.dataset.value ? "" : el.dataset.value;
          apply(section);
          section.querySelector(".table-box").scrollIntoView({block: "start"});
        });
      });
      apply(section);
    });
  }

  var drawer = document.getElementById("drawer");
  var drawerBody = document.getElementById("drawer-body");
  var fetched = {};

  function closeDrawer() {
    drawer.hidden = true;
    drawerBody.textContent = "";
    if (location.hash.indexOf("#trial=") === 0) {
      history.replaceState(null, "", location.pathname + location.search);
    }
  }

  function show(html) {
    drawerBody.innerHTML = html;
    drawer.hidden = false;
    drawer.scrollTop = 0;
  }

  function openFromHash(refresh) {
    var m = /^#trial=([^/]+)\/(.+)$/.exec(location.hash);
    if (!m) { if (!drawer.hidden) closeDrawer(); return; }
    var job = decodeURIComponent(m[1]), trial = decodeURIComponent(m[2]);
    var key = job + "/" + trial;
    var inline = document.getElementById("detail-" + key);
    if (inline) { show(inline.innerHTML); return; }
    if (!live) { show("<p>No trial " + "<code></code> in this report.</p>");
      drawerBody.querySelector("code").textContent = key; return; }
    if (fetched[key] && !refresh) { show(fetched[key]); return; }
    fetch("trial?job=" + encodeURIComponent(job) + "&id=" + encodeURIComponent(trial))
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { fetched[key] = html; show(html); })
      .catch(function (e) {
        show("<p>Could not load the trial (" + String(e).replace(/</g, "") + ").</p>");
      });
  }

  document.getElementById("drawer-close").addEventListener("click", closeDrawer);
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && !drawer.hidden) closeDrawer();
  });
  window.addEventListener("hashchange", function () { openFromHash(false); });

  wire(document);
  openFromHash(false);

  if (live) {
    var fingerprint = body.dataset.fingerprint;
    var poll = function () {
      fetch("api/state", {cache: "no-store"})
        .then(function (r) { return r.json(); })
        .then(function (st) {
          var next = st.running ? 2000 : 10000;
          if (st.fingerprint === fingerprint) return next;
          return fetch("?part=main", {cache: "no-store"}).then(function (r) { return r.text(); })
            .then(function (html) {
              fingerprint = st.fingerprint;
              var main = document.getElementById("main");
              main.innerHTML = html;
              wire(main);
              fetched = {};
              if (!drawer.hidden) openFromHash(true);
              var note = document.getElementById("updated");
              if (note) note.textContent = "updated " + new Date().toLocaleTimeString();
              return next;
            });
        })
        .catch(function () { return 10000; })
        .then(function (next) { setTimeout(poll, next); });
    };
    setTimeout(poll, 2000);
  }
})();
"""
