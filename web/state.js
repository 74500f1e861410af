/* state.js - everything the dashboard remembers between renders, in one
 * object, so that no other module keeps mutable state of its own: what the
 * API last said (islands, workers, jobs, the open job), what the user chose
 * (route, filter, selected job, chart range, shown process), the caches of
 * per-job fetches, the map's DOM cells, and the refresh/stream/timer
 * bookkeeping. Modules read and write S directly; they own no copies. */

export const S = {
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
  tenantsAt: 0, tenantsMinutes: 0,   /* when and for what range tenant bars were last asked */
  islandViews: new Map(),        /* island name -> its built map (cells kept across renders) */
  polls: 0, sseOpen: false, inflight: false, again: false,
  pollTimer: 0,                  /* polling while the event stream is down */
  armTimer: 0                    /* disarms the cancel button after 4 s */
};

/* A job's name from whatever the page already has (the open job, the
 * lists, the fetched documents); "" when unknown. */
export function jobName(id) {
  var k = String(id), j;
  if (S.detail && String(S.detail.id) === k) return S.detail.name;
  for (var i = 0; i < S.jobs.length; i++) if (String(S.jobs[i].id) === k) return S.jobs[i].name;
  for (i = 0; i < S.queued.length; i++) if (String(S.queued[i].id) === k) return S.queued[i].name;
  j = S.docs.get(k);
  return j && j.doc ? j.doc.name : "";
}
