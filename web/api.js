/* api.js - talking to atolld: the bearer token (if the page was opened
 * with one), JSON GETs, a job's parts fetched once into their caches in S,
 * and the job states the API calls terminal. Holds no state beyond the
 * token, read once at load.
 *
 * Data the page reads: GET v1/islands, v1/workers, v1/jobs (?state=),
 * v1/jobs/{id} (with its `document`), v1/jobs/{id}/result, .../program,
 * .../processes, .../logs, v1/stats/utilization, v1/stats/tenants. */

import { S } from "./state.js";

export const TERMINAL = { succeeded: 1, failed: 1, cancelled: 1 };

/* When atolld requires tokens, open the page once as /?token=TOKEN (a
 * read or tenant token): it is kept in localStorage and sent as a bearer
 * token (and as access_token on the event stream, which cannot carry
 * headers). */
export const TOKEN = (function () {
  var m = /[?&]token=([^&#]+)/.exec(window.location.search);
  try {
    if (m) window.localStorage.setItem("atoll-token", decodeURIComponent(m[1]));
    return window.localStorage.getItem("atoll-token") || "";
  } catch (e) { return m ? decodeURIComponent(m[1]) : ""; }
})();
export function authHeaders(h) {
  h = h || {};
  if (TOKEN) h.Authorization = "Bearer " + TOKEN;
  return h;
}

export function getJSON(url) {
  return fetch(url, { cache: "no-store", headers: authHeaders({ Accept: "application/json" }) })
    .then(function (r) {
      if (!r.ok) throw new Error(url + ": HTTP " + r.status);
      return r.json();
    });
}

/* A part of a job that does not change once there (GET v1/jobs/{id}/{part}:
 * its result, its program), asked for once and kept in `cache`. Returns
 * null when this call started the request, {loading: true} while it runs,
 * then the part; when it arrives the job is redrawn with redraw(S.detail)
 * if it is still the open one. A failed request is asked again next time. */
export function jobPart(cache, id, part, redraw) {
  var got = cache.get(id);
  if (got) return got;
  cache.set(id, { loading: true });
  getJSON("v1/jobs/" + id + "/" + part).then(function (r) {
    cache.set(id, r);
    if (S.detail && String(S.detail.id) === id) redraw(S.detail);
  }).catch(function () { cache.delete(id); });
  return null;
}
