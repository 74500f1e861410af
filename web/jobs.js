/* jobs.js - the Jobs table of the cluster view: one row per job of the
 * current filter (S.jobs, S.filter), its slices from the fetched documents
 * (S.docs), progress and a locally ticking age. Owns no state.
 *
 * Test hooks, kept stable: rows carry data-job-id and data-state. */
import { S } from "./state.js";
import { $, el } from "./dom.js";
import { jobColour, fmtAge, shapeText } from "./format.js";
import { select } from "./map.js";

/* "a 2×2 west, b 2×2 east": granted island when known, else asked. */
export function slicesText(job) {
  var c = S.docs.get(String(job.id));
  if (!c || !c.doc || !c.doc.slices) return "";
  return Object.keys(c.doc.slices).map(function (name) {
    var want = c.doc.slices[name] || {};
    var got = c.slices && c.slices[name] ? c.slices[name].island : null;
    var where = got ? " " + got : want.island ? " → " + want.island : "";
    return name + " " + shapeText(want.shape) + where;
  }).join(", ");
}

/* A small bar and "done/total" computations. */
function progressBox(done, total) {
  var wrap = el("div", "progress");
  var bar = el("div", "bar");
  var fill = el("span");
  fill.style.width = (total > 0 ? Math.min(100, 100 * done / total) : 0) + "%";
  bar.appendChild(fill);
  wrap.appendChild(bar);
  wrap.appendChild(el("span", "progress-text", done + "/" + total));
  return wrap;
}

/* One row: id with its colour, name (a link to its page), state,
 * priority, slices, progress, age and its error or pending reason. */
function jobRow(job, now) {
  var tr = el("tr");
  var id = String(job.id);
  tr.dataset.jobId = id;
  tr.dataset.state = String(job.state);
  if (id === S.selected) tr.classList.add("sel");
  var idCell = el("td", "num id");
  var dot = el("span", "job-dot");
  dot.style.background = jobColour(job.id);
  idCell.appendChild(dot);
  idCell.appendChild(document.createTextNode(id));
  tr.appendChild(idCell);
  var nameCell = el("td", "name");
  var a = el("a", "", job.name);
  a.href = "#/jobs/" + id;
  nameCell.appendChild(a);
  tr.appendChild(nameCell);
  var stateCell = el("td");
  var badge = el("span", "badge", job.state);
  badge.dataset.state = String(job.state);
  stateCell.appendChild(badge);
  tr.appendChild(stateCell);
  tr.appendChild(el("td", "num", job.priority));
  tr.appendChild(el("td", "slices-cell", slicesText(job)));
  var pc = el("td");
  pc.appendChild(progressBox(Number(job.computations_done) || 0, Number(job.computations_total) || 0));
  tr.appendChild(pc);
  var created = job.times_us && job.times_us.created ? job.times_us.created / 1000 : Date.parse(job.created_at);
  var age = el("td", "num age", fmtAge((now - created) / 1000));
  age.dataset.created = String(created);
  tr.appendChild(age);
  var detail = job.error || job.pending_reason || "";
  var dc = el("td", "detail", detail);
  if (detail) dc.title = detail;
  tr.appendChild(dc);
  return tr;
}

/* The table from S.jobs, as the API listed them for the current filter. */
export function renderJobs() {
  var now = Date.now();
  var frag = document.createDocumentFragment();
  S.jobs.forEach(function (job) { frag.appendChild(jobRow(job, now)); });
  $("jobs-body").replaceChildren(frag);
  $("jobs-empty").hidden = S.jobs.length > 0;
}

/* Ages tick locally between refreshes. */
export function tickAges() {
  var now = Date.now();
  document.querySelectorAll("#jobs-body td.age").forEach(function (td) {
    td.textContent = fmtAge((now - Number(td.dataset.created)) / 1000);
  });
}

/* Click a row: light its job up on the map; double-click: open it. The
 * state filters re-fetch through refresh (live.js). */
export function initJobsTable(refresh) {
  $("jobs-body").addEventListener("click", function (e) {
    if (e.target.closest("a")) return;
    var tr = e.target.closest("tr[data-job-id]");
    if (tr) select(tr.dataset.jobId);
  });
  $("jobs-body").addEventListener("dblclick", function (e) {
    var tr = e.target.closest("tr[data-job-id]");
    if (tr) location.hash = "#/jobs/" + tr.dataset.jobId;
  });
  $("filters").addEventListener("click", function (e) {
    var b = e.target.closest("button[data-filter]");
    if (!b) return;
    S.filter = b.dataset.filter;
    document.querySelectorAll("#filters button").forEach(function (x) { x.classList.toggle("on", x === b); });
    refresh();
  });
}
