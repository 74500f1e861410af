/* graph.js - the job page's dataflow graph: one lane per slice, one box
 * per computation (coloured by its state, with shard progress), one edge
 * per value an `input` op takes from another computation. Drawn from the
 * open job (S.detail, passed in); owns no state.
 *
 * Test hooks, kept stable: boxes are g.node with data-comp and data-state;
 * edges g.edge with data-from and data-to. */
import { $, el, svg, has } from "./dom.js";
import { fmtDur, shapeText } from "./format.js";

const NODE_W = 200, NODE_H = 62, COL_W = 270, LABEL_W = 150, ROW_H = 80, PAD = 14;

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

/* Where each box goes: its slice's lane, its depth's column, stacked in
 * rows where several share both; each lane as tall as its rows. */
function graphLayout(m) {
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
  return {
    laneRows: laneRows, laneTop: laneTop, W: LABEL_W + 24 + cols * COL_W, H: y,
    nodeXY: function (i) {
      var p = pos[i];
      return { x: LABEL_W + 24 + p.col * COL_W, y: laneTop[p.lane] + 10 + p.row * ROW_H };
    }
  };
}

/* One band per slice: its name, shape and where it runs (or wants to). */
function drawLanes(root, m, lay, j) {
  m.lanes.forEach(function (name, li) {
    var g = svg("g", { "class": "lane" });
    g.appendChild(svg("rect", { x: 0, y: lay.laneTop[li], width: lay.W, height: Math.max(1, lay.laneRows[li]) * ROW_H + PAD - 6, rx: 8 }));
    var want = (m.doc.slices || {})[name] || {};
    var got = j.slices && j.slices[name];
    g.appendChild(svg("text", { x: 14, y: lay.laneTop[li] + 26, "font-weight": 600, fill: "#e6ebf2" }, "slice " + name));
    g.appendChild(svg("text", { x: 14, y: lay.laneTop[li] + 44 },
                      shapeText(want.shape) + (got ? " on " + got.island : want.island ? " → " + want.island : " · any island")));
    root.appendChild(g);
  });
}

/* Edges: done once both ends succeeded, live while the value flows. */
function drawEdges(root, m, lay, stateOf) {
  m.edges.forEach(function (e) {
    var a = lay.nodeXY(e.from), b = lay.nodeXY(e.to);
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
}

/* The arrow head the edges' marker-end refers to. */
function arrowDefs() {
  var defs = svg("defs");
  var mk = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 4, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
  mk.appendChild(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#6b7790" }));
  defs.appendChild(mk);
  return defs;
}

/* One box per computation: name, run time (or state), seq, shards, ops. */
function drawNodes(root, m, lay, cstate, stateOf) {
  m.comps.forEach(function (c, i) {
    var p = lay.nodeXY(i), cs = cstate[i] || {};
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
}

/* The graph of job j, or "No document." when it has no computations. */
export function renderGraph(j) {
  var m = graphModel(j);
  var box = $("graph");
  if (!m.comps.length) { box.replaceChildren(el("p", "empty", "No document.")); return; }
  var lay = graphLayout(m);
  var cstate = j.computations || [];
  function stateOf(i) { return (cstate[i] && cstate[i].state) || "waiting"; }
  var root = svg("svg", { width: lay.W, height: lay.H, viewBox: "0 0 " + lay.W + " " + lay.H, role: "img",
                          "aria-label": "dataflow graph of job " + j.id });
  drawLanes(root, m, lay, j);
  drawEdges(root, m, lay, stateOf);
  root.insertBefore(arrowDefs(), root.firstChild);
  drawNodes(root, m, lay, cstate, stateOf);
  box.replaceChildren(root);
}
