/* queue.js - the Queue view: queued jobs (S.queued) in admission order,
 * each with its slices, wait and the scheduler's reason it waits. Owns no
 * state.
 *
 * Test hooks, kept stable: items carry data-job-id; the reason is .reason. */
import { S } from "./state.js";
import { $, el } from "./dom.js";
import { jobColour, fmtAge } from "./format.js";
import { slicesText } from "./jobs.js";

export function renderQueue() {
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
