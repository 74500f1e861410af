/* app.js - the dashboard's entry module (index.html loads only this one):
 * one page, five views (cluster, queue, utilization, submit, one job),
 * chosen by the URL's hash. It routes, wires each view's controls, starts
 * the clocks and the live updates. State lives in state.js; each view
 * draws in its own module:
 *   map.js (islands), cards.js (summary, spark), jobs.js (jobs table),
 *   queue.js, job.js (+ graph.js, program.js, processes.js),
 *   utilization.js (+ chart.js), submit.js; live.js fetches and redraws;
 *   api.js, dom.js, format.js are shared.
 * It writes S.route (and drops S.detail when another job opens). */
import { S } from "./state.js";
import { TERMINAL } from "./api.js";
import { initMap } from "./map.js";
import { renderSpark } from "./cards.js";
import { initJobsTable, tickAges } from "./jobs.js";
import { renderJob, disarmCancel, initJobPage } from "./job.js";
import { renderProcesses } from "./processes.js";
import { renderUtil, initUtilization } from "./utilization.js";
import { initSubmit } from "./submit.js";
import { refresh, loadUtil, startStream } from "./live.js";

const SAFETY_MS = 10000;   /* a slow refresh regardless of the stream */

/* "#/", "#/queue", "#/utilization", "#/submit" or "#/jobs/ID". */
function parseRoute() {
  var h = location.hash.replace(/^#\/?/, "");
  var m = /^jobs\/(\d+)/.exec(h);
  if (m) return { view: "job", job: Number(m[1]) };
  if (h === "queue" || h === "utilization" || h === "submit") return { view: h, job: 0 };
  return { view: "cluster", job: 0 };
}

/* Shows the hash's view, draws what it can from S at once, and refreshes. */
function onRoute() {
  var r = parseRoute();
  var changedJob = r.job !== S.route.job;
  S.route = r;
  if (changedJob) { S.detail = null; disarmCancel(); }
  document.body.dataset.view = r.view;
  document.querySelectorAll("main > .view").forEach(function (v) {
    v.hidden = v.dataset.view !== r.view;
  });
  document.querySelectorAll(".tabs a").forEach(function (a) {
    a.classList.toggle("on", a.dataset.tab === r.view);
  });
  if (r.view === "utilization") renderUtil();
  if (r.view === "job") { renderJob(); }
  refresh();
  window.scrollTo(0, 0);
}

/* Every second: ages tick, the spark's time axis slides, and a live job's
 * processes are asked for again (processes start, write and exit without
 * changing their job). */
function tick() {
  tickAges();
  renderSpark();
  if (S.route.view === "job" && S.detail && !TERMINAL[S.detail.state]) renderProcesses(S.detail);
}

initMap();
initJobsTable(refresh);
initJobPage(refresh);
initUtilization(loadUtil);
initSubmit(refresh);
window.addEventListener("hashchange", onRoute);
setInterval(tick, 1000);
setInterval(refresh, SAFETY_MS);

onRoute();
loadUtil(true);
startStream();
