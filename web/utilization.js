/* utilization.js - the Utilization view: busy (and down) devices per
 * island and jobs per state over the chosen range, from the samples
 * atolld's sampler records (S.util, loaded by live.js), and device time
 * by tenant against each tenant's share. The range is S.util.minutes; when
 * the tenant bars were last asked is S.tenantsAt (state.js).
 *
 * Test hooks, kept stable: chart paths carry data-series; tenant bars are
 * .tenant-row with data-tenant. */
import { S } from "./state.js";
import { $, el } from "./dom.js";
import { STATE_COLOURS, ISLAND_COLOURS } from "./format.js";
import { getJSON } from "./api.js";
import { lineChart, legend } from "./chart.js";

const LIVE_JOB_STATES = ["queued", "allocated", "running"];

/* Both charts and their legends from S.util, then the tenant bars. */
export function renderUtil() {
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

/* The range buttons redraw at once and fetch what the range lacks
 * (loadUtil, live.js); a resize redraws to the new width. */
export function initUtilization(loadUtil) {
  document.querySelector(".range").addEventListener("click", function (e) {
    var b = e.target.closest("button[data-minutes]");
    if (!b) return;
    S.util.minutes = Number(b.dataset.minutes);
    document.querySelectorAll(".range button").forEach(function (x) { x.classList.toggle("on", x === b); });
    renderUtil();
    loadUtil(false);
  });
  window.addEventListener("resize", function () { if (S.route.view === "utilization") renderUtil(); });
}
