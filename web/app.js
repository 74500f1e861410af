/* Atoll dashboard v0: polls the public API once a second and redraws.
 *
 * Sources (DESIGN.md): GET v1/islands -> {"islands": [...]} (a bare array is
 * accepted too) and GET v1/jobs?limit=50 -> {"jobs": [...], ...}.
 * Test hooks, kept stable: device cells carry data-island, data-index,
 * data-state, data-job ("" when none); job rows carry data-job-id and
 * data-state; <body data-polls> counts successful refreshes.
 * Every text from the API goes through textContent, never innerHTML, since
 * job names are user input. */
(function () {
  "use strict";

  var POLL_MS = 1000;
  var JOB_LIMIT = 50;
  var JOB_STATES = ["queued", "allocated", "running", "succeeded", "failed", "cancelled"];
  var DEVICE_STATES = ["free", "allocated", "down"];

  /* name -> {el, key, cells[]}: island maps are built once per shape and
   * then updated in place, so a refresh never flickers. */
  var islandViews = new Map();
  var polls = 0;

  function $(id) { return document.getElementById(id); }

  function el(tag, className, text) {
    var e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  /* A stable, well-spread colour per job id (golden-angle hues). */
  function jobColour(id) {
    var hue = (Number(id) * 137.508) % 360;
    return "hsl(" + hue.toFixed(1) + " 62% 44%)";
  }

  /* Mesh shape -> how it is drawn: layers side by side, each rows x cols. */
  function meshLayout(shape) {
    var s = Array.isArray(shape) ? shape.map(Number) : [];
    if (s.length === 1) return { layers: 1, rows: 1, cols: s[0] };
    if (s.length === 2) return { layers: 1, rows: s[0], cols: s[1] };
    if (s.length === 3) return { layers: s[0], rows: s[1], cols: s[2] };
    return { layers: 1, rows: 1, cols: 0 };
  }

  /* Cells shrink for big meshes so an island stays about 760 px wide. */
  function cellSize(layout) {
    var across = Math.max(1, layout.cols * layout.layers);
    return Math.max(10, Math.min(34, Math.floor(760 / across) - 3));
  }

  function buildIsland(isl, layout) {
    var root = el("div", "island");
    root.dataset.island = isl.name;
    var head = el("div", "island-head");
    head.appendChild(el("span", "island-name", isl.name));
    head.appendChild(el("span", "island-shape", "[" + (isl.shape || []).join("×") + "]"));
    var stats = el("span", "island-stats");
    head.appendChild(stats);
    root.appendChild(head);
    root.style.setProperty("--cell", cellSize(layout) + "px");

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
    return { el: root, stats: stats, cells: cells, small: cellSize(layout) < 22 };
  }

  function deviceTitle(isl, d) {
    var lines = [isl.name + " device " + d.index + " (" + (d.coords || []).join(",") + "): " + d.state];
    lines.push(d.job !== null && d.job !== undefined ? "job " + d.job +
               (d.slice ? ", slice " + d.slice : "") : "no job");
    lines.push(d.worker !== null && d.worker !== undefined ? "worker " + d.worker +
               (d.local !== null && d.local !== undefined ? " (local " + d.local + ")" : "") : "no worker");
    return lines.join("\n");
  }

  function updateCell(c, isl, d, small) {
    var state = DEVICE_STATES.indexOf(d.state) >= 0 ? d.state : "down";
    var job = d.job !== null && d.job !== undefined ? String(d.job) : "";
    if (c.dataset.state !== state) c.dataset.state = state;
    if (c.dataset.job !== job) c.dataset.job = job;
    var text = state === "allocated" && !small ? job : "";
    if (c.textContent !== text) c.textContent = text;
    c.style.setProperty("--job-colour", job ? jobColour(job) : "");
    c.title = deviceTitle(isl, d);
  }

  function renderIsland(isl, container) {
    var layout = meshLayout(isl.shape);
    var key = JSON.stringify(isl.shape);
    var view = islandViews.get(isl.name);
    if (!view || view.key !== key) {
      if (view) view.el.remove();
      view = buildIsland(isl, layout);
      view.key = key;
      islandViews.set(isl.name, view);
    }
    container.appendChild(view.el);   /* (re)appending keeps API order */
    var devs = Array.isArray(isl.devices) ? isl.devices : [];
    devs.forEach(function (d) {
      var c = view.cells[Number(d.index)];
      if (c) updateCell(c, isl, d, view.small);
    });
    view.stats.textContent = (isl.free || 0) + " free · " + (isl.allocated || 0) +
      " allocated · " + (isl.down || 0) + " down";
  }

  function renderIslands(list, counts) {
    var container = $("islands");
    var seen = new Set();
    list.forEach(function (isl) {
      seen.add(isl.name);
      renderIsland(isl, container);
      DEVICE_STATES.forEach(function (s) { counts[s] += Number(isl[s]) || 0; });
    });
    islandViews.forEach(function (view, name) {
      if (!seen.has(name)) { view.el.remove(); islandViews.delete(name); }
    });
    $("islands-empty").hidden = list.length > 0;
  }

  function formatAge(seconds) {
    if (!isFinite(seconds) || seconds < 0) return "–";
    var s = Math.floor(seconds);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }

  function jobCreatedMs(job) {
    if (job.times_us && job.times_us.created) return job.times_us.created / 1000;
    var t = Date.parse(job.created_at);
    return isNaN(t) ? NaN : t;
  }

  function progressCell(job) {
    var total = Number(job.computations_total) || 0;
    var done = Number(job.computations_done) || 0;
    var td = el("td");
    var wrap = el("div", "progress");
    var bar = el("div", "bar");
    var fill = el("span");
    fill.style.width = (total > 0 ? Math.min(100, 100 * done / total) : 0) + "%";
    bar.appendChild(fill);
    wrap.appendChild(bar);
    wrap.appendChild(el("span", "progress-text", done + "/" + total));
    td.appendChild(wrap);
    return td;
  }

  function jobRow(job, now) {
    var tr = el("tr");
    tr.dataset.jobId = String(job.id);
    tr.dataset.state = String(job.state);
    var idCell = el("td", "num id");
    var dot = el("span", "job-dot");
    dot.style.background = jobColour(job.id);
    idCell.appendChild(dot);
    idCell.appendChild(document.createTextNode(String(job.id)));
    tr.appendChild(idCell);
    tr.appendChild(el("td", "name", job.name));
    var stateCell = el("td");
    var badge = el("span", "badge", job.state);
    badge.dataset.state = String(job.state);
    stateCell.appendChild(badge);
    tr.appendChild(stateCell);
    tr.appendChild(el("td", "num", job.priority));
    tr.appendChild(progressCell(job));
    tr.appendChild(el("td", "num", formatAge((now - jobCreatedMs(job)) / 1000)));
    var detail = job.error || job.pending_reason || "";
    var dc = el("td", "detail", detail);
    if (detail) dc.title = detail;
    tr.appendChild(dc);
    return tr;
  }

  function renderJobs(jobs, counts) {
    var body = $("jobs-body");
    var now = Date.now();
    var frag = document.createDocumentFragment();
    jobs.forEach(function (job) {
      if (counts[job.state] !== undefined) counts[job.state]++;
      frag.appendChild(jobRow(job, now));
    });
    body.replaceChildren(frag);
    $("jobs-empty").hidden = jobs.length > 0;
  }

  function renderCounts(boxId, counts) {
    Object.keys(counts).forEach(function (s) {
      var b = document.querySelector("#" + boxId + ' [data-count="' + s + '"] b');
      if (b) b.textContent = String(counts[s]);
    });
  }

  function zeroCounts(states) {
    var c = {};
    states.forEach(function (s) { c[s] = 0; });
    return c;
  }

  function setConn(state, text) {
    var c = $("conn");
    c.dataset.conn = state;
    c.textContent = text;
  }

  function getJSON(url) {
    return fetch(url, { cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error(url + ": HTTP " + r.status);
        return r.json();
      });
  }

  function render(islandsDoc, jobsDoc) {
    var islands = Array.isArray(islandsDoc) ? islandsDoc : (islandsDoc && islandsDoc.islands) || [];
    var jobs = (jobsDoc && jobsDoc.jobs) || [];
    var devCounts = zeroCounts(DEVICE_STATES);
    var jobCounts = zeroCounts(JOB_STATES);
    renderIslands(islands, devCounts);
    renderJobs(jobs, jobCounts);
    renderCounts("device-counts", devCounts);
    renderCounts("job-counts", jobCounts);
  }

  function poll() {
    Promise.all([getJSON("v1/islands"), getJSON("v1/jobs?limit=" + JOB_LIMIT)])
      .then(function (docs) {
        render(docs[0], docs[1]);
        polls++;
        document.body.dataset.polls = String(polls);
        setConn("live", "live");
        $("updated").textContent = "Last update " + new Date().toLocaleTimeString() + ".";
      })
      .catch(function (err) {
        setConn("error", "disconnected: " + (err && err.message ? err.message : err));
      })
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  /* Hovering a device or a job row highlights everything of that job. */
  function highlight(job, on) {
    if (!job) return;
    var sel = '.device[data-job="' + CSS.escape(job) + '"], tr[data-job-id="' + CSS.escape(job) + '"]';
    document.querySelectorAll(sel).forEach(function (n) { n.classList.toggle("hl", on); });
  }

  function hoverJob(target) {
    var n = target && target.closest ? target.closest(".device, tr[data-job-id]") : null;
    if (!n) return "";
    return n.classList.contains("device") ? n.dataset.job : n.dataset.jobId;
  }

  document.addEventListener("mouseover", function (e) { highlight(hoverJob(e.target), true); });
  document.addEventListener("mouseout", function (e) { highlight(hoverJob(e.target), false); });

  poll();
})();
