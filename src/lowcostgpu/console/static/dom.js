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

// A table: columns are [title, (row) => cell, className?, (row) => sortValue?]; `empty` when
// there are no rows. A column with a title sorts by a click on it (or Enter/Space: it is a
// button), ascending then descending, by its sort value or else the cell's text; more than
// `pageSize` rows are shown a page at a time (Previous / Next). `state` ({col, dir, page}),
// when the caller keeps it across redraws of a live page, keeps the order and the page;
// `rowClass(row)` names a class for a row.
const PAGE_SIZE = 50;
const collator = new Intl.Collator("en", { numeric: true, sensitivity: "base" });

function sortValue(column, row) {
  const [, cell, , key] = column;
  const value = key ? key(row) : cell(row);
  if (value === null || value === undefined) return "";
  if (typeof value === "number" || typeof value === "string") return value;
  if (value instanceof Node) return value.textContent;
  return append(document.createElement("span"), [value]).textContent;
}

function compare(a, b) {
  if (typeof a === "number" && typeof b === "number") return a - b;
  return collator.compare(String(a), String(b));
}

function sorted(columns, rows, state) {
  if (state.col === undefined || !columns[state.col]) return rows;
  const keyed = rows.map((row) => [sortValue(columns[state.col], row), row]);
  keyed.sort((a, b) => (state.dir === "desc" ? -compare(a[0], b[0]) : compare(a[0], b[0])));
  return keyed.map(([, row]) => row);
}

// A column's title: a button that sorts by it (ascending, then descending), aria-sort says how.
function titleCell([title, , cls], i, state, redraw) {
  if (!title) return h("th", { class: cls });
  const on = state.col === i;
  const dir = on ? (state.dir === "desc" ? "descending" : "ascending") : "none";
  return h("th", { class: cls, "aria-sort": dir },
    h("button", { type: "button", class: "sort", title: `sort by ${title}`, onclick: () => {
      state.dir = on && state.dir !== "desc" ? "desc" : "asc";
      state.col = i;
      state.page = 0;
      redraw(() => redraw.box.querySelector(`thead th:nth-child(${i + 1}) button`));
    } }, title, h("span", { class: "arrow", "aria-hidden": "true" }, on ? (state.dir === "desc" ? "▼" : "▲") : "↕")));
}

function pager(state, pages, text, redraw) {
  const go = (step, name, disabled) => h("button", { type: "button", "data-go": name, disabled, onclick: () => {
    state.page += step;
    redraw(() => redraw.box.querySelector(`.pager button[data-go="${name}"]:not([disabled])`)
      || redraw.box.querySelector(".pager button:not([disabled])"));
  } }, name === "prev" ? "‹ Previous" : "Next ›");
  return h("div", { class: "pager", role: "navigation", "aria-label": "pages" },
    go(-1, "prev", state.page === 0), h("span", { class: "muted", "aria-live": "polite" }, text),
    go(1, "next", state.page >= pages - 1));
}

export function table(columns, rows, empty = "nothing yet", attrs = {}, opts = {}) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  const { state = {}, rowClass, pageSize = PAGE_SIZE } = opts;
  const box = h("div", { class: "tablebox" });
  // Draws the current page; `focus` finds the control to give the focus back to after a click.
  const redraw = (focus) => {
    const all = sorted(columns, rows, state);
    const pages = Math.max(1, Math.ceil(all.length / pageSize));
    state.page = Math.min(Math.max(0, state.page || 0), pages - 1);
    const first = state.page * pageSize;
    const page = all.slice(first, first + pageSize);
    const where = `${first + 1}–${first + page.length} of ${all.length} · page ${state.page + 1} of ${pages}`;
    clear(box,
      h("table", attrs,
        h("thead", {}, h("tr", {}, columns.map((column, i) => titleCell(column, i, state, redraw)))),
        h("tbody", {}, page.map((row) => h("tr", { class: rowClass ? rowClass(row) : null },
          columns.map(([, cell, cls]) => h("td", { class: cls }, cell(row))))))),
      pages > 1 ? pager(state, pages, where, redraw) : null);
    if (focus) focus()?.focus();
  };
  redraw.box = box;
  redraw();
  return box;
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
  const minutes = Math.round((s % 3600) / 60);
  return minutes ? `${hours} h ${minutes} min` : `${hours} h`;
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
