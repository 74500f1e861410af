/* processes.js - the job page's Processes panel, for jobs whose
 * computations run users' programs (DESIGN Part F): one row per process
 * and attempt (worker, pid, state, exit code, run time) and the output of
 * the selected one. The selection (S.procSel) and the one-request-at-a-
 * time flags (S.procsBusy, S.procsAgain) live in state.js.
 *
 * Test hooks, kept stable: rows carry data-key "attempt/computation/process". */
import { S } from "./state.js";
import { $, el, has } from "./dom.js";
import { fmtAge, fmtDur } from "./format.js";
import { getJSON, authHeaders } from "./api.js";

const LOG_TAIL_CHARS = 65536;   /* the page shows the newest 64 Ki characters */

/* Asks for the job's processes on every render of a job with run
 * computations (renders follow changes); one request in flight. */
export function renderProcesses(j) {
  var runs = ((j.document || {}).computations || []).filter(function (c) { return c.run; });
  $("procs-panel").hidden = runs.length === 0;
  if (!runs.length) return;
  if (S.procsBusy) { S.procsAgain = true; return; }
  var id = String(j.id);
  S.procsBusy = true;
  getJSON("v1/jobs/" + id + "/processes").then(function (r) {
    if (!S.detail || String(S.detail.id) !== id) return;
    drawProcesses(id, r.processes || []);
  }).catch(function () { /* the next render retries */ }).then(function () {
    S.procsBusy = false;
    if (S.procsAgain && S.detail) { S.procsAgain = false; renderProcesses(S.detail); }
  });
}

function procKey(p) { return [p.attempt, p.computation, p.process].join("/"); }

/* The rows, keeping the selected process when it is still listed, else
 * selecting the newest attempt's first; then that process's output. */
function drawProcesses(id, procs) {
  if (!S.procSel || S.procSel.job !== id ||
      !procs.some(function (p) { return procKey(p) === S.procSel.key; })) {
    var newest = procs.reduce(function (m, p) { return Math.max(m, p.attempt); }, -1);
    var first = procs.filter(function (p) { return p.attempt === newest; })[0];
    S.procSel = first ? { job: id, key: procKey(first), p: first } : null;
  }
  var frag = document.createDocumentFragment();
  procs.forEach(function (p) {
    var tr = el("tr", S.procSel && S.procSel.key === procKey(p) ? "sel" : "");
    tr.dataset.key = procKey(p);
    var exit = has(p.exit_code) ? String(p.exit_code) : has(p.signal) ? "signal " + p.signal : "";
    var ran = has(p.ended_at_us) ? fmtDur(p.ended_at_us - p.started_at_us) :
              fmtAge(Date.now() / 1000 - p.started_at_us / 1e6);
    [p.attempt + 1, p.computation || p.comp, p.process, (p.host || "?") + " (" + p.worker + ")",
     p.pid, p.state, exit, ran].forEach(function (v, i) {
      var td = el("td", [0, 2, 4, 6, 7].indexOf(i) >= 0 ? "num" : "", String(v));
      if (i === 5) {
        td.className = "p-state";
        td.dataset.state = p.state === "exited" && p.exit_code !== 0 ? "failed" : p.state;
      }
      tr.appendChild(td);
    });
    tr.addEventListener("click", function () {
      S.procSel = { job: id, key: procKey(p), p: p };
      drawProcesses(id, procs);
    });
    frag.appendChild(tr);
  });
  $("procs").tBodies[0].replaceChildren(frag);
  loadProcessLog(id);
}

/* The selected process's output (plain GET: the page re-asks on every
 * change, a follow would hold one connection per open page). */
function loadProcessLog(id) {
  var sel = S.procSel;
  if (!sel) {
    $("proc-log-title").textContent = "Output";
    $("proc-log").textContent = "";
    return;
  }
  var p = sel.p;
  $("proc-log-title").textContent = "Output of " + (p.computation || p.comp) + " process " + p.process +
    " (attempt " + (p.attempt + 1) + ")";
  var url = "v1/jobs/" + id + "/logs?computation=" + encodeURIComponent(p.computation || "") +
    "&process=" + p.process + "&attempt=" + p.attempt;
  fetch(url, { cache: "no-store", headers: authHeaders() }).then(function (r) {
    return r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status));
  }).then(function (text) {
    if (S.procSel !== sel) return;
    var box = $("proc-log");
    var atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.textContent = text.length > LOG_TAIL_CHARS ?
      "… (" + (text.length - LOG_TAIL_CHARS) + " earlier characters)\n" + text.slice(-LOG_TAIL_CHARS) : text;
    if (atEnd) box.scrollTop = box.scrollHeight;
  }).catch(function () { /* the next render retries */ });
}
