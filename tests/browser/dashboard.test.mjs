// dashboard.test.mjs - the dashboard in Debian's headless chromium (driven by
// playwright-core, no browser download) against a real atolld with real
// workers, started by run.sh, which passes:
//   ATOLL_URL          http://127.0.0.1:PORT of atolld (islands west=4x4 and
//                      the 3-D east=2x2x2, every device covered by a worker)
//   CHROMIUM           the browser binary (default /usr/bin/chromium)
//   ATOLL_SCREENSHOTS  optional folder: PNGs of the main views go there
//
// What it checks, each on the live page (no reloads: a marker set on
// window at the start must survive to the end):
//   1. the map draws every device of both islands, 3-D as layers;
//   2. a job submitted from the page's form lights up exactly the devices
//      GET /v1/jobs/{id} says it holds, and hovering one names its worker,
//      job and slice; selecting the job lights its slices;
//   3. the job page's graph (2 boxes, 1 edge) and progress move to success
//      by themselves, passing through a running state on the way, and the
//      result preview appears; a global job shows its partitioned program;
//      a user's program (run) shows its processes, exit codes and output;
//   4. a job that cannot fit yet shows its pending reason in the queue;
//   5. the cancel button cancels (state, devices freed, waiting job admitted);
//   6. a bad JSON paste and an unknown op show the API's error inline;
//   7. the utilization view plots samples atolld recorded.
// Exits 0 when all pass; prints "FAIL: ..." and exits 1 on the first failure.
import { chromium } from "playwright-core";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const URL = process.env.ATOLL_URL;
const SHOTS = process.env.ATOLL_SCREENSHOTS || "";
const EXE = process.env.CHROMIUM || "/usr/bin/chromium";
if (!URL) { console.error("FAIL: ATOLL_URL is not set (run tests/browser/run.sh)"); process.exit(2); }

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const note = (m) => console.error("-- " + m);
class Fail extends Error {}
function check(cond, msg) { if (!cond) throw new Fail(msg); }

// Retries fn (async, returns a truthy value when done) every 100 ms until
// it is truthy or `seconds` passed; the failure names what was awaited and
// the last value seen.
async function until(what, seconds, fn) {
  const deadline = Date.now() + seconds * 1000;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) throw new Fail(`${what}: not true within ${seconds} s (last: ${JSON.stringify(last)})`);
    await sleep(100);
  }
}

async function api(path, init) {
  const r = await fetch(URL + path, init);
  const text = await r.text();
  let body = null;
  try { body = JSON.parse(text); } catch { body = text; }
  return { status: r.status, body };
}
const submitApi = (doc) => api("/v1/jobs", { method: "POST", headers: { "Content-Type": "application/json" },
                                             body: JSON.stringify(doc) });

// A job holding one slice for `us` µs (compute ops take at most 10 s each).
function holdJob(name, shape, island, us, priority = 0) {
  const ops = [{ op: "shard_index", out: "i" }];
  for (let k = 0; us > 0; k++, us -= 10000000) ops.push({ op: "compute", out: "c" + k, us: Math.min(us, 10000000) });
  ops.push({ op: "all_reduce", out: "s", args: ["i"], reduce: "sum" });
  return { name, priority, slices: { a: island ? { shape, island } : { shape } },
           computations: [{ name: "hold", slice: "a", ops, outputs: ["s"] }] };
}

// Two computations on two slices, an edge between them; long enough that
// the page sees it running.
const PIPELINE = {
  name: "browser-pipeline", priority: 0,
  slices: { a: { shape: [2, 2], island: "west" }, b: { shape: [2, 2], island: "east" } },
  computations: [
    { name: "produce", slice: "a", ops: [
      { op: "shard_index", out: "i" }, { op: "fill", out: "x", shape: [4], value: 1.0 },
      { op: "mul", out: "y", args: ["x", "i"] }, { op: "compute", out: "c", us: 4000000 },
      { op: "all_reduce", out: "z", args: ["y"], reduce: "sum" }], outputs: ["z"] },
    { name: "consume", slice: "b", ops: [
      { op: "input", out: "z", from: "produce.z" }, { op: "compute", out: "c", us: 2000000 },
      { op: "scale", out: "w", args: ["z"], factor: 0.5 }], outputs: ["w"] }],
};

// A user's program (DESIGN Part F): two processes; process 1 exits 3, so
// the job fails (no retries) with process 0 exited 0.
// Rank 1 fails only once rank 0 is through (its file exists): a failing
// process ends the whole gang, so without the wait a loaded machine could
// see rank 0 killed before it exited 0.
const RUN_DONE = `/tmp/atoll-browser-run-${process.pid}-${Date.now()}`;
const RUNJOB = {
  name: "browser-run", max_retries: 0, slices: { r: { shape: [2], island: "west" } },
  computations: [{ name: "train", slice: "r", run: {
    command: ["/bin/sh", "-c", `echo "hello from rank $RANK"; if [ "$RANK" = 0 ]; then : > ${RUN_DONE}; ` +
      `else while [ ! -e ${RUN_DONE} ]; do sleep 0.05; done; echo "rank $RANK failing" >&2; exit 3; fi`] } }],
};

// A global computation (DESIGN Part C): Megatron's MLP on data x model.
const MEGATRON = {
  name: "browser-megatron",
  slices: { m: { shape: [2, 2], axes: ["data", "model"], island: "west" } },
  computations: [{ name: "mlp", slice: "m", global: true, outputs: ["y"], ops: [
    { op: "fill", out: "x", shape: [4, 8], value: 0.1, sharding: ["data", null] },
    { op: "fill", out: "w1", shape: [8, 16], value: 0.05, sharding: [null, "model"] },
    { op: "fill", out: "w2", shape: [16, 8], value: 0.02, sharding: ["model", null] },
    { op: "einsum", out: "h", args: ["x", "w1"], spec: "bd,dh->bh" },
    { op: "relu", out: "r", args: ["h"] },
    { op: "einsum", out: "y", args: ["r", "w2"], spec: "bh,hd->bd", sharding: ["data", null] }] }],
};

async function main() {
  if (SHOTS) mkdirSync(SHOTS, { recursive: true });
  const browser = await chromium.launch({
    executablePath: EXE, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const consoleErrors = [];
    page.on("pageerror", (e) => consoleErrors.push(String(e)));
    const shot = async (name) => {
      if (!SHOTS) return;
      await sleep(300);   // let transitions settle
      await page.screenshot({ path: join(SHOTS, name + ".png") });
      note("screenshot " + name + ".png");
    };
    const dom = (fn, arg) => page.evaluate(fn, arg);

    // ---------------------------------------------------------- 1. map
    await page.goto(URL + "/");
    await dom(() => { window.__atollMarker = 1; });
    await until("the event stream opens", 15, () => dom(() => document.body.dataset.sse === "open"));
    await until("the page loads data", 15, () => dom(() => Number(document.body.dataset.polls) > 0));
    const counts = await until("16 west and 8 east device cells, all free", 15, () => dom(() => {
      const c = (isl, st) => document.querySelectorAll(`.device[data-island="${isl}"]` + (st ? `[data-state="${st}"]` : "")).length;
      const v = { west: c("west"), east: c("east"), free: c("west", "free") + c("east", "free") };
      return v.west === 16 && v.east === 8 && v.free === 24 ? v : null;
    }));
    const eastLayers = await dom(() => document.querySelectorAll('.island[data-island="east"] .layer').length);
    check(eastLayers === 2, `east (2x2x2) should be drawn as 2 layers, found ${eastLayers}`);
    note(`map: ${counts.west} west + ${counts.east} east devices, east in ${eastLayers} layers`);

    // ---------------------------------------------------------- 2. submit from the page
    await page.goto(URL + "/#/submit");
    await page.fill("#doc", JSON.stringify(PIPELINE, null, 2));
    await page.click("#submit");
    const jobId = await until("the form reports the accepted job", 10, () =>
      dom(() => { const ok = document.getElementById("submit-ok"); return !ok.hidden && ok.dataset.job; }));
    note(`job ${jobId} submitted from the page`);
    await page.click("#submit-ok a");
    await until("the job page opens", 5, () => dom((id) => location.hash === "#/jobs/" + id, jobId));

    // ---------------------------------------------------------- 3. job page live to success
    const graph = await until("the graph shows 2 computations and 1 edge", 10, () => dom(() => {
      const nodes = [...document.querySelectorAll("#graph .node")].map((n) => n.dataset.comp);
      const edges = [...document.querySelectorAll("#graph .edge")].map((e) => e.dataset.from + "->" + e.dataset.to);
      return nodes.length === 2 && edges.length === 1 ? { nodes, edges } : null;
    }));
    check(graph.edges[0] === "produce->consume", `edge should be produce->consume, got ${graph.edges[0]}`);
    // The page itself shows it getting its devices and running.
    const states = new Set(), compStates = new Set();
    const watch = () => dom(() => ({
      state: document.getElementById("job-state").dataset.state,
      progress: document.getElementById("job-progress-text").textContent,
      nodes: [...document.querySelectorAll("#graph .node")].map((n) => n.dataset.comp + ":" + n.dataset.state),
    })).then((v) => { states.add(v.state); v.nodes.forEach((n) => compStates.add(n)); return v; });
    await until("the job page shows the job allocated or running", 20, async () =>
      ["allocated", "running"].includes((await watch()).state));
    // While it runs: the map shows exactly the devices the API says it holds.
    const held = (await api("/v1/jobs/" + jobId)).body;
    check(["allocated", "running"].includes(held.state) && Object.keys(held.slices).length === 2,
          `the API should show job ${jobId} holding 2 slices: ${JSON.stringify(held).slice(0, 300)}`);
    const want = {};
    for (const [name, s] of Object.entries(held.slices))
      for (const d of s.devices) want[`${s.island}/${d.index}`] = name;
    await page.goto(URL + "/#/");
    const onMap = await until("the map shows the job's 8 devices", 10, () => dom((id) => {
      const cells = [...document.querySelectorAll(`.device[data-job="${id}"]`)];
      return cells.length === 8 ? cells.map((c) => [`${c.dataset.island}/${c.dataset.index}`, c.dataset.slice, c.dataset.state]) : null;
    }, jobId));
    for (const [key, slice, state] of onMap) {
      check(want[key] === slice, `map cell ${key} shows slice ${slice}, the API says ${want[key]}`);
      check(state === "allocated", `map cell ${key} is ${state}, expected allocated`);
    }
    const busy = await dom(() => document.querySelectorAll('.device[data-state="allocated"]').length);
    check(busy === 8, `exactly 8 devices should be allocated, the map shows ${busy}`);
    note(`map matches the API: ${Object.keys(want).sort().join(" ")}`);
    // Hover names worker, job and slice.
    const [firstKey] = Object.keys(want);
    const [isl, idx] = firstKey.split("/");
    await page.hover(`.device[data-island="${isl}"][data-index="${idx}"]`);
    const tip = await until("a tooltip appears on hover", 5, () => dom(() => {
      const t = document.getElementById("tooltip"); return !t.hidden && t.textContent;
    }));
    check(/worker \d+/.test(tip), `tooltip should name the worker: ${tip}`);
    check(tip.includes(`job ${jobId}`) && tip.includes("browser-pipeline"), `tooltip should name job ${jobId}: ${tip}`);
    check(tip.includes(`slice ${want[firstKey]}`), `tooltip should name slice ${want[firstKey]}: ${tip}`);
    // Selecting the job lights its devices (and only them).
    await page.click(`#jobs-body tr[data-job-id="${jobId}"] td.detail`);
    const lit = await dom((id) => ({ sel: document.querySelectorAll(".device.sel").length,
      mine: document.querySelectorAll(`.device.sel[data-job="${id}"]`).length,
      selecting: document.getElementById("islands").classList.contains("selecting") }), jobId);
    check(lit.selecting && lit.sel === 8 && lit.mine === 8, `selecting the job should light its 8 devices: ${JSON.stringify(lit)}`);
    await shot("cluster");
    await page.mouse.move(5, 5);

    // Back on the job page: watch it go to success by itself.
    await page.goto(URL + "/#/jobs/" + jobId);
    let shotRunning = false;
    await until("the job page reaches succeeded with 2/2 computations", 60, async () => {
      const v = await watch();
      if (!shotRunning && v.nodes.includes("produce:succeeded") && v.state === "running") {
        shotRunning = true;
        await shot("job-running");
      }
      return v.state === "succeeded" && v.progress.startsWith("2 / 2") &&
             v.nodes.every((n) => n.endsWith(":succeeded")) ? v : null;
    });
    check(states.has("running") || states.has("allocated"),
          `the page should have shown the job running before success (saw ${[...states]})`);
    check([...compStates].some((s) => s.endsWith(":dispatched")),
          `the graph should have shown a computation in flight (saw ${[...compStates]})`);
    note(`job page went ${[...states].filter(Boolean).join(" -> ")} live; graph states seen: ${[...compStates].join(", ")}`);
    const result = await until("the result preview shows both outputs", 10, () => dom(() => {
      const t = document.getElementById("result").textContent;
      return t.includes("produce.z") && t.includes("consume.w") ? t : null;
    }));
    check(result.includes("6"), `produce.z sums to 6 on each shard: ${result.slice(0, 200)}`);
    const timingRows = await dom(() => document.querySelectorAll("#timings tbody tr").length);
    check(timingRows === 2, `timings table should have 2 rows, has ${timingRows}`);
    await shot("job");

    // ---------------------------------------------------------- 3b. a global program
    // (GSPMD): the job page lists the partitioned program, its shardings and
    // the one collective the partitioner inserted.
    const meg = await submitApi(MEGATRON);
    check(meg.status === 201, `global submit: ${meg.status} ${JSON.stringify(meg.body)}`);
    await page.goto(URL + "/#/jobs/" + meg.body.id);
    const prog = await until("the partitioned program is shown", 30, () => dom(() => {
      const p = document.getElementById("program-panel");
      const rows = [...document.querySelectorAll("#program tr.inserted")].map((r) => r.textContent);
      const text = document.getElementById("program").textContent;
      return !p.hidden && /1 collective inserted/.test(text) ? { rows, text } : null;
    }));
    const colls = prog.rows.filter((r) => /all_reduce|all_gather|reduce_scatter|all_to_all/.test(r));
    check(colls.length === 1 && /all_reduce/.test(colls[0]),
          `exactly one inserted all_reduce should be marked: ${JSON.stringify(prog.rows)}`);
    check(/\[data, ·\]/.test(prog.text) && /partial over model/.test(prog.text),
          `shardings should be drawn ([data, ·], partial over model): ${prog.text.slice(0, 300)}`);
    await shot("job-program");

    // ---------------------------------------------------------- 3c. a user's program
    // (DESIGN Part F): the processes panel lists both processes with their
    // exit codes; clicking one shows its output.
    const run = await submitApi(RUNJOB);
    check(run.status === 201, `run submit: ${run.status} ${JSON.stringify(run.body)}`);
    await page.goto(URL + "/#/jobs/" + run.body.id);
    const procs = await until("the processes panel shows both processes ended", 30, () => dom(() => {
      const rows = [...document.querySelectorAll("#procs tbody tr")].map((r) =>
        [...r.cells].map((c) => c.textContent));
      return !document.getElementById("procs-panel").hidden && rows.length === 2 &&
        document.getElementById("job-state").dataset.state === "failed" &&
        rows.every((r) => r[5] !== "running") ? rows : null;
    }));
    const byProc = Object.fromEntries(procs.map((r) => [r[2], r]));
    check(byProc["0"] && byProc["0"][5] === "exited" && byProc["0"][6] === "0" &&
          byProc["1"] && byProc["1"][5] === "exited" && byProc["1"][6] === "3",
          `process 0 should have exited 0 and process 1 exited 3: ${JSON.stringify(procs)}`);
    await page.click('#procs tbody tr[data-key$="/1"]');
    const log = await until("the output of process 1 is shown", 10, () => dom(() => {
      const t = document.getElementById("proc-log").textContent;
      return /hello from rank 1/.test(t) && /rank 1 failing/.test(t) ? t : null;
    }));
    note(`run job ${run.body.id}: processes ${JSON.stringify(procs.map((r) => r[2] + ":" + r[6]))}; log "${log.trim().replace(/\n/g, " | ")}"`);
    const err = await dom(() => document.getElementById("job-error").textContent);
    check(/process 1/.test(err), `the job's error should name process 1: ${err}`);
    rmSync(RUN_DONE, { force: true });
    await shot("job-processes");

    // ---------------------------------------------------------- 4. pending reason
    const blocker = await submitApi(holdJob("blocker", [2, 2], "west", 60000000));
    check(blocker.status === 201, `blocker submit: ${blocker.status} ${JSON.stringify(blocker.body)}`);
    await until("the blocker holds west devices", 20, async () =>
      ["allocated", "running"].includes((await api("/v1/jobs/" + blocker.body.id)).body.state));
    const big = await submitApi(holdJob("whole-west", [4, 4], "west", 200000, 5));
    check(big.status === 201, `big submit: ${big.status} ${JSON.stringify(big.body)}`);
    await page.goto(URL + "/#/queue");
    const reason = await until("the queue shows why the 4x4 job waits", 15, () => dom((id) => {
      const li = document.querySelector(`#queue li[data-job-id="${id}"] .reason`);
      return li && /needs a \[?4[x,×]4\]? slice/.test(li.textContent) && /largest free block/.test(li.textContent) ? li.textContent : null;
    }, String(big.body.id)));
    note(`queue: job ${big.body.id} waits: "${reason}"`);
    const badge = await dom(() => document.getElementById("queue-count").textContent);
    check(badge === "1", `the queue tab should count 1 waiting job, shows ${badge}`);
    await shot("queue");

    // ---------------------------------------------------------- 5. cancel
    await page.goto(URL + "/#/jobs/" + blocker.body.id);
    await until("the blocker's page shows it running", 10, () =>
      dom(() => ["allocated", "running"].includes(document.getElementById("job-state").dataset.state)));
    await page.click("#cancel");     // arms
    await page.click("#cancel");     // confirms
    await until("the page shows the blocker cancelled", 10, () =>
      dom(() => document.getElementById("job-state").dataset.state === "cancelled"));
    check((await api("/v1/jobs/" + blocker.body.id)).body.state === "cancelled", "the API should say cancelled too");
    await page.goto(URL + "/#/");
    await until("the cancelled job's devices are free again and the waiting job got west", 30, () => dom((ids) => {
      const mine = document.querySelectorAll(`.device[data-job="${ids[0]}"]`).length;
      const bigRow = document.querySelector(`#jobs-body tr[data-job-id="${ids[1]}"]`);
      return mine === 0 && bigRow && bigRow.dataset.state !== "queued";
    }, [String(blocker.body.id), String(big.body.id)]));
    note(`cancel: job ${blocker.body.id} cancelled from the page, job ${big.body.id} admitted`);

    // ---------------------------------------------------------- 5b. shared devices
    // Two shared jobs (DESIGN Part D) each on all 8 east devices (placement
    // is least loaded first, so smaller slices would not overlap): each cell
    // is drawn in both jobs' colours and its tooltip names both.
    const shareDoc = (name) => Object.assign(holdJob(name, [2, 2, 2], "east", 20000000), { sharing: "shared" });
    const sa = await submitApi(shareDoc("share-a")), sb = await submitApi(shareDoc("share-b"));
    check(sa.status === 201 && sb.status === 201, `shared submits: ${sa.status} ${sb.status}`);
    const sharedCells = await until("8 east cells drawn split between both shared jobs", 20, () => dom((ids) => {
      const cells = [...document.querySelectorAll('.device[data-island="east"][data-shared="2"]')];
      const ok = cells.filter((c) => ids.every((id) => c.dataset.holders.split(" ").includes(id)) &&
                               /linear-gradient/.test(getComputedStyle(c).backgroundImage));
      return ok.length === 8 ? ok.map((c) => c.dataset.index) : null;
    }, [String(sa.body.id), String(sb.body.id)]));
    await page.hover(`.device[data-island="east"][data-index="${sharedCells[0]}"]`);
    const shareTip = await until("the tooltip names both holders and their memory", 5, () => dom(() => {
      const t = document.getElementById("tooltip");
      return !t.hidden && /shared by/.test(t.textContent) && /held by shared jobs/.test(t.textContent) && t.textContent;
    }));
    check(shareTip.includes(`job ${sa.body.id}`) && shareTip.includes(`job ${sb.body.id}`),
          `the shared device's tooltip should name jobs ${sa.body.id} and ${sb.body.id}: ${shareTip}`);
    // Each hold job's one computation defines four scalars (16 bytes, 32 for
    // both); the workers' default 1024 MiB store over 4 devices is 256 MiB each.
    check(shareTip.includes("32 B of 256.0 MiB held by shared jobs"),
          `the shared device's tooltip should show its memory: ${shareTip}`);
    await shot("shared");
    for (const id of [sa.body.id, sb.body.id])
      check((await api("/v1/jobs/" + id, { method: "DELETE" })).status === 200, `cancel shared job ${id}`);
    note(`shared: east devices ${sharedCells.join(",")} drawn split between jobs ${sa.body.id} and ${sb.body.id}`);

    // ---------------------------------------------------------- 6. errors inline
    await page.goto(URL + "/#/submit");
    await page.fill("#doc", '{"name": "oops", "slices": {,}');
    await page.click("#submit");
    const err1 = await until("a bad JSON paste shows the API's error", 10, () => dom(() => {
      const b = document.getElementById("submit-error"); return !b.hidden && b.textContent;
    }));
    check(/Bad Request/.test(err1) && /invalid JSON/.test(err1) && /line 1/.test(err1), `bad JSON error: ${err1}`);
    note(`bad JSON: "${err1}"`);
    await page.fill("#doc", JSON.stringify({ name: "typo", slices: { a: { shape: [2] } },
      computations: [{ name: "c", slice: "a", ops: [{ op: "fil", out: "x", shape: [1], value: 1 }], outputs: ["x"] }] }, null, 2));
    await page.click("#submit");
    const err2 = await until("an unknown op shows the API's error with its field", 10, () => dom(() => {
      const b = document.getElementById("submit-error"); return !b.hidden && /field/.test(b.textContent) && b.textContent;
    }));
    check(/computations\[0\]\.ops\[0\]/.test(err2), `the error should name the field: ${err2}`);
    await shot("submit-error");

    // ---------------------------------------------------------- 7. utilization
    await page.goto(URL + "/#/utilization");
    const plotted = await until("the utilization charts plot busy west devices", 15, () => dom(() => {
      const p = document.querySelector('#chart-busy path[data-series="west"]');
      const j = document.querySelector('#chart-jobs path[data-series="running"]');
      return p && j && p.getAttribute("d").split("L").length > 3 ? p.getAttribute("d").length : null;
    }));
    const u = (await api("/v1/stats/utilization?minutes=15")).body;
    check(u.samples.some((s) => s.busy.west >= 4), "atolld's samples should show busy west devices");
    note(`utilization: ${u.samples.length} samples, path of ${plotted} chars`);
    await page.click('.range button[data-minutes="5"]');   // a short run reads better at 5 min
    await until("the 5 min range is drawn", 5, () => dom(() => /−5m/.test(document.getElementById("chart-busy").textContent)));
    // Device time by tenant (DESIGN Part D): without auth each job is its
    // own tenant; the jobs above used devices within the last 5 minutes.
    const bars = await until("device time by tenant is drawn", 10, () => dom(() => {
      const rows = [...document.querySelectorAll("#tenant-bars .tenant-row")];
      return rows.length >= 1 ? rows.map((r) => r.textContent) : null;
    }));
    check(bars.some((t) => /^job-\d+/.test(t) && /share/.test(t)), `tenant bars: ${JSON.stringify(bars)}`);
    await shot("utilization");

    check(await dom(() => window.__atollMarker === 1), "the page reloaded (marker lost): updates must be live");
    check(consoleErrors.length === 0, `page errors: ${consoleErrors.join("; ")}`);
    console.log("PASS: dashboard browser tests (map, submit, live job page, partitioned program, pending reason, cancel, shared devices, errors, utilization)");
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.error("FAIL: " + (e instanceof Fail ? e.message : e && e.stack ? e.stack : e));
  process.exit(1);
});
