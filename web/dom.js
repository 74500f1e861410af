/* dom.js - the few DOM helpers every view builds with: look an element up,
 * make an HTML or SVG element. Holds no state. Text always goes in through
 * textContent, never innerHTML, since job names and documents are user
 * input. */

const SVGNS = "http://www.w3.org/2000/svg";

export function $(id) { return document.getElementById(id); }
export function el(tag, className, text) {
  var e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
export function svg(tag, attrs, text) {
  var e = document.createElementNS(SVGNS, tag);
  Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
  if (text !== undefined) e.textContent = String(text);
  return e;
}
export function has(v) { return v !== null && v !== undefined; }
