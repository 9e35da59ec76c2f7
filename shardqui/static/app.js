// Live refresh: the queues page and a queue's page ask the dashboard (not the cluster)
// for the counts of its shared refresh loop, once per refresh interval.
"use strict";

(function () {
  const body = document.body;
  const every = Number(body.dataset.refresh) || 5000;

  // level buckets a count by order of magnitude, as level in pages.go does.
  function level(n) {
    let l = 0;
    for (; n > 0 && l < 6; n = Math.floor(n / 10)) l++;
    return l;
  }

  function poll(url, apply) {
    const tick = () => {
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then((r) => r.json())
        .then(apply)
        .catch(() => {}) // the next tick tries again
        .finally(() => setTimeout(tick, every));
    };
    tick();
  }

  function setText(id, v) {
    const el = document.getElementById(id);
    if (el) el.textContent = String(v);
  }

  const queues = document.getElementById("queues");
  if (queues) {
    poll(queues.dataset.api, (data) => {
      for (const q of data.queues || []) {
        const row = queues.querySelector('tr[data-queue="' + CSS.escape(q.name) + '"]');
        if (!row) continue; // a queue created since: it shows on reload
        for (const f of ["due", "scheduled", "in_flight", "retrying", "oldest"]) {
          row.querySelector('[data-field="' + f + '"]').textContent = String(q[f]);
        }
        row.querySelector('[data-field="dead"] a').textContent = String(q.dead);
      }
    });
  }

  const live = document.getElementById("live");
  if (live) {
    poll(live.dataset.api, (v) => {
      const err = document.getElementById("live-error");
      err.hidden = !v.error;
      err.textContent = v.error || "";
      if (!v.pending) return; // no pass has returned yet
      for (const k of ["due", "due_again", "scheduled", "in_flight", "retrying"]) setText("total-" + k, v.total[k]);
      setText("dead", v.dead);
      setText("oldest", v.oldest);
      setText("at", v.at);
      v.pending.forEach((row, s) => {
        row.forEach((n, b) => {
          const td = document.getElementById("c" + s + "-" + b);
          if (!td) return;
          const due = v.due[s][b];
          td.className = "h" + level(n) + (due ? " late" : "") + (b === v.now ? " now" : "");
          td.dataset.pending = String(n);
          td.title = "shard " + s + ", bucket " + b + ": " + n + " pending, " + due + " due";
        });
      });
      drawChart(v.history || []);
    });
  }

  function drawChart(history) {
    if (history.length === 0) return;
    const max = Math.max(1, ...history.map((p) => Math.max(p.due, p.in_flight, p.retrying)));
    const t0 = history[0].at;
    const span = Math.max(1, history[history.length - 1].at - t0);
    for (const k of ["due", "in_flight", "retrying"]) {
      const pts = history.map((p) => ((p.at - t0) / span) * 600 + "," + (118 - (p[k] / max) * 114));
      document.getElementById("line-" + k).setAttribute("points", pts.join(" "));
    }
    setText("chart-max", "(top: " + max + ")");
  }
})();
