/* submit.js - the Submit view: paste, pick an example or upload a job
 * document, POST it (with an optional Idempotency-Key), and show either
 * the accepted job (a link to its page) or the API's problem inline
 * (title, detail, field). Owns no state: the form holds it.
 *
 * Test hooks, kept stable: #submit-ok carries data-job; #submit-error
 * data-status. */
import { $, el } from "./dom.js";
import { authHeaders } from "./api.js";

const EXAMPLES = {
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

/* The API's problem document (title, detail, field) or, without one,
 * the status and text. */
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

/* POSTs the document as typed: the API, not the page, judges it. */
function onSubmit(onAccepted) {
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
      onAccepted();
    });
  }).catch(function (e) {
    showProblem(0, null, "could not reach atolld: " + e.message);
  }).then(function () { $("submit").disabled = false; });
}

/* onAccepted: called once a job was accepted (refresh, live.js). The form
 * starts with the small example. */
export function initSubmit(onAccepted) {
  $("submit").addEventListener("click", function () { onSubmit(onAccepted); });
  $("doc").addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "Enter") onSubmit(onAccepted);
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
  $("doc").value = JSON.stringify(EXAMPLES.small, null, 2);
}
