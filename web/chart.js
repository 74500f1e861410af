/* chart.js - the line charts of the Utilization view: axes with a sliding
 * time range, one (optionally filled or dashed) path per series, a cursor
 * and readout following the mouse, and the legends beside them. Shared
 * drawing, called by utilization.js; owns no state. */
import { $, el, svg } from "./dom.js";

/* A round top for the value axis: 4 at least, else 1, 2, 2.5, 5 or 10
 * times a power of ten. */
function niceMax(v) {
  if (v <= 4) return 4;
  var p = Math.pow(10, Math.floor(Math.log10(v)));
  var steps = [1, 2, 2.5, 5, 10];
  for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
  return 10 * p;
}

/* The chart's box (W x H, margins L R T B) and its scales: xs maps a
 * sample time (µs) over the last opts.minutes, ys a value up to a round
 * maximum at least opts.floor. */
function chartFrame(box, series, opts) {
  var f = { W: Math.max(320, box.clientWidth || 900), H: 240, L: 40, R: 14, T: 12, B: 26 };
  f.now = Date.now() * 1000;
  f.from = f.now - opts.minutes * 60e6;
  f.xs = function (t) { return f.L + (f.W - f.L - f.R) * (t - f.from) / (f.now - f.from); };
  f.ymax = niceMax(Math.max(opts.floor || 0, Math.max.apply(null, series.map(function (s) {
    return Math.max.apply(null, s.values.concat([0]));
  }))));
  f.ys = function (v) { return f.T + (f.H - f.T - f.B) * (1 - v / f.ymax); };
  return f;
}

/* Four value lines and one time line every 1, 3 or 10 minutes, labelled. */
function drawGrid(root, f, opts) {
  var grid = svg("g", { "class": "grid" }), axis = svg("g", { "class": "axis" });
  for (var k = 0; k <= 4; k++) {
    var v = f.ymax * k / 4, yy = f.ys(v);
    grid.appendChild(svg("line", { x1: f.L, x2: f.W - f.R, y1: yy, y2: yy }));
    axis.appendChild(svg("text", { x: f.L - 6, y: yy + 4, "text-anchor": "end" }, +v.toFixed(1)));
  }
  var stepMin = opts.minutes <= 5 ? 1 : opts.minutes <= 15 ? 3 : 10;
  for (var mnt = 0; mnt <= opts.minutes; mnt += stepMin) {
    var tx = f.xs(f.now - mnt * 60e6);
    grid.appendChild(svg("line", { x1: tx, x2: tx, y1: f.T, y2: f.H - f.B }));
    axis.appendChild(svg("text", { x: tx, y: f.H - 8, "text-anchor": mnt === 0 ? "end" : "middle" }, mnt === 0 ? "now" : "−" + mnt + "m"));
  }
  root.appendChild(grid);
  root.appendChild(axis);
}

/* One path per series over the samples in range (idx), an area under it
 * where asked. */
function drawSeries(root, f, samples, series, idx) {
  series.forEach(function (s) {
    if (!idx.length) return;
    var d = idx.map(function (i, n) { return (n ? "L" : "M") + f.xs(samples[i].t).toFixed(1) + "," + f.ys(s.values[i]).toFixed(1); }).join(" ");
    if (s.area) {
      var first = f.xs(samples[idx[0]].t).toFixed(1), last = f.xs(samples[idx[idx.length - 1]].t).toFixed(1);
      root.appendChild(svg("path", { d: d + " L" + last + "," + f.ys(0) + " L" + first + "," + f.ys(0) + " z",
                                     fill: s.colour, "fill-opacity": 0.12, stroke: "none" }));
    }
    root.appendChild(svg("path", { d: d, fill: "none", stroke: s.colour, "stroke-width": s.dash ? 1.2 : 2,
                                   "stroke-dasharray": s.dash ? "5 4" : "none", "stroke-linejoin": "round",
                                   "data-series": s.name }));
  });
}

/* A cursor on the sample nearest the mouse and a readout of its values
 * (solid series only); returns the readout, placed beside the chart. */
function addReadout(root, f, samples, series, idx) {
  var cursor = svg("line", { x1: 0, x2: 0, y1: f.T, y2: f.H - f.B, stroke: "#8b96a8", "stroke-width": 1, visibility: "hidden" });
  root.appendChild(cursor);
  var readout = el("div", "readout");
  readout.hidden = true;
  root.addEventListener("mousemove", function (ev) {
    var r = root.getBoundingClientRect();
    var x = (ev.clientX - r.left) * f.W / r.width;
    var t = f.from + (x - f.L) / (f.W - f.L - f.R) * (f.now - f.from);
    var best = -1, bd = Infinity;
    idx.forEach(function (i) { var dd = Math.abs(samples[i].t - t); if (dd < bd) { bd = dd; best = i; } });
    if (best < 0) return;
    var cx = f.xs(samples[best].t);
    cursor.setAttribute("x1", cx); cursor.setAttribute("x2", cx); cursor.setAttribute("visibility", "visible");
    var frag = document.createDocumentFragment();
    frag.appendChild(el("div", "", new Date(samples[best].t / 1000).toLocaleTimeString([], { hour12: false })));
    series.forEach(function (s) {
      if (s.dash) return;
      var row = el("div");
      var sw = el("span", "swatch line");
      sw.style.background = s.colour;
      row.appendChild(sw);
      row.appendChild(document.createTextNode(" " + s.name + ": " + s.values[best]));
      frag.appendChild(row);
    });
    readout.replaceChildren(frag);
    readout.hidden = false;
    var left = cx / f.W * r.width;
    readout.style.left = (left > r.width / 2 ? left - 170 : left + 12) + "px";
  });
  root.addEventListener("mouseleave", function () { cursor.setAttribute("visibility", "hidden"); readout.hidden = true; });
  return readout;
}

/* series: [{name, colour, values: [v per sample], dash?, area?}] over
 * samples' t; opts: {minutes, floor?, label}. */
export function lineChart(box, samples, series, opts) {
  var f = chartFrame(box, series, opts);
  var root = svg("svg", { viewBox: "0 0 " + f.W + " " + f.H, preserveAspectRatio: "none", role: "img", "aria-label": opts.label });
  drawGrid(root, f, opts);
  var idx = [];
  samples.forEach(function (s, i) { if (s.t >= f.from) idx.push(i); });
  drawSeries(root, f, samples, series, idx);
  var readout = addReadout(root, f, samples, series, idx);
  box.replaceChildren(root, readout);
}

/* One swatch and name per item ({name, colour}) into the list #id. */
export function legend(id, items) {
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
