// Webhooks: endpoints (add, test, enable, delete), one endpoint's deliveries with every attempt,
// and replay.
import { api } from "./api.js";
import { badge, card, clear, clock, h, link, problem, table, when } from "./dom.js";

export async function webhooksPage(main, _id, { signal }) {
  const list = h("div");
  const shown = h("div");
  const order = {};
  const draw = async () => {
    const hooks = await api.get("/v1/webhooks", { signal });
    clear(list, table([
      ["Endpoint", (w) => link(`#/webhooks/${w.id}`, w.id), "mono"],
      ["URL", (w) => w.url, "mono"],
      ["Reasons", (w) => (w.reasons.length ? w.reasons.join(", ") : "every event")],
      ["State", (w) => [badge(w.status), w.disabled_reason ? h("div", { class: "muted" }, w.disabled_reason) : null]],
      ["Created", (w) => clock(w.created_at), null, (w) => w.created_at],
    ], hooks, "No webhooks yet.", { id: "webhooks" }, { state: order }));
  };
  const url = h("input", { name: "url", placeholder: "https://example.com/hooks/lowcostgpu", style: "width:360px", required: true });
  const reasons = h("input", { name: "reasons", placeholder: "Preempted, Interrupted (empty: every event)", style: "width:300px" });
  const form = h("form", { class: "inline", onsubmit: async (e) => {
    e.preventDefault();
    clear(shown);
    try {
      const wanted = reasons.value.split(",").map((r) => r.trim()).filter(Boolean);
      const made = await api.post("/v1/webhooks", { url: url.value.trim(), reasons: wanted });
      clear(shown, h("div", { class: "notice" }, "Endpoint ", h("b", {}, made.id), " added. Its signing secret, shown this once: ",
        h("span", { class: "secret" }, made.secret)));
      await draw();
    } catch (err) { clear(shown, problem(err)); }
  } }, h("label", { class: "field" }, "URL", url), h("label", { class: "field" }, "Reasons", reasons),
  h("button", { class: "primary", type: "submit" }, "Add webhook"));
  await draw();
  clear(main, h("h1", {}, "Webhooks"), card(null, list), card("New endpoint", form, shown,
    h("p", { class: "muted" }, "Events are POSTed signed per Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature), at least once and in order per endpoint.")));
}

function attempts(d) {
  if (!d.tries.length) return "—";
  return d.tries.map((a) => h("div", { class: "mono" },
    `#${a.n} ${clock(a.at).slice(11, 19)} → ${a.status_code ?? "no answer"} · ${a.latency_ms} ms${a.error ? ` · ${a.error}` : ""}`));
}

export async function webhookPage(main, id, { signal }) {
  const hooks = await api.get("/v1/webhooks", { signal });
  const hook = hooks.find((w) => w.id === id);
  if (!hook) {
    clear(main, h("h1", {}, "Webhook not found"), problem({ message: `No webhook ${id} in your account (not found).` }));
    return;
  }
  const note = h("div");
  const box = h("div");
  const order = {}; // the deliveries' sort and page, kept across the table's refreshes
  const act = (label, fn, cls) => h("button", { class: cls, onclick: async () => {
    clear(note);
    try { await fn(); clear(note, h("div", { class: "notice" }, `${label}: done`)); } catch (err) { clear(note, problem(err)); }
    await draw();
  } }, label);
  const draw = async () => {
    const deliveries = await api.get(`/v1/webhooks/${id}/deliveries`, { signal });
    clear(box, table([
      ["Seq", (d) => d.seq, "num"],
      ["Event", (d) => d.payload.type || "—"],
      ["Object", (d) => (d.payload.data && d.payload.data.object_id) || "—", "mono"],
      ["State", (d) => badge(d.status)],
      ["Attempts", attempts],
      ["Delivered", (d) => when(d.delivered_at), "nowrap", (d) => d.delivered_at ?? Infinity],
      ["", (d) => act("Replay", () => api.post(`/v1/webhooks/${id}/deliveries/${d.id}/replay`))],
    ], [...deliveries].reverse(), "No deliveries yet.", { id: "deliveries" }, { state: order }));
  };
  await draw();
  clear(main, h("h1", {}, hook.id, badge(hook.status), h("span", { class: "sub mono" }, hook.url)),
    h("p", {}, act("Send a test", () => api.post(`/v1/webhooks/${id}/test`)), " ",
      hook.status === "disabled" ? act("Enable", () => api.post(`/v1/webhooks/${id}/enable`)) : null, " ",
      act("Delete", async () => { await api.del(`/v1/webhooks/${id}`); location.hash = "#/webhooks"; }, "danger")),
    note, card("Deliveries", box));
  const timer = setInterval(() => draw().catch(() => {}), 4000);
  signal.addEventListener("abort", () => clearInterval(timer));
}
