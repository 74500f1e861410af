/* cards.js - the summary cards at the top of the cluster view (devices
 * busy, running jobs, queued, workers), the queue tab's count, and the
 * 15-minute sparkline of busy devices. Draws from S (state.js); owns no
 * state. */
import { S } from "./state.js";
import { $, svg } from "./dom.js";
import { fmtAge } from "./format.js";

/* The four counts, each with a line of detail, and the queue tab's badge. */
export function renderCards() {
  var busy = 0, total = 0, down = 0;
  S.islands.forEach(function (i) {
    busy += i.allocated || 0; down += i.down || 0; total += (i.devices || []).length;
  });
  $("card-busy").textContent = busy + " / " + total;
  $("card-busy-sub").textContent = (total ? Math.round(100 * busy / total) : 0) + "% · " + down + " down";
  var running = S.jobs.filter(function (j) { return j.state === "running" || j.state === "allocated"; });
  $("card-running").textContent = String(running.length);
  $("card-running-sub").textContent = running.length ? running.slice(0, 3).map(function (j) { return j.name; }).join(", ") : "idle";
  $("card-queued").textContent = String(S.queued.length);
  var oldest = S.queued.reduce(function (m, j) { return Math.min(m, j.times_us ? j.times_us.created : Infinity); }, Infinity);
  $("card-queued-sub").textContent = S.queued.length ? "oldest waiting " + fmtAge((Date.now() * 1000 - oldest) / 1e6) : "nothing waiting";
  var live = 0, stale = 0;
  S.workers.forEach(function (w) { if (w.state === "live") { live++; if (w.heartbeat_age_s > w.lease_s / 2) stale++; } });
  $("card-workers").textContent = String(live);
  $("card-workers-sub").textContent = stale ? stale + " late heartbeat" : "all heartbeating";
  var qc = $("queue-count");
  qc.textContent = String(S.queued.length);
  qc.classList.toggle("hot", S.queued.length > 0);
}

/* Busy devices over all islands in the last 15 min, from S.util's samples. */
export function renderSpark() {
  var box = $("spark");
  var sm = S.util.samples, now = Date.now() * 1000, from = now - 15 * 60e6;
  var total = 0;
  Object.keys(S.util.islands).forEach(function (n) { total += S.util.islands[n]; });
  var pts = sm.filter(function (s) { return s.t >= from; }).map(function (s) {
    var b = 0;
    Object.keys(s.busy || {}).forEach(function (n) { b += s.busy[n]; });
    return [240 * (s.t - from) / (now - from), 46 - 44 * (total ? b / total : 0)];
  });
  var f = [];
  if (pts.length > 1) {
    var d = pts.map(function (p, i) { return (i ? "L" : "M") + p[0].toFixed(1) + "," + p[1].toFixed(1); }).join(" ");
    f.push(svg("path", { d: d + " L" + pts[pts.length - 1][0].toFixed(1) + ",46 L" + pts[0][0].toFixed(1) + ",46 z",
                         fill: "#58a6ff", "fill-opacity": 0.15 }));
    f.push(svg("path", { d: d, fill: "none", stroke: "#58a6ff", "stroke-width": 1.5, "vector-effect": "non-scaling-stroke" }));
  }
  box.replaceChildren.apply(box, f);
}
