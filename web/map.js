/* map.js - the Islands panel of the cluster view: one mesh of device cells
 * per island (3-D islands as layers), the legend of jobs holding devices,
 * the tooltip naming a device's worker, job and slice, and the selected
 * job lit up on the map. Its cells are built once per island shape and
 * kept in S.islandViews; the selection is S.selected (both in state.js).
 *
 * Test hooks, kept stable: device cells carry data-island, data-index,
 * data-state, data-job ("" when none), data-slice, data-worker,
 * data-holders and data-shared (shared devices). */
import { S, jobName } from "./state.js";
import { $, el, has } from "./dom.js";
import { fmtBytes, jobColour, shapeText } from "./format.js";

const DEVICE_STATES = ["free", "allocated", "down"];

/* How a mesh is laid out: 1-D as one row, 2-D as rows x cols, 3-D as
 * layers of rows x cols (drawn side by side). */
export function meshLayout(shape) {
  var s = Array.isArray(shape) ? shape.map(Number) : [];
  if (s.length === 1) return { layers: 1, rows: 1, cols: s[0] };
  if (s.length === 2) return { layers: 1, rows: s[0], cols: s[1] };
  if (s.length === 3) return { layers: s[0], rows: s[1], cols: s[2] };
  return { layers: 1, rows: 1, cols: 0 };
}
/* Cells shrink so that an island's width stays within about 680 px. */
function cellSize(layout) {
  var across = Math.max(1, layout.cols * layout.layers);
  return Math.max(10, Math.min(38, Math.floor(680 / across) - 4));
}

/* An island's panel and its empty cells, indexed like the API's devices. */
function buildIsland(isl, layout) {
  var root = el("div", "island");
  root.dataset.island = isl.name;
  var head = el("div", "island-head");
  head.appendChild(el("span", "island-name", isl.name));
  head.appendChild(el("span", "island-shape", shapeText(isl.shape) + (layout.layers > 1 ? " (3-D)" : "")));
  var stats = el("span", "island-stats");
  head.appendChild(stats);
  root.appendChild(head);
  var util = el("div", "island-util");
  var utilFill = el("span");
  util.appendChild(utilFill);
  root.appendChild(util);
  var size = cellSize(layout);
  root.style.setProperty("--cell", size + "px");
  var layers = el("div", "layers");
  var cells = [];
  var per = layout.rows * layout.cols;
  for (var l = 0; l < layout.layers; l++) {
    var wrap = el("div", "layer");
    if (layout.layers > 1) wrap.appendChild(el("div", "layer-label", "layer " + l));
    var mesh = el("div", "mesh");
    mesh.style.setProperty("--cols", layout.cols);
    for (var k = 0; k < per; k++) {
      var c = el("div", "device");
      c.dataset.island = isl.name;
      c.dataset.index = String(l * per + k);
      mesh.appendChild(c);
      cells.push(c);
    }
    wrap.appendChild(mesh);
    layers.appendChild(wrap);
  }
  root.appendChild(layers);
  return { el: root, stats: stats, util: utilFill, cells: cells, small: size < 22, devs: [] };
}

/* Jobs holding a device: every holder of a shared one (DESIGN Part D,
 * "jobs"), else its one job. */
function cellHolders(d) {
  if (Array.isArray(d.jobs) && d.jobs.length) return d.jobs.map(String);
  return has(d.job) ? [String(d.job)] : [];
}

/* A shared device is split in one band per holder, in its colour ("other":
 * another tenant's job, grey). */
function shareGradient(holders) {
  var n = holders.length;
  return "linear-gradient(135deg, " + holders.map(function (id, i) {
    return (id === "other" ? "#6e7681" : jobColour(id)) + " " + (100 * i / n).toFixed(1) + "% " + (100 * (i + 1) / n).toFixed(1) + "%";
  }).join(", ") + ")";
}

/* A cell from its device: state, job, slice, worker, holders (and their
 * colours), its label and whether the selected job holds it. */
function updateCell(c, d, small) {
  var state = DEVICE_STATES.indexOf(d.state) >= 0 ? d.state : "down";
  var job = has(d.job) ? String(d.job) : "";
  var holders = cellHolders(d);
  if (c.dataset.state !== state) c.dataset.state = state;
  if (c.dataset.job !== job) c.dataset.job = job;
  c.dataset.slice = d.slice || "";
  c.dataset.worker = has(d.worker) ? String(d.worker) : "";
  c.dataset.holders = holders.join(" ");
  var shared = holders.length > 1 || (holders.length === 1 && d.tenant === "other");
  if (shared) c.dataset.shared = String(holders.length + (d.tenant === "other" ? 1 : 0));
  else delete c.dataset.shared;
  c.style.setProperty("--share-bg", shared ? shareGradient(d.tenant === "other" ? holders.concat(["other"]) : holders) : "");
  var text = state !== "allocated" || small ? "" : holders.length > 1 ? "×" + holders.length : job;
  if (c.textContent !== text) c.textContent = text;
  c.style.setProperty("--job-colour", job ? jobColour(job) : "");
  c.classList.toggle("sel", !!S.selected && holders.indexOf(S.selected) >= 0);
  c.setAttribute("aria-label", deviceLines(c).map(function (l) { return l.join(" "); }).join(", "));
}

/* Draws every island of S.islands (building its cells when new or
 * reshaped, dropping islands gone), its load, and the holders legend. */
export function renderIslands() {
  var container = $("islands");
  var seen = new Set();
  var holders = new Map();
  S.islands.forEach(function (isl) {
    seen.add(isl.name);
    var layout = meshLayout(isl.shape);
    var key = JSON.stringify(isl.shape);
    var view = S.islandViews.get(isl.name);
    if (!view || view.key !== key) {
      if (view) view.el.remove();
      view = buildIsland(isl, layout);
      view.key = key;
      S.islandViews.set(isl.name, view);
    }
    container.appendChild(view.el);
    view.isl = isl;
    (isl.devices || []).forEach(function (d) {
      var c = view.cells[Number(d.index)];
      if (c) updateCell(c, d, view.small);
      cellHolders(d).forEach(function (id) { holders.set(id, (holders.get(id) || 0) + 1); });
    });
    var total = (isl.devices || []).length || 1;
    view.stats.textContent = (isl.allocated || 0) + " busy · " + (isl.free || 0) + " free · " +
      (isl.down || 0) + " down";
    view.util.style.width = (100 * (isl.allocated || 0) / total).toFixed(1) + "%";
  });
  S.islandViews.forEach(function (view, name) {
    if (!seen.has(name)) { view.el.remove(); S.islandViews.delete(name); }
  });
  $("islands-empty").hidden = S.islands.length > 0;
  container.classList.toggle("selecting", !!S.selected);
  renderHolders(holders);
}

/* One button per job holding devices (holders: job id -> device count),
 * in id order; clicking one selects the job. */
function renderHolders(holders) {
  var box = $("holders");
  var frag = document.createDocumentFragment();
  Array.from(holders.keys()).sort(function (a, b) { return a - b; }).forEach(function (id) {
    var b = el("button", "holder" + (id === S.selected ? " sel" : ""));
    b.type = "button";
    b.dataset.job = id;
    var dot = el("span", "job-dot");
    dot.style.background = jobColour(id);
    b.appendChild(dot);
    b.appendChild(document.createTextNode("#" + id + " " + (jobName(id) || "") + " · " + holders.get(id)));
    frag.appendChild(b);
  });
  box.replaceChildren(frag);
}

/* Tooltip lines for a device cell: [key, value] pairs. */
function deviceLines(c) {
  var view = S.islandViews.get(c.dataset.island);
  var d = view && view.isl ? (view.isl.devices || [])[Number(c.dataset.index)] : null;
  if (!d) return [];
  var lines = [["device", c.dataset.island + " #" + d.index + " (" + (d.coords || []).join(",") + ")"],
               ["state", d.state]];
  if (has(d.worker)) {
    var w = S.workers.get(String(d.worker));
    lines.push(["worker", "worker " + d.worker + (w ? " · " + w.host + " pid " + w.pid : "") +
                (has(d.local) ? " · local " + d.local : "")]);
  } else {
    lines.push(["worker", "none (down)"]);
  }
  var holders = cellHolders(d);
  if (holders.length > 1) {
    lines.push(["shared by", holders.map(function (id) {
      return "job " + id + (jobName(id) ? " " + jobName(id) : "");
    }).join(", ")]);
  } else if (has(d.job)) {
    lines.push(["job", "job " + d.job + (jobName(d.job) ? " " + jobName(d.job) : "")]);
    lines.push(["slice", "slice " + (d.slice || "?")]);
  }
  if (d.tenant === "other") lines.push(["tenant", "held by another tenant's job"]);
  /* Device memory (its worker's store cap over its devices) and what
   * shared jobs' holds take of it: what a shared job waiting for memory
   * waits on. */
  if (has(d.memory_bytes)) {
    lines.push(["memory", (has(d.held_bytes) ? fmtBytes(d.held_bytes) + " of " : "") +
                fmtBytes(d.memory_bytes) + (has(d.held_bytes) ? " held by shared jobs" : "")]);
  }
  return lines;
}

function showTooltip(c, x, y) {
  var tt = $("tooltip");
  var frag = document.createDocumentFragment();
  deviceLines(c).forEach(function (l) {
    var row = el("div", "tt-row");
    row.appendChild(el("span", "tt-k", l[0]));
    row.appendChild(el(l[0] === "device" ? "b" : "span", "", l[1]));
    frag.appendChild(row);
  });
  tt.replaceChildren(frag);
  tt.hidden = false;
  var r = tt.getBoundingClientRect();
  tt.style.left = Math.min(x + 14, window.innerWidth - r.width - 8) + "px";
  tt.style.top = Math.min(y + 14, window.innerHeight - r.height - 8) + "px";
}

/* Lights up a job's devices and its row (again: lights nothing). */
export function select(id) {
  S.selected = S.selected === id ? "" : id;
  renderIslands();
  document.querySelectorAll("#jobs-body tr").forEach(function (tr) {
    tr.classList.toggle("sel", tr.dataset.jobId === S.selected);
  });
}

/* Hovering a device shows its tooltip; hovering a device, a job row or a
 * holder button highlights that job's devices and row. Clicking a holder
 * selects its job. */
export function initMap() {
  document.addEventListener("mouseover", function (e) {
    var c = e.target.closest ? e.target.closest(".device") : null;
    if (c) showTooltip(c, e.clientX, e.clientY);
    var row = e.target.closest ? e.target.closest("#jobs-body tr, .holder") : null;
    var job = row ? (row.dataset.jobId || row.dataset.job) : (c ? c.dataset.job : "");
    document.querySelectorAll(".device.hl, #jobs-body tr.hl").forEach(function (n) { n.classList.remove("hl"); });
    if (job) document.querySelectorAll('.device[data-job="' + CSS.escape(job) + '"], #jobs-body tr[data-job-id="' + CSS.escape(job) + '"]')
      .forEach(function (n) { n.classList.add("hl"); });
  });
  document.addEventListener("mousemove", function (e) {
    var c = e.target.closest ? e.target.closest(".device") : null;
    if (c) showTooltip(c, e.clientX, e.clientY);
    else $("tooltip").hidden = true;
  });
  document.addEventListener("mouseleave", function () { $("tooltip").hidden = true; });
  $("holders").addEventListener("click", function (e) {
    var b = e.target.closest(".holder");
    if (b) select(b.dataset.job);
  });
}
