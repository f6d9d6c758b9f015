// DOM building without innerHTML (every text is a text node), and the formats the pages share.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else el.setAttribute(name, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// A table: columns are [title, (row) => cell, className?]; `empty` when there are no rows.
export function table(columns, rows, empty = "nothing yet", attrs = {}) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, columns.map(([title, , cls]) => h("th", { class: cls }, title)))),
    h(
      "tbody",
      {},
      rows.map((row) => h("tr", {}, columns.map(([, cell, cls]) => h("td", { class: cls }, cell(row))))),
    ),
  );
}

export const card = (title, ...children) =>
  h("section", { class: "card" }, title ? h("h2", {}, title) : null, ...children);

export const stat = (label, value, note) =>
  h("div", { class: "stat" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value),
    note ? h("div", { class: "note" }, note) : null);

export const badge = (text, kind) => h("span", { class: `badge ${kind || String(text).toLowerCase()}` }, text);

export const link = (href, text) => h("a", { href }, text);

export function money(value, places = 2) {
  if (value === null || value === undefined) return "—";
  const n = Number(value);
  if (n < 0) return `−${money(-n, places)}`;
  return `$${n.toLocaleString("en-US", { minimumFractionDigits: places, maximumFractionDigits: Math.max(places, 4) })}`;
}

export function clock(at) {
  if (!at) return "—";
  const d = new Date(at * 1000);
  return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

// A short time: the date only when it is not today.
export function when(at) {
  if (!at) return "—";
  const iso = new Date(at * 1000).toISOString();
  const today = new Date().toISOString().slice(0, 10);
  return iso.slice(0, 10) === today ? iso.slice(11, 19) : `${iso.slice(0, 10)} ${iso.slice(11, 16)}`;
}

export function time(at) {
  return at ? new Date(at * 1000).toISOString().slice(11, 19) : "—";
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60 ? `${s % 60} s` : ""}`.trim();
  const hours = Math.floor(s / 3600);
  return `${hours} h ${Math.round((s % 3600) / 60)} min`;
}

export function elapsed(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const m = Math.floor(s / 60);
  const mm = String(m % 60).padStart(2, "0");
  const ss = String(s % 60).padStart(2, "0");
  return m >= 60 ? `${Math.floor(m / 60)}:${mm}:${ss}` : `${mm}:${ss}`;
}

// An error in a page: the API's message and hint, never a stack trace.
export function problem(error) {
  return h("div", { class: "problem", role: "alert" },
    h("strong", {}, error.message || String(error)),
    error.hint ? h("div", { class: "hint" }, error.hint) : null);
}
