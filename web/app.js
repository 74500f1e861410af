/* Atoll dashboard: one page, five views (cluster, queue, utilization,
 * submit, one job), live from the server's event stream.
 *
 * Data: GET v1/islands, v1/workers, v1/jobs (?state=), v1/jobs/{id}
 * (with its `document`), v1/jobs/{id}/result, v1/stats/utilization.
 * Liveness: EventSource on v1/events/stream; `change` means something the
 * dashboard shows moved (re-fetch), `sample` means a utilization sample was
 * written (fetch the new samples). While the stream is down the page polls
 * every 2 s; a slow safety refresh runs every 10 s regardless.
 *
 * Test hooks, kept stable: device cells carry data-island, data-index,
 * data-state, data-job ("" when none); job rows data-job-id and data-state;
 * graph nodes data-comp and data-state; queue items data-job-id; <body>
 * data-polls counts completed refreshes and data-sse the stream state.
 * Every text from the API goes through textContent, never innerHTML, since
 * job names and documents are user input. */
(function () {
  "use strict";

  var JOB_LIMIT = 50;
  var POLL_MS = 2000, SAFETY_MS = 10000;
  var DEVICE_STATES = ["free", "allocated", "down"];
  var LIVE_JOB_STATES = ["queued", "allocated", "running"];
  var TERMINAL = { succeeded: 1, failed: 1, cancelled: 1 };
  var SVGNS = "http://www.w3.org/2000/svg";
  var STATE_COLOURS = { queued: "#e3b341", allocated: "#c297ff", running: "#58a6ff",
                        succeeded: "#56d364", failed: "#ff7b72", cancelled: "#8b96a8" };
  var ISLAND_COLOURS = ["#58a6ff", "#f78166", "#56d364", "#d2a8ff", "#e3b341", "#39c5cf"];

  var S = {
    route: { view: "cluster", job: 0 },
    islands: [], workers: new Map(), jobs: [], queued: [], filter: "",
    selected: "",                  /* job id (string) lit up on the map */
    detail: null,                  /* the open job's object */
    results: new Map(),            /* job id -> result doc (succeeded jobs only) */
    programs: new Map(),           /* job id -> GET .../program (jobs with a global computation) */
    docs: new Map(),               /* job id -> {doc, slices, state}: for the Slices column */
    procSel: null,                 /* {job, key, p}: the process whose output is shown */
    procsBusy: false, procsAgain: false,
    util: { minutes: 15, samples: [], islands: {}, lastT: 0, loadedMinutes: 0 },
    polls: 0, sseOpen: false, inflight: false, again: false
  };
  var islandViews = new Map();

  function $(id) { return document.getElementById(id); }
  function el(tag, className, text) {
    var e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function has(v) { return v !== null && v !== undefined; }

  /* A stable, well-spread colour per job id (golden-angle hues). */
  function jobColour(id) {
    var hue = (Number(id) * 137.508 + 200) % 360;
    return "hsl(" + hue.toFixed(1) + " 68% 52%)";
  }

  function fmtAge(seconds) {
    if (!isFinite(seconds) || seconds < 0) return "–";
    var s = Math.floor(seconds);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  function fmtDur(us) {
    if (!isFinite(us) || us < 0) return "–";
    if (us < 1000) return (us / 1000).toFixed(2) + " ms";
    if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 1 : 0) + " ms";
    if (us < 6e7) return (us / 1e6).toFixed(2) + " s";
    return fmtAge(us / 1e6);
  }
  function fmtClock(us) {
    if (!us) return "–";
    var d = new Date(us / 1000);
    return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
  }
  function shapeText(shape) { return Array.isArray(shape) ? shape.join("×") : "?"; }

  /* ------------------------------------------------------------ fetching */

  /* When atolld requires tokens, open the page once as /?token=TOKEN (a
   * read or tenant token): it is kept in localStorage and sent as a bearer
   * token (and as access_token on the event stream, which cannot carry
   * headers). */
  var TOKEN = (function () {
    var m = /[?&]token=([^&#]+)/.exec(window.location.search);
    try {
      if (m) window.localStorage.setItem("atoll-token", decodeURIComponent(m[1]));
      return window.localStorage.getItem("atoll-token") || "";
    } catch (e) { return m ? decodeURIComponent(m[1]) : ""; }
  })();
  function authHeaders(h) {
    h = h || {};
    if (TOKEN) h.Authorization = "Bearer " + TOKEN;
    return h;
  }

  function getJSON(url) {
    return fetch(url, { cache: "no-store", headers: authHeaders({ Accept: "application/json" }) })
      .then(function (r) {
        if (!r.ok) throw new Error(url + ": HTTP " + r.status);
        return r.json();
      });
  }

  /* One refresh at a time; a change arriving meanwhile runs one more. */
  function refresh() {
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

  function loadUtil(full) {
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

  /* ------------------------------------------------------------ live */

  function setConn(state, text) {
    var c = $("conn");
    c.dataset.conn = state;
    c.textContent = text;
  }

  var pollTimer = 0;
  function startStream() {
    if (!window.EventSource) { pollTimer = setInterval(refresh, POLL_MS); return; }
    var es = new EventSource("v1/events/stream" +
                             (TOKEN ? "?access_token=" + encodeURIComponent(TOKEN) : ""));
    es.addEventListener("hello", function () {
      S.sseOpen = true;
      document.body.dataset.sse = "open";
      setConn("live", "live");
      if (pollTimer) { clearInterval(pollTimer); pollTimer = 0; }
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
      if (!pollTimer) pollTimer = setInterval(function () { refresh(); loadUtil(false); }, POLL_MS);
    };
  }

  /* ------------------------------------------------------------ routing */

  function parseRoute() {
    var h = location.hash.replace(/^#\/?/, "");
    var m = /^jobs\/(\d+)/.exec(h);
    if (m) return { view: "job", job: Number(m[1]) };
    if (h === "queue" || h === "utilization" || h === "submit") return { view: h, job: 0 };
    return { view: "cluster", job: 0 };
  }

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

  /* ------------------------------------------------------------ render */

  function render() {
    renderIslands();
    renderCards();
    renderJobs();
    renderQueue();
    if (S.route.view === "job") renderJob();
  }

  function jobName(id) {
    var k = String(id), j;
    if (S.detail && String(S.detail.id) === k) return S.detail.name;
    for (var i = 0; i < S.jobs.length; i++) if (String(S.jobs[i].id) === k) return S.jobs[i].name;
    for (i = 0; i < S.queued.length; i++) if (String(S.queued[i].id) === k) return S.queued[i].name;
    j = S.docs.get(k);
    return j && j.doc ? j.doc.name : "";
  }

  /* ---- islands ---- */

  function meshLayout(shape) {
    var s = Array.isArray(shape) ? shape.map(Number) : [];
    if (s.length === 1) return { layers: 1, rows: 1, cols: s[0] };
    if (s.length === 2) return { layers: 1, rows: s[0], cols: s[1] };
    if (s.length === 3) return { layers: s[0], rows: s[1], cols: s[2] };
    return { layers: 1, rows: 1, cols: 0 };
  }
  function cellSize(layout) {
    var across = Math.max(1, layout.cols * layout.layers);
    return Math.max(10, Math.min(38, Math.floor(680 / across) - 4));
  }

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

  function renderIslands() {
    var container = $("islands");
    var seen = new Set();
    var holders = new Map();
    S.islands.forEach(function (isl) {
      seen.add(isl.name);
      var layout = meshLayout(isl.shape);
      var key = JSON.stringify(isl.shape);
      var view = islandViews.get(isl.name);
      if (!view || view.key !== key) {
        if (view) view.el.remove();
        view = buildIsland(isl, layout);
        view.key = key;
        islandViews.set(isl.name, view);
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
    islandViews.forEach(function (view, name) {
      if (!seen.has(name)) { view.el.remove(); islandViews.delete(name); }
    });
    $("islands-empty").hidden = S.islands.length > 0;
    container.classList.toggle("selecting", !!S.selected);

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
    var view = islandViews.get(c.dataset.island);
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

  /* ---- cards ---- */

  function renderCards() {
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

  /* ---- jobs table ---- */

  /* "a 2×2 west, b 2×2 east": granted island when known, else asked. */
  function slicesText(job) {
    var c = S.docs.get(String(job.id));
    if (!c || !c.doc || !c.doc.slices) return "";
    return Object.keys(c.doc.slices).map(function (name) {
      var want = c.doc.slices[name] || {};
      var got = c.slices && c.slices[name] ? c.slices[name].island : null;
      var where = got ? " " + got : want.island ? " → " + want.island : "";
      return name + " " + shapeText(want.shape) + where;
    }).join(", ");
  }

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

  function renderJobs() {
    var now = Date.now();
    var frag = document.createDocumentFragment();
    S.jobs.forEach(function (job) { frag.appendChild(jobRow(job, now)); });
    $("jobs-body").replaceChildren(frag);
    $("jobs-empty").hidden = S.jobs.length > 0;
  }

  function select(id) {
    S.selected = S.selected === id ? "" : id;
    renderIslands();
    document.querySelectorAll("#jobs-body tr").forEach(function (tr) {
      tr.classList.toggle("sel", tr.dataset.jobId === S.selected);
    });
  }

  /* ---- queue ---- */

  function renderQueue() {
    /* Admission order: priority first, then age (ids grow with age). */
    var q = S.queued.slice().sort(function (a, b) { return (b.priority - a.priority) || (a.id - b.id); });
    var now = Date.now();
    var frag = document.createDocumentFragment();
    q.forEach(function (job, i) {
      var li = el("li");
      li.dataset.jobId = String(job.id);
      li.appendChild(el("span", "pos", i + 1));
      var t = el("div", "q-title");
      var dot = el("span", "job-dot");
      dot.style.background = jobColour(job.id);
      t.appendChild(dot);
      var a = el("a", "", "#" + job.id + " " + job.name);
      a.href = "#/jobs/" + job.id;
      t.appendChild(a);
      var sl = slicesText(job);
      if (sl) t.appendChild(el("span", "slices-cell", sl));
      li.appendChild(t);
      var created = job.times_us ? job.times_us.created / 1000 : Date.parse(job.created_at);
      li.appendChild(el("div", "q-meta", "priority " + job.priority + " · waiting " + fmtAge((now - created) / 1000) +
                        (job.attempt ? " · attempt " + (job.attempt + 1) : "") +
                        (job.preemptions ? " · preempted ×" + job.preemptions : "")));
      li.appendChild(el("div", "reason", job.pending_reason || "being placed…"));
      frag.appendChild(li);
    });
    $("queue").replaceChildren(frag);
    $("queue-empty").hidden = q.length > 0;
  }

  /* ---- job page ---- */

  function renderJob() {
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

    renderGraph(j);
    renderTimings(j);
    renderJobSlices(j);
    renderResult(j);
    renderProgram(j);
    renderProcesses(j);
    renderEvents(j);
  }

  /* Edges from the document's `input` ops: producer -> consumer, value. */
  function graphModel(j) {
    var doc = j.document || {};
    var comps = Array.isArray(doc.computations) ? doc.computations : [];
    var byName = {};
    comps.forEach(function (c, i) { byName[c.name] = i; });
    var edges = [];
    comps.forEach(function (c, i) {
      (c.ops || []).forEach(function (op) {
        if (op.op !== "input" || typeof op.from !== "string") return;
        var dot = op.from.lastIndexOf(".");
        var p = byName[op.from.slice(0, dot)];
        if (p !== undefined) edges.push({ from: p, to: i, value: op.from.slice(dot + 1) });
      });
    });
    var depth = comps.map(function () { return 0; });
    /* Longest path from a source; the DAG is acyclic (the compiler checked). */
    for (var pass = 0; pass < comps.length; pass++)
      edges.forEach(function (e) { depth[e.to] = Math.max(depth[e.to], depth[e.from] + 1); });
    var lanes = Object.keys(doc.slices || {});
    comps.forEach(function (c) { if (lanes.indexOf(c.slice) < 0) lanes.push(c.slice); });
    return { comps: comps, edges: edges, depth: depth, lanes: lanes, doc: doc };
  }

  function renderGraph(j) {
    var m = graphModel(j);
    var box = $("graph");
    if (!m.comps.length) { box.replaceChildren(el("p", "empty", "No document.")); return; }
    var NODE_W = 200, NODE_H = 62, COL_W = 270, LABEL_W = 150, ROW_H = 80, PAD = 14;
    var cstate = j.computations || [];
    var stack = {};   /* lane|depth -> count */
    var pos = m.comps.map(function (c, i) {
      var key = c.slice + "|" + m.depth[i];
      var row = stack[key] || 0;
      stack[key] = row + 1;
      return { lane: m.lanes.indexOf(c.slice), col: m.depth[i], row: row };
    });
    var laneRows = m.lanes.map(function (_, li) {
      return pos.reduce(function (mx, p) { return p.lane === li ? Math.max(mx, p.row + 1) : mx; }, 0);
    });
    var laneTop = [], y = 0;
    laneRows.forEach(function (r, li) { laneTop[li] = y; y += Math.max(1, r) * ROW_H + PAD; });
    var cols = Math.max.apply(null, m.depth) + 1;
    var W = LABEL_W + 24 + cols * COL_W, H = y;
    var root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img",
                            "aria-label": "dataflow graph of job " + j.id });
    m.lanes.forEach(function (name, li) {
      var g = svg("g", { "class": "lane" });
      g.appendChild(svg("rect", { x: 0, y: laneTop[li], width: W, height: Math.max(1, laneRows[li]) * ROW_H + PAD - 6, rx: 8 }));
      var want = (m.doc.slices || {})[name] || {};
      var got = j.slices && j.slices[name];
      g.appendChild(svg("text", { x: 14, y: laneTop[li] + 26, "font-weight": 600, fill: "#e6ebf2" }, "slice " + name));
      g.appendChild(svg("text", { x: 14, y: laneTop[li] + 44 },
                        shapeText(want.shape) + (got ? " on " + got.island : want.island ? " → " + want.island : " · any island")));
      root.appendChild(g);
    });
    function nodeXY(i) {
      var p = pos[i];
      return { x: LABEL_W + 24 + p.col * COL_W, y: laneTop[p.lane] + 10 + p.row * ROW_H };
    }
    function stateOf(i) { return (cstate[i] && cstate[i].state) || "waiting"; }
    m.edges.forEach(function (e) {
      var a = nodeXY(e.from), b = nodeXY(e.to);
      var x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
      var mx = (x1 + x2) / 2;
      var ps = stateOf(e.from), cs = stateOf(e.to);
      var cls = "edge" + (ps === "succeeded" && cs === "succeeded" ? " done" :
                          ps === "succeeded" && cs === "dispatched" ? " live" : "");
      var g = svg("g", { "class": cls, "data-from": m.comps[e.from].name, "data-to": m.comps[e.to].name });
      g.appendChild(svg("path", { d: "M" + x1 + "," + y1 + " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + (x2 - 6) + "," + y2,
                                  "marker-end": "url(#arrow)" }));
      g.appendChild(svg("text", { x: mx, y: (y1 + y2) / 2 - 6, "text-anchor": "middle" }, e.value));
      root.appendChild(g);
    });
    var defs = svg("defs");
    var mk = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 4, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
    mk.appendChild(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#6b7790" }));
    defs.appendChild(mk);
    root.insertBefore(defs, root.firstChild);
    m.comps.forEach(function (c, i) {
      var p = nodeXY(i), cs = cstate[i] || {};
      var state = stateOf(i);
      var g = svg("g", { "class": "node", "data-comp": c.name, "data-state": state, transform: "translate(" + p.x + "," + p.y + ")" });
      g.appendChild(svg("rect", { "class": "box", width: NODE_W, height: NODE_H }));
      g.appendChild(svg("text", { x: 12, y: 22, "font-weight": 600 }, c.name));
      var tu = cs.times_us || {};
      var dur = tu.finished && tu.started ? fmtDur(tu.finished - tu.started) : state;
      g.appendChild(svg("text", { x: NODE_W - 12, y: 22, "text-anchor": "end", "class": "sub" }, dur));
      g.appendChild(svg("text", { x: 12, y: 40, "class": "sub" },
                        (has(cs.seq) ? "seq " + cs.seq + " · " : "") + (cs.shards_done || 0) + "/" + (cs.shards_total || "?") + " shards · " +
                        (c.ops || []).length + " ops"));
      var frac = cs.shards_total ? (cs.shards_done || 0) / cs.shards_total : 0;
      g.appendChild(svg("rect", { "class": "pbar", x: 12, y: 48, width: NODE_W - 24, height: 4, rx: 2 }));
      g.appendChild(svg("rect", { "class": "pfill", x: 12, y: 48, width: ((NODE_W - 24) * frac).toFixed(1), height: 4, rx: 2 }));
      var title = svg("title", {}, c.name + ": " + state);
      g.appendChild(title);
      root.appendChild(g);
    });
    box.replaceChildren(root);
  }

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

  /* The partitioner's work (GET /v1/jobs/{id}/program), fetched once per
   * job that has a global computation. */
  function fmtSharding(sh) {
    if (sh === null || sh === undefined) return "–";
    var dims = Array.isArray(sh) ? sh : sh.dims;
    var text = "[" + dims.map(function (d) {
      return d === null ? "·" : Array.isArray(d) ? d.join("×") : d;
    }).join(", ") + "]";
    return sh.partial ? text + " partial over " + sh.partial.join(", ") : text;
  }

  function renderProgram(j) {
    var panel = $("program-panel"), id = String(j.id);
    var doc = j.document || {};
    var global = (doc.computations || []).some(function (c) { return c.global === true; });
    panel.hidden = !global;
    if (!global) return;
    var prog = S.programs.get(id);
    if (!prog) {
      S.programs.set(id, { loading: true });
      getJSON("v1/jobs/" + id + "/program").then(function (p) {
        S.programs.set(id, p);
        if (S.detail && String(S.detail.id) === id) renderProgram(S.detail);
      }).catch(function () { S.programs.delete(id); });
      return;
    }
    if (prog.loading) return;
    var frag = document.createDocumentFragment();
    (prog.computations || []).filter(function (c) { return c.global; }).forEach(function (c) {
      var mesh = c.mesh || {};
      frag.appendChild(el("h3", "", c.name + " on [" + (mesh.shape || []).join("×") + "] (" +
                          (mesh.axes || []).join(" × ") + ") · " + c.collectives_inserted +
                          " collective" + (c.collectives_inserted === 1 ? "" : "s") + " inserted"));
      var table = el("table", "program-ops");
      var head = el("tr");
      ["op", "value", "local shape", "sharding"].forEach(function (h) { head.appendChild(el("th", "", h)); });
      table.appendChild(head);
      (c.ops || []).slice(0, 300).forEach(function (o) {
        var tr = el("tr", o.inserted ? "inserted" : "");
        tr.appendChild(el("td", "", o.op + (o.inserted ? " ◆" : "")));
        tr.appendChild(el("td", "", o.out));
        tr.appendChild(el("td", "", "[" + (o.shape || []).join(",") + "]"));
        tr.appendChild(el("td", "", fmtSharding(o.sharding)));
        table.appendChild(tr);
      });
      frag.appendChild(table);
    });
    $("program").replaceChildren(frag);
  }

  function renderResult(j) {
    var box = $("result");
    var id = String(j.id);
    if (j.state !== "succeeded") {
      box.replaceChildren(el("p", "empty", TERMINAL[j.state] ? "No result: the job " + j.state + "." : "Available once the job succeeded."));
      return;
    }
    var res = S.results.get(id);
    if (!res) {
      S.results.set(id, { loading: true });
      getJSON("v1/jobs/" + id + "/result").then(function (r) {
        S.results.set(id, r);
        if (S.detail && String(S.detail.id) === id) renderResult(S.detail);
      }).catch(function () { S.results.delete(id); });
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

  /* ---- processes of run computations (DESIGN Part F) ---- */

  var LOG_TAIL_CHARS = 65536;   /* the page shows the newest 64 Ki characters */

  /* Asks for the job's processes on every render of a job with run
   * computations (renders follow changes); one request in flight. */
  function renderProcesses(j) {
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
  var armTimer = 0;
  function disarmCancel() {
    var b = $("cancel");
    b.classList.remove("armed");
    b.textContent = "Cancel job";
    clearTimeout(armTimer);
  }
  function onCancel() {
    var b = $("cancel");
    if (!b.classList.contains("armed")) {
      b.classList.add("armed");
      b.textContent = "Confirm cancel";
      armTimer = setTimeout(disarmCancel, 4000);
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
    }).then(refresh);
  }

  /* ---- utilization charts ---- */

  function niceMax(v) {
    if (v <= 4) return 4;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
    return 10 * p;
  }

  /* series: [{name, colour, values: [v per sample], dash?}] over samples' t. */
  function lineChart(box, samples, series, opts) {
    var W = Math.max(320, box.clientWidth || 900), H = 240, L = 40, R = 14, T = 12, B = 26;
    var now = Date.now() * 1000, from = now - opts.minutes * 60e6;
    var xs = function (t) { return L + (W - L - R) * (t - from) / (now - from); };
    var ymax = niceMax(Math.max(opts.floor || 0, Math.max.apply(null, series.map(function (s) {
      return Math.max.apply(null, s.values.concat([0]));
    }))));
    var ys = function (v) { return T + (H - T - B) * (1 - v / ymax); };
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", role: "img", "aria-label": opts.label });
    var grid = svg("g", { "class": "grid" }), axis = svg("g", { "class": "axis" });
    for (var k = 0; k <= 4; k++) {
      var v = ymax * k / 4, yy = ys(v);
      grid.appendChild(svg("line", { x1: L, x2: W - R, y1: yy, y2: yy }));
      axis.appendChild(svg("text", { x: L - 6, y: yy + 4, "text-anchor": "end" }, +v.toFixed(1)));
    }
    var stepMin = opts.minutes <= 5 ? 1 : opts.minutes <= 15 ? 3 : 10;
    for (var mnt = 0; mnt <= opts.minutes; mnt += stepMin) {
      var tx = xs(now - mnt * 60e6);
      grid.appendChild(svg("line", { x1: tx, x2: tx, y1: T, y2: H - B }));
      axis.appendChild(svg("text", { x: tx, y: H - 8, "text-anchor": mnt === 0 ? "end" : "middle" }, mnt === 0 ? "now" : "−" + mnt + "m"));
    }
    root.appendChild(grid);
    root.appendChild(axis);
    var idx = [];
    samples.forEach(function (s, i) { if (s.t >= from) idx.push(i); });
    series.forEach(function (s) {
      if (!idx.length) return;
      var d = idx.map(function (i, n) { return (n ? "L" : "M") + xs(samples[i].t).toFixed(1) + "," + ys(s.values[i]).toFixed(1); }).join(" ");
      if (s.area) {
        var first = xs(samples[idx[0]].t).toFixed(1), last = xs(samples[idx[idx.length - 1]].t).toFixed(1);
        root.appendChild(svg("path", { d: d + " L" + last + "," + ys(0) + " L" + first + "," + ys(0) + " z",
                                       fill: s.colour, "fill-opacity": 0.12, stroke: "none" }));
      }
      root.appendChild(svg("path", { d: d, fill: "none", stroke: s.colour, "stroke-width": s.dash ? 1.2 : 2,
                                     "stroke-dasharray": s.dash ? "5 4" : "none", "stroke-linejoin": "round",
                                     "data-series": s.name }));
    });
    var cursor = svg("line", { x1: 0, x2: 0, y1: T, y2: H - B, stroke: "#8b96a8", "stroke-width": 1, visibility: "hidden" });
    root.appendChild(cursor);
    var readout = el("div", "readout");
    readout.hidden = true;
    root.addEventListener("mousemove", function (ev) {
      var r = root.getBoundingClientRect();
      var x = (ev.clientX - r.left) * W / r.width;
      var t = from + (x - L) / (W - L - R) * (now - from);
      var best = -1, bd = Infinity;
      idx.forEach(function (i) { var dd = Math.abs(samples[i].t - t); if (dd < bd) { bd = dd; best = i; } });
      if (best < 0) return;
      var cx = xs(samples[best].t);
      cursor.setAttribute("x1", cx); cursor.setAttribute("x2", cx); cursor.setAttribute("visibility", "visible");
      var f = document.createDocumentFragment();
      f.appendChild(el("div", "", new Date(samples[best].t / 1000).toLocaleTimeString([], { hour12: false })));
      series.forEach(function (s) {
        if (s.dash) return;
        var row = el("div");
        var sw = el("span", "swatch line");
        sw.style.background = s.colour;
        row.appendChild(sw);
        row.appendChild(document.createTextNode(" " + s.name + ": " + s.values[best]));
        f.appendChild(row);
      });
      readout.replaceChildren(f);
      readout.hidden = false;
      var left = cx / W * r.width;
      readout.style.left = (left > r.width / 2 ? left - 170 : left + 12) + "px";
    });
    root.addEventListener("mouseleave", function () { cursor.setAttribute("visibility", "hidden"); readout.hidden = true; });
    box.replaceChildren(root, readout);
  }

  function legend(id, items) {
    var f = document.createDocumentFragment();
    items.forEach(function (it) {
      var li = el("li");
      var sw = el("span", "swatch line");
      sw.style.background = it.colour;
      li.appendChild(sw);
      li.appendChild(document.createTextNode(it.name));
      f.appendChild(li);
    });
    $(id).replaceChildren(f);
  }

  function renderUtil() {
    var sm = S.util.samples;
    var names = Object.keys(S.util.islands);
    var busy = [], capacity = 0;
    names.forEach(function (n, i) {
      var c = ISLAND_COLOURS[i % ISLAND_COLOURS.length];
      capacity = Math.max(capacity, S.util.islands[n]);
      busy.push({ name: n, colour: c, area: true, values: sm.map(function (s) { return (s.busy || {})[n] || 0; }) });
      busy.push({ name: n + " down", colour: "#f85149", dash: true, values: sm.map(function (s) { return (s.down || {})[n] || 0; }) });
    });
    legend("util-legend-islands", names.map(function (n, i) {
      return { name: n + " (" + S.util.islands[n] + " devices)", colour: ISLAND_COLOURS[i % ISLAND_COLOURS.length] };
    }).concat([{ name: "down (dashed)", colour: "#f85149" }]));
    lineChart($("chart-busy"), sm, busy, { minutes: S.util.minutes, floor: capacity, label: "busy devices per island" });
    var jobs = LIVE_JOB_STATES.map(function (st) {
      return { name: st, colour: STATE_COLOURS[st], values: sm.map(function (s) { return (s.jobs || {})[st] || 0; }) };
    });
    legend("util-legend-jobs", jobs);
    lineChart($("chart-jobs"), sm, jobs, { minutes: S.util.minutes, label: "jobs per state" });
    renderTenantBars();
  }

  /* Device time by tenant over the chosen range (GET /v1/stats/tenants):
   * one bar per tenant with time, against the share it is entitled to. */
  function renderTenantBars() {
    if (Date.now() - (S.tenantsAt || 0) < 5000 && S.tenantsMinutes === S.util.minutes) return;
    S.tenantsAt = Date.now();
    S.tenantsMinutes = S.util.minutes;
    getJSON("v1/stats/tenants?seconds=" + S.util.minutes * 60).then(function (r) {
      var rows = (r.tenants || []).filter(function (t) { return t.device_seconds > 0; });
      var total = rows.reduce(function (a, t) { return a + t.device_seconds; }, 0);
      var shares = rows.reduce(function (a, t) { return a + t.share; }, 0);
      var frag = document.createDocumentFragment();
      rows.forEach(function (t, i) {
        var row = el("div", "tenant-row");
        row.dataset.tenant = t.name;
        row.appendChild(el("span", "t-name", t.name));
        var bar = el("div", "t-bar");
        var fill = el("span", "");
        fill.style.width = (100 * t.device_seconds / total).toFixed(1) + "%";
        fill.style.background = ISLAND_COLOURS[i % ISLAND_COLOURS.length];
        bar.appendChild(fill);
        row.appendChild(bar);
        row.appendChild(el("span", "t-num", t.device_seconds.toFixed(1) + " s · " +
                           (100 * t.device_seconds / total).toFixed(0) + "% (share " +
                           (100 * t.share / shares).toFixed(0) + "%)"));
        frag.appendChild(row);
      });
      if (!rows.length) frag.appendChild(el("p", "empty", "No device time in this range."));
      $("tenant-bars").replaceChildren(frag);
    }).catch(function () { /* the next refresh retries */ });
  }

  function renderSpark() {
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

  /* ---- submit ---- */

  var EXAMPLES = {
    small: {
      name: "allreduce-2x2", priority: 0,
      slices: { a: { shape: [2, 2] } },
      computations: [{ name: "reduce", slice: "a", ops: [
        { op: "shard_index", out: "i" },
        { op: "fill", out: "x", shape: [4], value: 1.0 },
        { op: "mul", out: "y", args: ["x", "i"] },
        { op: "compute", out: "busy", us: 3000000 },
        { op: "all_reduce", out: "z", args: ["y"], reduce: "sum" }], outputs: ["z"] }]
    },
    pipeline: {
      name: "pipeline", priority: 1,
      slices: { a: { shape: [2, 2], island: "west" }, b: { shape: [2, 2] } },
      computations: [
        { name: "produce", slice: "a", ops: [
          { op: "shard_index", out: "i" },
          { op: "fill", out: "x", shape: [4], value: 1.0 },
          { op: "mul", out: "y", args: ["x", "i"] },
          { op: "compute", out: "busy", us: 2000000 },
          { op: "all_reduce", out: "z", args: ["y"], reduce: "sum" }], outputs: ["z"] },
        { name: "consume", slice: "b", ops: [
          { op: "input", out: "z", from: "produce.z" },
          { op: "compute", out: "busy", us: 2000000 },
          { op: "scale", out: "w", args: ["z"], factor: 0.5 }], outputs: ["w"] }]
    }
  };

  function showProblem(status, body, text) {
    var box = $("submit-error");
    var f = document.createDocumentFragment();
    if (body && (body.title || body.detail)) {
      f.appendChild(el("div", "p-title", (body.title || "Error") + " · " + (body.status || status)));
      f.appendChild(el("div", "p-detail", body.detail || ""));
      if (body.field) f.appendChild(el("div", "p-field", "field: " + body.field));
    } else {
      f.appendChild(el("div", "p-title", "HTTP " + status));
      f.appendChild(el("div", "p-detail", text || "no details"));
    }
    box.replaceChildren(f);
    box.dataset.status = String(status);
    box.hidden = false;
  }

  function onSubmit() {
    var text = $("doc").value;
    var headers = authHeaders({ "Content-Type": "application/json", Accept: "application/json" });
    var idem = $("idem").value.trim();
    if (idem) headers["Idempotency-Key"] = idem;
    $("submit-error").hidden = true;
    $("submit-ok").hidden = true;
    $("submit").disabled = true;
    fetch("v1/jobs", { method: "POST", headers: headers, body: text }).then(function (r) {
      return r.text().then(function (t) {
        var body = null;
        try { body = JSON.parse(t); } catch (e) { body = null; }
        if (!r.ok) { showProblem(r.status, body, t); return; }
        var ok = $("submit-ok");
        var f = document.createDocumentFragment();
        f.appendChild(document.createTextNode((r.status === 201 ? "Accepted: " : "Already submitted (same key): ")));
        var a = el("a", "", "job #" + body.id + " " + body.name);
        a.href = "#/jobs/" + body.id;
        f.appendChild(a);
        f.appendChild(document.createTextNode(" · " + body.state));
        ok.replaceChildren(f);
        ok.dataset.job = String(body.id);
        ok.hidden = false;
        refresh();
      });
    }).catch(function (e) {
      showProblem(0, null, "could not reach atolld: " + e.message);
    }).then(function () { $("submit").disabled = false; });
  }

  /* ------------------------------------------------------------ wiring */

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

  $("jobs-body").addEventListener("click", function (e) {
    if (e.target.closest("a")) return;
    var tr = e.target.closest("tr[data-job-id]");
    if (tr) select(tr.dataset.jobId);
  });
  $("jobs-body").addEventListener("dblclick", function (e) {
    var tr = e.target.closest("tr[data-job-id]");
    if (tr) location.hash = "#/jobs/" + tr.dataset.jobId;
  });
  $("holders").addEventListener("click", function (e) {
    var b = e.target.closest(".holder");
    if (b) select(b.dataset.job);
  });
  $("filters").addEventListener("click", function (e) {
    var b = e.target.closest("button[data-filter]");
    if (!b) return;
    S.filter = b.dataset.filter;
    document.querySelectorAll("#filters button").forEach(function (x) { x.classList.toggle("on", x === b); });
    refresh();
  });
  document.querySelector(".range").addEventListener("click", function (e) {
    var b = e.target.closest("button[data-minutes]");
    if (!b) return;
    S.util.minutes = Number(b.dataset.minutes);
    document.querySelectorAll(".range button").forEach(function (x) { x.classList.toggle("on", x === b); });
    renderUtil();
    loadUtil(false);
  });
  $("cancel").addEventListener("click", onCancel);
  $("submit").addEventListener("click", onSubmit);
  $("doc").addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "Enter") onSubmit();
  });
  $("example-small").addEventListener("click", function () { $("doc").value = JSON.stringify(EXAMPLES.small, null, 2); });
  $("example-pipeline").addEventListener("click", function () { $("doc").value = JSON.stringify(EXAMPLES.pipeline, null, 2); });
  $("upload").addEventListener("change", function (e) {
    var f = e.target.files && e.target.files[0];
    if (!f) return;
    var rd = new FileReader();
    rd.onload = function () { $("doc").value = String(rd.result); };
    rd.readAsText(f);
    e.target.value = "";
  });
  window.addEventListener("hashchange", onRoute);
  window.addEventListener("resize", function () { if (S.route.view === "utilization") renderUtil(); });

  /* Ages tick locally; the charts' time axis slides. */
  setInterval(function () {
    var now = Date.now();
    document.querySelectorAll("#jobs-body td.age").forEach(function (td) {
      td.textContent = fmtAge((now - Number(td.dataset.created)) / 1000);
    });
    renderSpark();
    /* processes start, write and exit without changing their job: a live
     * job's processes and output are asked for every second */
    if (S.route.view === "job" && S.detail && !TERMINAL[S.detail.state]) renderProcesses(S.detail);
  }, 1000);
  setInterval(refresh, SAFETY_MS);

  $("doc").value = JSON.stringify(EXAMPLES.small, null, 2);
  onRoute();
  loadUtil(true);
  startStream();
})();
