/* live.js - keeping the page current: fetches what every view shows
 * (islands, workers, jobs, the queue, the open job, job documents,
 * utilization samples) into S and redraws. Live from the event stream
 * (EventSource on v1/events/stream): `change` means something the
 * dashboard shows moved (re-fetch), `sample` that a utilization sample was
 * written (fetch the new samples). While the stream is down the page polls
 * every 2 s (S.pollTimer). Writes S.polls to <body data-polls> and the
 * stream's state to <body data-sse> (test hooks, kept stable). */
import { S } from "./state.js";
import { $ } from "./dom.js";
import { getJSON, TOKEN, TERMINAL } from "./api.js";
import { renderIslands } from "./map.js";
import { renderCards, renderSpark } from "./cards.js";
import { renderJobs } from "./jobs.js";
import { renderQueue } from "./queue.js";
import { renderJob } from "./job.js";
import { renderUtil } from "./utilization.js";

const JOB_LIMIT = 50;
const POLL_MS = 2000;

/* Redraws every view from S (the job page only while it is open). */
function render() {
  renderIslands();
  renderCards();
  renderJobs();
  renderQueue();
  if (S.route.view === "job") renderJob();
}

/* One refresh at a time; a change arriving meanwhile runs one more. */
export function refresh() {
  if (S.inflight) { S.again = true; return; }
  S.inflight = true;
  var jobsUrl = "v1/jobs?limit=" + JOB_LIMIT + (S.filter ? "&state=" + S.filter : "");
  var wants = [getJSON("v1/islands"), getJSON("v1/workers"), getJSON(jobsUrl),
               getJSON("v1/jobs?state=queued&limit=500")];
  if (S.route.view === "job" && S.route.job) wants.push(getJSON("v1/jobs/" + S.route.job).catch(function (e) {
    return { __missing: true, message: e.message };
  }));
  Promise.all(wants).then(function (d) {
    S.islands = Array.isArray(d[0]) ? d[0] : d[0].islands || [];
    S.workers = new Map();
    (d[1].workers || []).forEach(function (w) { S.workers.set(String(w.id), w); });
    S.jobs = d[2].jobs || [];
    S.queued = (d[3].jobs || []).slice();
    if (d[4]) S.detail = d[4].__missing ? null : d[4];
    render();
    S.polls++;
    document.body.dataset.polls = String(S.polls);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString([], { hour12: false });
    if (!S.sseOpen) setConn("polling", "polling");
    return loadDocs();
  }).catch(function (err) {
    setConn("error", "disconnected: " + (err && err.message ? err.message : err));
  }).then(function () {
    S.inflight = false;
    if (S.again) { S.again = false; refresh(); }
  });
}

/* Fetches each listed job's document once (slices asked for) and, for
 * terminal jobs, the slices it was granted; renders the Slices column. */
function loadDocs() {
  var need = [];
  S.jobs.concat(S.queued).forEach(function (j) {
    var c = S.docs.get(String(j.id));
    if (!c || (c.state !== j.state && !TERMINAL[c.state])) need.push(j.id);
  });
  need = need.filter(function (id, i) { return need.indexOf(id) === i; }).slice(0, 60);
  if (!need.length) return null;
  return Promise.all(need.map(function (id) {
    return getJSON("v1/jobs/" + id).then(function (j) {
      S.docs.set(String(id), { doc: j.document, slices: j.slices, state: j.state });
    }).catch(function () { /* gone or transient: retried on the next refresh */ });
  })).then(function () { renderJobs(); renderQueue(); });
}

/* Samples for the spark and the charts: the whole range when `full`, at
 * first or when the range grew, else only those since the last one;
 * samples older than 60 min are dropped. */
export function loadUtil(full) {
  var minutes = Math.max(S.util.minutes, 15);
  var url = "v1/stats/utilization?minutes=" + minutes;
  if (!full && S.util.lastT && S.util.loadedMinutes >= minutes) url += "&since_us=" + S.util.lastT;
  return getJSON(url).then(function (u) {
    var fresh = u.samples || [];
    if (full || !S.util.lastT || S.util.loadedMinutes < minutes) {
      S.util.samples = fresh;
      S.util.loadedMinutes = minutes;
    } else {
      S.util.samples = S.util.samples.concat(fresh);
    }
    S.util.islands = u.islands || {};
    var keepFrom = u.now_us - 60 * 60e6;
    while (S.util.samples.length && S.util.samples[0].t < keepFrom) S.util.samples.shift();
    if (S.util.samples.length) S.util.lastT = S.util.samples[S.util.samples.length - 1].t;
    renderSpark();
    if (S.route.view === "utilization") renderUtil();
  }).catch(function () { /* the next sample retries */ });
}

/* The connection badge in the top bar. */
function setConn(state, text) {
  var c = $("conn");
  c.dataset.conn = state;
  c.textContent = text;
}

/* Opens the event stream (or, without EventSource, polls for good). */
export function startStream() {
  if (!window.EventSource) { S.pollTimer = setInterval(refresh, POLL_MS); return; }
  var es = new EventSource("v1/events/stream" +
                           (TOKEN ? "?access_token=" + encodeURIComponent(TOKEN) : ""));
  es.addEventListener("hello", function () {
    S.sseOpen = true;
    document.body.dataset.sse = "open";
    setConn("live", "live");
    if (S.pollTimer) { clearInterval(S.pollTimer); S.pollTimer = 0; }
    refresh();
    loadUtil(false);
  });
  es.addEventListener("change", function () { refresh(); });
  es.addEventListener("sample", function () { loadUtil(false); });
  es.onerror = function () {
    S.sseOpen = false;
    document.body.dataset.sse = "closed";
    setConn("polling", "reconnecting…");
    /* EventSource retries by itself; until then, poll. */
    if (!S.pollTimer) S.pollTimer = setInterval(function () { refresh(); loadUtil(false); }, POLL_MS);
  };
}
