/* format.js - how values look on the page: the colours of job states,
 * islands and jobs, and the texts of ages, durations, clock times and
 * shapes. Holds no state. */

export const STATE_COLOURS = { queued: "#e3b341", allocated: "#c297ff", running: "#58a6ff",
                               succeeded: "#56d364", failed: "#ff7b72", cancelled: "#8b96a8" };
export const ISLAND_COLOURS = ["#58a6ff", "#f78166", "#56d364", "#d2a8ff", "#e3b341", "#39c5cf"];

/* A stable, well-spread colour per job id (golden-angle hues). */
export function jobColour(id) {
  var hue = (Number(id) * 137.508 + 200) % 360;
  return "hsl(" + hue.toFixed(1) + " 68% 52%)";
}

export function fmtAge(seconds) {
  if (!isFinite(seconds) || seconds < 0) return "–";
  var s = Math.floor(seconds);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
}
export function fmtDur(us) {
  if (!isFinite(us) || us < 0) return "–";
  if (us < 1000) return (us / 1000).toFixed(2) + " ms";
  if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 1 : 0) + " ms";
  if (us < 6e7) return (us / 1e6).toFixed(2) + " s";
  return fmtAge(us / 1e6);
}
export function fmtClock(us) {
  if (!us) return "–";
  var d = new Date(us / 1000);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}
/* n bytes as "1.5 MiB" (or KiB, or B). */
export function fmtBytes(n) {
  if (n >= 1048576) return (n / 1048576).toFixed(1) + " MiB";
  if (n >= 1024) return (n / 1024).toFixed(1) + " KiB";
  return n + " B";
}

export function shapeText(shape) { return Array.isArray(shape) ? shape.join("×") : "?"; }
