// The public /v1 API, called with the key the user typed at login (kept in sessionStorage only).
const KEY = "lowcostgpu.key";
const ROLE = "lowcostgpu.role";

export const session = {
  key: () => sessionStorage.getItem(KEY),
  role: () => sessionStorage.getItem(ROLE),
  set(key, role) {
    sessionStorage.setItem(KEY, key);
    sessionStorage.setItem(ROLE, role);
  },
  clear() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(ROLE);
  },
};

// An error answer of the API: its status and the JSON body {code, message, hint, details}.
export class ApiError extends Error {
  constructor(status, body) {
    const message = body && body.message ? body.message : `HTTP ${status}`;
    super(message);
    this.status = status;
    this.code = body && body.code;
    this.hint = body && body.hint;
  }
}

async function call(method, path, { body, signal, text = false, key = session.key(), headers: answer = false } = {}) {
  const headers = { authorization: `Bearer ${key}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  const raw = await r.text();
  if (!r.ok) {
    let parsed = null;
    try { parsed = JSON.parse(raw); } catch { parsed = { message: raw }; }
    throw new ApiError(r.status, parsed);
  }
  if (text) return raw;
  const parsed = raw ? JSON.parse(raw) : null;
  return answer ? { body: parsed, headers: r.headers } : parsed;
}

export const api = {
  get: (path, opts) => call("GET", path, opts),
  page: (path, opts) => call("GET", path, { ...opts, headers: true }), // {body, headers}
  text: (path, opts) => call("GET", path, { ...opts, text: true }),
  post: (path, body, opts) => call("POST", path, { ...opts, body }),
  patch: (path, body, opts) => call("PATCH", path, { ...opts, body }),
  del: (path, opts) => call("DELETE", path, opts),
};

// Who a key belongs to: a customer's account, or the operator (the admin key).
export async function whoIs(key) {
  try {
    const account = await call("GET", "/v1/account", { key });
    return { role: "customer", name: account.name, id: account.id };
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 403) throw e;
  }
  await call("GET", "/v1/accounts", { key });
  return { role: "operator", name: "operator", id: null };
}

// Events are read only as far as a page shows them: the server filters them (an object id, or a
// prefix ending in * for a cluster and its nodes) and every answer says the account's latest seq
// (X-Events-Latest-Seq), read before the events, so the follow cursor is the larger of it and the
// last seq received — never a walk through the whole log.
async function eventsWithCursor(path, signal) {
  const { body, headers } = await call("GET", path, { signal, headers: true });
  const latest = Number(headers.get("X-Events-Latest-Seq") || 0);
  return { events: body, cursor: Math.max(latest, ...body.map((e) => e.seq)) };
}

// Where to follow the account's events from (for pages that only redraw on news).
export async function tailCursor(signal) {
  return (await eventsWithCursor("/v1/events?newest=true&limit=1", signal)).cursor;
}

// The newest `limit` events matching `query` before seq `before` (all when null), oldest first.
export async function recentEvents(query, { limit = 200, before = null, signal } = {}) {
  const upTo = before === null ? "" : `&before=${before}`;
  return eventsWithCursor(`/v1/events?newest=true&limit=${limit}${upTo}${query}`, signal);
}

// Every event matching `query` (a filter: one object's events), oldest first, and the cursor.
export async function allEvents(query, signal) {
  const first = await eventsWithCursor(`/v1/events?after=0&limit=1000${query}`, signal);
  const found = [...first.events];
  let page = first.events;
  while (page.length === 1000) {
    page = await api.get(`/v1/events?after=${page[page.length - 1].seq}&limit=1000${query}`, { signal });
    found.push(...page);
  }
  const last = found.length ? found[found.length - 1].seq : 0;
  return { events: found, cursor: Math.max(first.cursor, last) };
}

// Long-polls /v1/events from `after` until `signal` aborts; calls onEvents with each batch.
export async function follow(after, query, onEvents, signal) {
  let cursor = after;
  while (!signal.aborted) {
    try {
      const page = await api.get(`/v1/events?after=${cursor}&wait_s=20&limit=1000${query}`, { signal });
      if (page.length) {
        cursor = page[page.length - 1].seq;
        await onEvents(page);
      }
    } catch (e) {
      if (signal.aborted) return;
      await new Promise((done) => setTimeout(done, 2000)); // the server restarts: try again
    }
  }
}
