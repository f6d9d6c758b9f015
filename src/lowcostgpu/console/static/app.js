// The console's shell: login with an API key, the navigation, and a page per URL fragment.
import { ApiError, session, whoIs } from "./api.js";
import { billingPage } from "./billing.js";
import { clusterPage, clustersPage } from "./clusters.js";
import { clear, h, problem } from "./dom.js";
import { eventsPage } from "./events.js";
import { accountsPage, fleetPage } from "./fleet.js";
import { instancePage, instancesPage } from "./instances.js";
import { volumesPage } from "./volumes.js";
import { webhookPage, webhooksPage } from "./webhooks.js";

const PAGES = {
  customer: [
    ["instances", "Instances", instancesPage, instancePage],
    ["volumes", "Volumes", volumesPage],
    ["clusters", "Clusters", clustersPage, clusterPage],
    ["events", "Events", eventsPage],
    ["webhooks", "Webhooks", webhooksPage, webhookPage],
    ["billing", "Billing", billingPage],
  ],
  operator: [
    ["fleet", "Fleet", fleetPage],
    ["accounts", "Accounts", accountsPage],
  ],
};

let current = new AbortController(); // aborted when the page changes: stops its long-polls

function loginPage(main, message) {
  const key = h("input", { type: "password", name: "key", placeholder: "lcg_…", autocomplete: "off", required: true });
  const error = h("div");
  const form = h("form", { class: "card", onsubmit: async (e) => {
    e.preventDefault();
    try {
      const who = await whoIs(key.value.trim());
      session.set(key.value.trim(), who.role);
      sessionStorage.setItem("lowcostgpu.name", who.name);
      location.hash = `#/${PAGES[who.role][0][0]}`;
      route();
    } catch (err) {
      clear(error, problem(err instanceof ApiError && err.status === 401
        ? { message: "This API key is not valid.", hint: "Use a key from `lowcostgpu login` or the admin key `serve` printed." }
        : err));
    }
  } },
  h("h2", {}, "Sign in with an API key"),
  h("p", { class: "muted" }, "Your account's key shows your instances, clusters, events and bills; the admin key shows the fleet. The key stays in this tab only."),
  h("label", { class: "field" }, "API key", key),
  h("p", {}, h("button", { class: "primary", type: "submit" }, "Sign in")),
  error);
  clear(main, h("div", { class: "login" }, message ? problem({ message }) : null, form));
  key.focus();
}

function renderNav(role, page) {
  clear(document.getElementById("nav"), PAGES[role].map(([name, title]) =>
    h("a", { href: `#/${name}`, class: name === page ? "active" : null }, title)));
  clear(document.getElementById("who"),
    h("span", {}, role === "operator" ? "operator (admin key)" : `account ${sessionStorage.getItem("lowcostgpu.name") || ""}`),
    h("button", { onclick: () => { session.clear(); location.hash = "#/"; route(); } }, "Sign out"));
}

export async function route() {
  current.abort();
  current = new AbortController();
  const main = document.getElementById("page");
  const role = session.role();
  if (!session.key() || !PAGES[role]) {
    clear(document.getElementById("nav"));
    clear(document.getElementById("who"));
    return loginPage(main);
  }
  const [name, id] = location.hash.replace(/^#\/?/, "").split("?")[0].split("/").map(decodeURIComponent);
  const entry = PAGES[role].find(([n]) => n === name) || PAGES[role][0];
  renderNav(role, entry[0]);
  const render = id && entry[3] ? entry[3] : entry[2];
  clear(main, h("p", { class: "empty" }, "Loading…"));
  try {
    await render(main, id, { signal: current.signal });
  } catch (err) {
    if (current.signal.aborted) return;
    if (err instanceof ApiError && err.status === 401) {
      session.clear();
      return loginPage(main, "Your key is no longer valid; sign in again.");
    }
    clear(main, problem(err));
  }
}

window.addEventListener("hashchange", route);
route();
