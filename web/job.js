/* job.js - the page of one job (#/jobs/ID): its header (name, state,
 * cancel), times, progress, error or pending reason, the Computations
 * timings with their timeline, the Slices it holds drawn on its island,
 * the result preview and the events; the graph, program and processes
 * panels come from their own modules. Draws S.detail; the fetched results
 * are cached in S.results and the cancel button's arming timer is
 * S.armTimer (state.js).
 *
 * Test hooks, kept stable: #job-state carries data-state; timing rows
 * data-comp and data-state. */
import { S } from "./state.js";
import { $, el, has } from "./dom.js";
import { STATE_COLOURS, jobColour, fmtAge, fmtDur, fmtClock, shapeText } from "./format.js";
import { authHeaders, jobPart, TERMINAL } from "./api.js";
import { meshLayout } from "./map.js";
import { renderGraph } from "./graph.js";
import { renderProgram } from "./program.js";
import { renderProcesses } from "./processes.js";

/* The whole job page for S.route.job, or "Loading…" / "not found". */
export function renderJob() {
  var j = S.detail;
  var view = $("view-job");
  if (!j || String(j.id) !== String(S.route.job)) {
    $("job-title").textContent = S.detail === null && S.polls ? "Job " + S.route.job + " not found" : "Loading…";
    $("job-id").textContent = "";
    $("job-state").textContent = "";
    $("job-state").dataset.state = "";
    return;
  }
  view.dataset.state = j.state;
  $("job-dot").style.background = jobColour(j.id);
  $("job-title").textContent = j.name;
  $("job-id").textContent = "#" + j.id;
  var badge = $("job-state");
  badge.textContent = j.state;
  badge.dataset.state = j.state;
  $("cancel").disabled = !!TERMINAL[j.state];

  renderJobMeta(j);
  renderJobProgress(j);
  renderGraph(j);
  renderTimings(j);
  renderJobSlices(j);
  renderResult(j);
  renderProgram(j);
  renderProcesses(j);
  renderEvents(j);
}

/* "priority 0 · attempt 1 of 1 · submitted … · total 6.2 s" */
function renderJobMeta(j) {
  var t = j.times_us || {};
  var meta = [["priority", j.priority], ["attempt", (j.attempt + 1) + " of " + (j.max_retries + 1)],
              ["submitted", fmtClock(t.created)], ["allocated", fmtClock(t.allocated)],
              ["started", fmtClock(t.started)], ["finished", fmtClock(t.finished)]];
  if (t.finished && t.created) meta.push(["total", fmtDur(t.finished - t.created)]);
  else if (t.created) meta.push(["age", fmtAge(Date.now() / 1000 - t.created / 1e6)]);
  var mf = document.createDocumentFragment();
  meta.forEach(function (m) {
    var s = el("span", "", m[0] + " ");
    s.appendChild(el("b", "", m[1]));
    mf.appendChild(s);
  });
  $("job-meta").replaceChildren(mf);
}

/* The progress bar and its text, the error, and why a queued job waits. */
function renderJobProgress(j) {
  var done = Number(j.computations_done) || 0, total = Number(j.computations_total) || 0;
  var shardsDone = 0, shardsTotal = 0;
  (j.computations || []).forEach(function (c) { shardsDone += c.shards_done || 0; shardsTotal += c.shards_total || 0; });
  $("job-bar").style.width = (total ? 100 * done / total : 0) + "%";
  $("job-bar").parentNode.className = "bar big " + j.state;
  $("job-progress-text").textContent = done + " / " + total + " computations · " + shardsDone + " / " + shardsTotal + " shards";
  var errBox = $("job-error");
  errBox.hidden = !j.error;
  errBox.textContent = j.error || "";
  var pend = $("job-pending");
  pend.hidden = !(j.state === "queued" && j.pending_reason);
  pend.textContent = j.pending_reason ? "Waiting: " + j.pending_reason : "";
}

/* One row per computation: wait for its shards, for its inputs, run; and
 * a timeline of those phases on the job's common time axis. */
function renderTimings(j) {
  var comps = j.computations || [];
  var t0 = Infinity, t1 = 0, now = Date.now() * 1000;
  comps.forEach(function (c) {
    var t = c.times_us || {};
    if (t.dispatched) t0 = Math.min(t0, t.dispatched);
    if (t.started) t0 = Math.min(t0, t.started);
    t1 = Math.max(t1, t.finished || (t.dispatched && !TERMINAL[j.state] ? now : 0));
  });
  var span = t1 > t0 ? t1 - t0 : 1;
  var frag = document.createDocumentFragment();
  comps.forEach(function (c) {
    var t = c.times_us || {};
    var tr = el("tr");
    tr.dataset.comp = c.name;
    tr.dataset.state = c.state;
    tr.appendChild(el("td", "", c.name));
    tr.appendChild(el("td", "", c.slice + (c.island ? " · " + c.island : "")));
    tr.appendChild(el("td", "num", has(c.seq) ? c.seq : "–"));
    var sc = el("td", "state-cell");
    var b = el("span", "badge", c.state);
    b.dataset.state = c.state;
    sc.appendChild(b);
    tr.appendChild(sc);
    tr.appendChild(el("td", "num", (c.shards_done || 0) + "/" + c.shards_total));
    tr.appendChild(el("td", "num", t.started && t.dispatched ? fmtDur(t.started - t.dispatched) : "–"));
    tr.appendChild(el("td", "num", t.inputs_ready && t.started ? fmtDur(t.inputs_ready - t.started) : "–"));
    tr.appendChild(el("td", "num", t.finished && t.inputs_ready ? fmtDur(t.finished - t.inputs_ready) : "–"));
    var gc = el("td");
    var g = el("div", "gantt");
    function seg(cls, a, z) {
      if (!a || !z || z < a) return;
      var s = el("span", cls);
      s.style.left = (100 * (a - t0) / span).toFixed(2) + "%";
      s.style.width = Math.max(0.6, 100 * (z - a) / span).toFixed(2) + "%";
      g.appendChild(s);
    }
    var end = t.finished || (c.state === "dispatched" && !TERMINAL[j.state] ? now : 0);
    seg("g-wait", t.dispatched, t.started || end);
    seg("g-in", t.started, t.inputs_ready || end);
    seg("g-run", t.inputs_ready, end);
    g.title = "wait (grey) · inputs (violet) · run (blue)";
    gc.appendChild(g);
    tr.appendChild(gc);
    frag.appendChild(tr);
  });
  document.querySelector("#timings tbody").replaceChildren(frag);
}

/* One card per slice: where it runs and which devices of its island. */
function renderJobSlices(j) {
  var frag = document.createDocumentFragment();
  var doc = j.document || {};
  Object.keys(doc.slices || {}).forEach(function (name) {
    var want = doc.slices[name] || {};
    var got = j.slices && j.slices[name];
    var card = el("div", "slice-card");
    card.appendChild(el("div", "s-title", "slice " + name + " · " + shapeText(want.shape)));
    if (!got) {
      card.appendChild(el("div", "s-sub", TERMINAL[j.state] ? "released" : "not allocated yet" +
                          (want.island ? " (wants " + want.island + ")" : "")));
      frag.appendChild(card);
      return;
    }
    card.appendChild(el("div", "s-sub", "on " + got.island + ", devices " +
                        (got.devices || []).map(function (d) { return d.index; }).join(", ")));
    var isl = S.islands.filter(function (i) { return i.name === got.island; })[0];
    if (isl) {
      var lay = meshLayout(isl.shape);
      var on = new Set((got.devices || []).map(function (d) { return Number(d.index); }));
      var layers = el("div", "layers");
      var per = lay.rows * lay.cols;
      for (var l = 0; l < lay.layers; l++) {
        var mesh = el("div", "mesh");
        mesh.style.setProperty("--cols", lay.cols);
        for (var k = 0; k < per; k++) {
          var cell = el("div", "mini" + (on.has(l * per + k) ? " on" : ""));
          cell.style.setProperty("--job-colour", jobColour(j.id));
          mesh.appendChild(cell);
        }
        layers.appendChild(mesh);
      }
      card.appendChild(layers);
    }
    frag.appendChild(card);
  });
  $("job-slices").replaceChildren(frag);
}

/* Up to 8 shards of each output (shape, sum, first 8 values), fetched
 * once the job succeeded. */
function renderResult(j) {
  var box = $("result");
  var id = String(j.id);
  if (j.state !== "succeeded") {
    box.replaceChildren(el("p", "empty", TERMINAL[j.state] ? "No result: the job " + j.state + "." : "Available once the job succeeded."));
    return;
  }
  var res = jobPart(S.results, id, "result", renderResult);
  if (!res) {
    box.replaceChildren(el("p", "empty", "Loading…"));
    return;
  }
  if (res.loading) return;
  var table = el("table");
  var head = el("tr");
  ["shard", "shape", "sum", "values"].forEach(function (h) { head.appendChild(el("th", "", h)); });
  table.appendChild(head);
  Object.keys(res.outputs || {}).forEach(function (key) {
    var kr = el("tr");
    var kc = el("td", "key", key);
    kc.colSpan = 4;
    kr.appendChild(kc);
    table.appendChild(kr);
    var shards = res.outputs[key] || [];
    shards.slice(0, 8).forEach(function (s) {
      var tr = el("tr");
      tr.appendChild(el("td", "", s.shard));
      tr.appendChild(el("td", "", "[" + (s.shape || []).join(",") + "]"));
      tr.appendChild(el("td", "", has(s.sum) ? Number(s.sum).toPrecision(6).replace(/\.?0+$/, "") : "n/a"));
      var v = Array.isArray(s.values) ? s.values : null;
      tr.appendChild(el("td", "", v ? v.slice(0, 8).map(function (x) { return has(x) ? +Number(x).toPrecision(5) : "NaN"; }).join(" ") +
                                      (v.length > 8 ? " … (" + v.length + ")" : "") : "(large)"));
      table.appendChild(tr);
    });
    if (shards.length > 8) {
      var more = el("tr");
      var mc = el("td", "", "… " + (shards.length - 8) + " more shards");
      mc.colSpan = 4;
      more.appendChild(mc);
      table.appendChild(more);
    }
  });
  box.replaceChildren(table);
}

/* The job's events, newest first, coloured by the state they name. */
function renderEvents(j) {
  var frag = document.createDocumentFragment();
  (j.events || []).slice().reverse().forEach(function (e) {
    var li = el("li");
    var at = Date.parse(e.at);
    li.appendChild(el("span", "e-at", isNaN(at) ? "" : new Date(at).toLocaleTimeString([], { hour12: false })));
    var k = el("span", "e-kind", e.kind);
    k.style.color = STATE_COLOURS[e.kind] || "#79b8ff";
    li.appendChild(k);
    li.appendChild(el("span", "", e.detail));
    frag.appendChild(li);
  });
  $("events").replaceChildren(frag);
}

/* ---- cancel (two clicks: arm, then confirm within 4 s) ---- */

export function disarmCancel() {
  var b = $("cancel");
  b.classList.remove("armed");
  b.textContent = "Cancel job";
  clearTimeout(S.armTimer);
}

/* after: called once the DELETE answered or failed (refresh, live.js). */
function onCancel(after) {
  var b = $("cancel");
  if (!b.classList.contains("armed")) {
    b.classList.add("armed");
    b.textContent = "Confirm cancel";
    S.armTimer = setTimeout(disarmCancel, 4000);
    return;
  }
  disarmCancel();
  b.disabled = true;
  fetch("v1/jobs/" + S.route.job, { method: "DELETE", headers: authHeaders() }).then(function (r) {
    return r.json().catch(function () { return {}; }).then(function (body) {
      if (!r.ok) {
        var box = $("job-error");
        box.hidden = false;
        box.textContent = (body.title || "Error") + " (" + r.status + "): " + (body.detail || "");
      }
    });
  }).catch(function (e) {
    $("job-error").hidden = false;
    $("job-error").textContent = "cancel failed: " + e.message;
  }).then(after);
}

export function initJobPage(refresh) {
  $("cancel").addEventListener("click", function () { onCancel(refresh); });
}
