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

async function call(method, path, { body, signal, text = false, key = session.key() } = {}) {
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
  return raw ? JSON.parse(raw) : null;
}

export const api = {
  get: (path, opts) => call("GET", path, opts),
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

// Every event matching `query` (paged by seq), oldest first; the last seq is the follow cursor.
export async function allEvents(query = "", signal) {
  const found = [];
  let after = 0;
  for (;;) {
    const page = await api.get(`/v1/events?after=${after}&limit=1000${query}`, { signal });
    found.push(...page);
    if (page.length < 1000) return found;
    after = page[page.length - 1].seq;
  }
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
