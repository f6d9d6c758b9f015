// Instances: the list (state, GPU, price/h, restarts, checkpoint, queue place/ETA) and one
// instance's page: its timeline live (Preempted, checkpoint steps, resume), its logs and its bill.
import { api, ApiError, follow, tailCursor } from "./api.js";
import { badge, card, clear, clock, duration, elapsed, h, link, money, problem, stat, table, when } from "./dom.js";
import { timeline } from "./plot.js";

const FINAL = new Set(["succeeded", "failed", "stopped", "deleted"]);
const STATE_OF = {
  Queued: "queued", Requeued: "queued", Scheduled: "running", Started: "running", Restarted: "running",
  Preempted: "notice", Stopping: "notice", Interrupted: null, Succeeded: null, Failed: null, Stopped: null, Deleted: null,
};
const COLORS = { queued: "#e6b341", running: "#1a9b5b", notice: "#d1242f" };

export function queueText(inst) {
  if (!inst.queue) return "—";
  const eta = inst.queue.eta_s === null ? "ETA unknown" : `ETA ${duration(inst.queue.eta_s)}`;
  return `#${inst.queue.position} · ${eta}`;
}

function instanceRows(instances, state) {
  return table([
    ["Instance", (i) => link(`#/instances/${i.id}`, i.id), "mono"],
    ["State", (i) => badge(i.status)],
    ["GPU", (i) => gpuText(i), "nowrap"],
    ["Type", (i) => badge(i.type)],
    ["Price/h", (i) => money(i.price_per_hour, 3), "num", (i) => Number(i.price_per_hour)],
    ["Restarts", (i) => i.restart_count, "num"],
    ["Checkpoint", (i) => (i.last_checkpoint_step ?? "—"), "num", (i) => i.last_checkpoint_step ?? -1],
    ["Queue", queueText, null, (i) => (i.queue ? i.queue.position : Infinity)],
    ["Volume", (i) => i.volume || "—", "mono"],
    ["Created", (i) => when(i.created_at), "nowrap", (i) => i.created_at],
  ], instances, "No instances yet. Launch one: lowcostgpu launch --gpu a100-sxm4 --template pytorch", { id: "instances" }, { state });
}

const LIVE = ["queued", "starting", "running", "interrupting", "interrupted", "stopping"];
const PAGE = 100; // instances per page of the list

// Up to `count` pages of GET /v1/instances (newest first) with `query`, following X-Next-Cursor;
// `next` is the cursor of the page after them (null: there is none).
async function instancePages(query, count, signal) {
  const rows = [];
  let cursor = null;
  for (let n = 0; n < count; n++) {
    const sep = query ? "&" : "?";
    const at = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
    const { body, headers } = await api.page(`/v1/instances${query}${sep}limit=${PAGE}${at}`, { signal });
    rows.push(...body);
    cursor = headers.get("X-Next-Cursor");
    if (!cursor) return { rows, next: null };
  }
  return { rows, next: cursor };
}

function volumes(instances, state) {
  const seen = new Map();
  const nameOf = (i) => i.volume.split(":")[0]; // one row per volume, whatever size a launch named
  for (const i of instances) if (i.volume) seen.set(nameOf(i), [...(seen.get(nameOf(i)) || []), i]);
  return table([
    ["Volume", ([v]) => link("#/volumes", v), "mono"],
    ["Used by", ([, list]) => list.map((i) => [link(`#/instances/${i.id}`, i.id), " "]), "mono"],
  ], [...seen.entries()], "No volumes: launch with --volume NAME:SIZE to keep checkpoints across restarts.", {}, { state });
}

// The GPU type a form starts on: the first of the price list that has free GPUs in the fleet, else
// the first the fleet has at all, else the first price (a fleet answer that failed changes nothing).
// A catalog lists types no host has; defaulting to one of them (h100-sxm in the demo) fails a launch.
export async function gpuChoices(signal) {
  const [prices, fleet] = await Promise.all([api.get("/v1/prices", { signal }),
    api.get("/v1/fleet", { signal }).catch(() => ({ pools: [] }))]);
  const has = (test) => prices.gpus.find((g) => fleet.pools.some((p) => p.gpu_type === g.gpu && test(p)));
  const chosen = has((p) => p.free_gpus > 0) || has((p) => p.gpus > 0) || prices.gpus[0];
  return { prices, chosen: chosen ? chosen.gpu : null };
}

// The launch form: what `lowcostgpu launch` takes; the API validates and its message shows here.
async function launchForm(signal) {
  const { prices, chosen } = await gpuChoices(signal);
  const field = (label, input) => h("label", { class: "field" }, label, input);
  const gpu = h("select", { name: "gpu" }, prices.gpus.map((g) => h("option", { value: g.gpu, selected: g.gpu === chosen || null }, g.gpu)));
  const type = h("select", { name: "type" }, h("option", { value: "interruptible" }, "interruptible"), h("option", { value: "on-demand" }, "on-demand"));
  const gpus = h("input", { name: "gpus", type: "number", value: 1, min: 1, style: "width:70px" });
  const template = h("input", { name: "template", placeholder: "pytorch (optional)", style: "width:150px" });
  const command = h("input", { name: "command", placeholder: "arguments or command", style: "width:220px" });
  const volume = h("input", { name: "volume", placeholder: "ckpts:10GB (optional)", style: "width:160px" });
  const note = h("div", { id: "launch-result" });
  const form = h("form", { class: "inline", id: "launch", onsubmit: async (e) => {
    e.preventDefault();
    clear(note);
    const body = { gpu: gpu.value, type: type.value, gpus: Number(gpus.value), command: command.value.trim().split(/\s+/).filter(Boolean) };
    if (template.value.trim()) body.template = template.value.trim();
    if (volume.value.trim()) body.volume = volume.value.trim();
    try {
      const made = await api.post("/v1/instances", body);
      clear(note, h("div", { class: "notice" }, "Launched ", link(`#/instances/${made.id}`, made.id), ` · ${made.status}`, made.queue ? ` · ${queueText(made)}` : ""));
    } catch (err) { clear(note, problem(err)); }
  } }, field("GPU", gpu), field("Type", type), field("GPUs", gpus), field("Template", template), field("Command", command),
  field("Volume", volume), h("button", { class: "primary", type: "submit" }, "Launch"));
  return card("Launch", form, note);
}

export async function instancesPage(main, _id, { signal }) {
  const tableBox = h("div");
  const volumeBox = h("div");
  const statsBox = h("div", { class: "stats" });
  const order = {}; // the list's sort and page, kept across its live redraws
  const volumeOrder = {};
  let pages = 1; // pages of the list shown: "More instances" adds one, a redraw reads as many
  let next = null; // the cursor of the page after the last shown (null: it was the last)
  const more = h("button", { type: "button", id: "more-instances", onclick: async () => {
    more.disabled = true;
    try { pages += 1; await draw(); } finally { more.disabled = false; }
  } }, "More instances");
  const draw = async () => {
    // The stats count the live instances (every page of them: few); the list reads the newest
    // pages only, as many as were asked for, so a long history costs nothing until asked for.
    const live = await instancePages(`?status=${LIVE.join(",")}`, Infinity, signal);
    const listed = await instancePages("", pages, signal);
    next = listed.next;
    const count = (s) => live.rows.filter((i) => i.status === s).length;
    clear(statsBox,
      stat("Running", count("running")), stat("Queued", count("queued")),
      stat("Interruptions", listed.rows.reduce((n, i) => n + i.interruption_count, 0), "instances listed"),
      stat("GPU spend rate", money(live.rows.filter((i) => i.status === "running").reduce((n, i) => n + Number(i.price_per_hour), 0), 3), "per hour, running now"));
    clear(tableBox, instanceRows(listed.rows, order));
    more.hidden = next === null;
    clear(volumeBox, volumes(listed.rows, volumeOrder));
  };
  await draw();
  const launch = await launchForm(signal);
  clear(main, h("h1", {}, "Instances", h("span", { class: "live" }, "live")), statsBox,
    card(null, tableBox, more), launch, card("Volumes", volumeBox));
  follow(await tailCursor(signal), "", draw, signal);
}

function spans(events, end) {
  const out = [];
  let open = null;
  for (const e of events) {
    if (!(e.reason in STATE_OF)) continue;
    const state = STATE_OF[e.reason];
    if (open && open.state === state) continue;
    if (open) { open.to = e.at; out.push(open); open = null; }
    if (state) open = { state, from: e.at, to: end };
  }
  if (open) out.push(open);
  return out;
}

function marks(events) {
  const out = [];
  for (const e of events) {
    if (e.reason === "CheckpointReported") out.push({ at: e.at, kind: "checkpoint", label: `checkpoint step ${e.data.step}` });
    if (e.reason === "Preempted") out.push({ at: e.at, kind: "preempted", label: "Preempted" });
    if (e.reason === "Restarted") out.push({ at: e.at, kind: "resumed", label: `resumed ${e.data.resume_step ?? "from start"}` });
    if (e.reason === "Succeeded" || e.reason === "Failed" || e.reason === "Stopped") out.push({ at: e.at, kind: "ended", label: e.reason });
  }
  return out;
}

function details(e) {
  const d = e.data || {};
  if (e.reason === "CheckpointReported") return `step ${d.step}`;
  if (e.reason === "Restarted") return `resumed from step ${d.resume_step ?? "—"} · restart ${d.restart_count}`;
  if (e.reason === "Interrupted") return `last checkpoint step ${d.last_checkpoint_step ?? "—"}`;
  if (e.reason === "Preempted" && d.deadline) return `deadline ${clock(d.deadline)}`;
  return "";
}

function eventRows(inst, events, state) {
  return table([
    ["Time", (e) => elapsed(e.at - inst.created_at), "mono", (e) => e.seq],
    ["Reason", (e) => e.reason, "reason"],
    ["Message", (e) => e.message],
    ["Details", details, "mono"],
  ], [...events].reverse(), "No events yet.", { id: "timeline", class: "events" }, { state });
}

// A multi-node instance: GPUs per host × hosts (its bill covers them all).
function gpuText(inst) {
  const each = `${inst.gpus}× ${inst.gpu}`;
  return inst.nodes > 1 ? `${each} × ${inst.nodes} hosts` : each;
}

function hostsText(inst) {
  return inst.host_ids.length ? `on ${inst.host_ids.join(", ")}` : "not placed";
}

function header(inst, usage, actions) {
  return [
    h("h1", {}, inst.id, badge(inst.status), badge(inst.type), h("span", { class: "live" }, "live"), actions),
    h("div", { class: "stats" },
      stat("GPU", gpuText(inst), inst.nodes > 1 ? `${inst.region} · ${hostsText(inst)}` : inst.region),
      stat("Price", `${money(inst.price_per_hour, 3)}/h`),
      stat("Restarts", inst.restart_count, `${inst.interruption_count} interruption(s)`),
      h("div", { class: "stat", id: "last-step" }, h("div", { class: "label" }, "Last checkpoint"),
        h("div", { class: "value" }, inst.last_checkpoint_step ?? "—"), h("div", { class: "note" }, "step")),
      stat("Queue", queueText(inst), inst.deadline ? `notice: stops by ${clock(inst.deadline)}` : null),
      stat("Bill so far", money(usage.amount), `${(usage.gpu_seconds / 3600).toFixed(4)} GPU-h · exact ${money(usage.amount_exact, 4)}`)),
  ];
}

function actionButtons(inst, redraw) {
  const act = (label, fn, cls) => h("button", { class: cls, onclick: async (e) => {
    e.target.disabled = true;
    try { await fn(); } catch (err) { alert(err.message); }
    await redraw();
  } }, label);
  return h("span", { class: "actions" },
    FINAL.has(inst.status) || inst.status === "stopping" ? null : act("Stop", () => api.post(`/v1/instances/${inst.id}/stop`)),
    inst.status === "stopped" ? act("Resume", () => api.post(`/v1/instances/${inst.id}/resume`)) : null,
    inst.status === "deleted" ? null : act("Delete", () => api.del(`/v1/instances/${inst.id}`), "danger"));
}

export async function instancePage(main, id, { signal }) {
  let inst;
  try {
    inst = await api.get(`/v1/instances/${encodeURIComponent(id)}`, { signal });
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      clear(main, h("h1", {}, "Instance not found"),
        problem({ message: `No instance ${id} in your account (not found).`, hint: "The Instances page lists yours." }));
      return;
    }
    throw err;
  }
  const events = await api.get(`/v1/instances/${inst.id}/events`, { signal });
  const top = h("div");
  const plot = h("div");
  const list = h("div");
  const logs = h("pre", { class: "logs", id: "logs" });
  const order = {};
  const draw = async () => {
    const usage = await api.get(`/v1/instances/${inst.id}/usage`, { signal });
    clear(top, header(inst, usage, actionButtons(inst, refresh)));
    const end = FINAL.has(inst.status) ? Math.max(...events.map((e) => e.at)) : Math.max(Date.now() / 1000, ...events.map((e) => e.at));
    clear(plot, timeline({ start: inst.created_at, end, spans: spans(events, end), marks: marks(events), colors: COLORS,
      xFormat: (t) => elapsed(t - inst.created_at) }));
    clear(list, eventRows(inst, events, order));
  };
  const refresh = async () => {
    inst = await api.get(`/v1/instances/${inst.id}`, { signal });
    await draw();
  };
  const readLogs = async () => {
    try { logs.textContent = (await api.text(`/v1/instances/${inst.id}/logs?tail_bytes=16384`, { signal })) || "(no output yet)"; }
    catch (err) { logs.textContent = err.message; }
    logs.scrollTop = logs.scrollHeight;
  };
  await draw();
  clear(main, top, card("Timeline", plot, list), card("Logs (latest run)", logs));
  readLogs();
  const timer = setInterval(() => { if (!FINAL.has(inst.status)) { readLogs(); draw().catch(() => {}); } }, 3000);
  signal.addEventListener("abort", () => clearInterval(timer));
  const after = events.length ? Math.max(...events.map((e) => e.seq)) : 0;
  follow(after, `&object=${encodeURIComponent(inst.id)}`, async (page) => {
    events.push(...page);
    await refresh();
    readLogs();
  }, signal);
}
