/* program.js - the job page's Partitioned program panel: for a job with a
 * global computation, each computation's ops as every shard runs them
 * (local shapes, shardings), the partitioner's inserted collectives
 * marked. The fetched programs are cached in S.programs (state.js). */
import { S } from "./state.js";
import { $, el } from "./dom.js";
import { jobPart } from "./api.js";

/* A sharding as the page writes it: "[data, ·]" per dimension (· for
 * replicated), "partial over model" for a pending reduction. */
function fmtSharding(sh) {
  if (sh === null || sh === undefined) return "–";
  var dims = Array.isArray(sh) ? sh : sh.dims;
  var text = "[" + dims.map(function (d) {
    return d === null ? "·" : Array.isArray(d) ? d.join("×") : d;
  }).join(", ") + "]";
  return sh.partial ? text + " partial over " + sh.partial.join(", ") : text;
}

/* The partitioner's work (GET /v1/jobs/{id}/program), fetched once per
 * job that has a global computation. */
export function renderProgram(j) {
  var panel = $("program-panel"), id = String(j.id);
  var doc = j.document || {};
  var global = (doc.computations || []).some(function (c) { return c.global === true; });
  panel.hidden = !global;
  if (!global) return;
  var prog = jobPart(S.programs, id, "program", renderProgram);
  if (!prog || prog.loading) return;
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
