// The operator's pages (admin key): the fleet — pools, utilisation on-demand vs interruptible,
// queue depth and reclaims per hour over time (from the event log: /v1/operator/history),
// revenue, time between interruptions per GPU type, the latest reclaims with the victim policy's
// reasoning (which the customer's message leaves out: /v1/operator/reclaims) — and the accounts.
import { api } from "./api.js";
import { card, clear, clock, duration, h, money, stat, table, when } from "./dom.js";
import { barChart, lineChart } from "./plot.js";

// [key, window_s, step_s (one point per), words]
const WINDOWS = [["1h", 3600, 60, "last hour"], ["6h", 6 * 3600, 600, "last 6 h"], ["24h", 86400, 1800, "last 24 h"],
  ["7d", 7 * 86400, 3 * 3600, "last 7 days"]];
const BLUE = "#1f6feb";
const GREEN = "#1a9b5b";

function capacityBar(p) {
  const part = (n, color, name) => (n ? h("span", { style: `width:${(100 * n) / p.gpus}%;background:${color}`, title: `${name}: ${n}` }) : null);
  // on_demand_gpus and interruptible_gpus count instances and nodes alike; node_* is the nodes' part.
  return h("div", { class: "capbar" }, part(p.on_demand_gpus - p.node_standard_gpus, BLUE, "on-demand instances"), part(p.node_standard_gpus, "#6e9cf0", "standard nodes"),
    part(p.interruptible_gpus - p.node_preemptible_gpus, GREEN, "interruptible instances"), part(p.node_preemptible_gpus, "#7fd1a4", "preemptible nodes"));
}

function pools(list) {
  return table([
    ["Pool", (p) => [h("b", {}, p.gpu_type), h("div", { class: "muted" }, `${p.region} · ${p.hosts} host(s)`)]],
    ["GPUs", (p) => p.gpus, "num"],
    ["On-demand", (p) => p.on_demand_gpus, "num"],
    ["Interruptible", (p) => p.interruptible_gpus, "num"],
    ["of which nodes", (p) => `${p.node_standard_gpus} std · ${p.node_preemptible_gpus} pre`, "num"],
    ["Free", (p) => p.free_gpus, "num"],
    ["In use", capacityBar, null, (p) => p.gpus - p.free_gpus],
    ["Queue", (p) => `${p.queue_depth} (${p.queued_gpus} GPUs)`, "num", (p) => p.queue_depth],
  ], list, "No pools.", { id: "pools" });
}

// The queue depth and the reclaims per hour over the window, per pool, from the event log.
function historyCards(hist, label, words) {
  const colors = ["#1f6feb", "#1a9b5b", "#d08700", "#7c4dff", "#d1242f", "#0a7f86"];
  const series = hist.pools.map((pool, i) => ({ name: pool, color: colors[i % colors.length],
    points: hist.series.map((b) => [b.start, b.pools[pool] ? b.pools[pool].queue_depth : 0]) }));
  if (hist.pools.length > 1) {
    series.push({ name: "all pools", color: "#5f6b7a", dashed: true, points: hist.series.map((b) => [b.start, b.queue_depth]) });
  }
  series.push({ name: "peak", color: "#b8c0ca", dashed: true, points: hist.series.map((b) => [b.start, b.queue_depth_peak]) });
  const peak = Math.max(0, ...hist.series.map((b) => b.queue_depth_peak));
  const queue = card(`Queue depth, ${words}`,
    h("div", { id: "queue-plot" }, lineChart({ series, step: true, integer: true, xMin: hist.window.start, xMax: hist.window.end,
      xFormat: label, yFormat: (v) => String(Math.round(v)), title: "queue depth over time" })),
    h("p", { class: "plot-note", id: "queue-note" },
      `${hist.queue_depth_now} waiting now · peak ${peak} · instances and preemptible nodes in the queue as each ${duration(hist.window.step_s)} closes; peak: the most at any moment of it`));
  const reclaims = card("Reclaims per hour",
    h("div", { id: "reclaims-plot" }, barChart({ labels: hist.series.map((b) => label(b.start)),
      stacks: hist.pools.map((pool, i) => ({ name: pool, color: colors[i % colors.length],
        values: hist.series.map((b) => (b.pools[pool] ? b.pools[pool].reclaims_per_hour : 0)) })),
      yFormat: (v) => (v >= 10 || Number.isInteger(v) ? String(Math.round(v)) : v.toFixed(v < 1 ? 2 : 1)), title: "reclaims per hour" })),
    h("p", { class: "plot-note", id: "reclaims-note" },
      `${hist.reclaims_window} reclaim(s) ${words} (Preempted events of instances and nodes), per ${duration(hist.window.step_s)} scaled to an hour`));
  return [queue, reclaims];
}

// Why each victim was chosen: the policy, its cost of the choice and the victim's cost terms.
function why(r) {
  const p = r.policy || {};
  const terms = p.victim_terms
    ? ` · lost ${p.victim_terms.lost_gpu_s}${p.victim_terms.lost_estimated ? " (estimated)" : ""} + requeue ${p.victim_terms.requeue_gpu_s} + history ${p.victim_terms.history_gpu_s} GPU-s`
    : "";
  const others = (p.alternatives || []).length ? ` · next best ${p.alternatives[0].cost_gpu_s} GPU-s on ${p.alternatives[0].host_id}` : "";
  return h("span", { title: r.reason }, `${p.name || "?"}: ${p.cost_gpu_s ?? "?"} GPU-s on ${p.host_id || "?"}${terms}${others}`);
}

function reclaimsTable(list) {
  return table([
    ["Time", (r) => when(r.at), null, (r) => r.seq],
    ["Object", (r) => [h("b", { class: "mono" }, r.object_id), h("div", { class: "muted mono" }, r.account_id)], null, (r) => r.object_id],
    ["Lost", (r) => (r.lost_gpu_s === null ? "—" : `${r.lost_gpu_s} GPU-s`), "num", (r) => r.lost_gpu_s ?? -1],
    ["Why this victim (policy)", why],
    ["The customer was told", (r) => h("span", { class: "muted" }, r.message)],
  ], list.slice().reverse(), "No reclaim yet.", { id: "reclaims" });
}

export async function fleetPage(main, _id, { signal }) {
  const choice = new URLSearchParams(location.hash.split("?")[1] || "").get("window") || "1h";
  const [, windowS, stepS, words] = WINDOWS.find(([k]) => k === choice) || WINDOWS[0];
  const [f, hist, recent] = await Promise.all([
    api.get(`/v1/operator/fleet?window_s=${windowS}&bucket_s=${stepS}`, { signal }),
    api.get(`/v1/operator/history?window_s=${windowS}&step_s=${stepS}`, { signal }),
    api.get("/v1/operator/reclaims?limit=20", { signal })]);
  const label = (t) => {
    const iso = new Date(t * 1000).toISOString();
    return windowS > 86400 ? `${iso.slice(5, 10)} ${iso.slice(11, 13)}h` : iso.slice(11, 16);
  };
  const held = f.pools.reduce((n, p) => n + p.gpus - p.free_gpus, 0);
  const picker = h("span", { class: "sub" }, WINDOWS.map(([k, , , w]) =>
    [h("a", { href: `#/fleet?window=${k}`, style: k === choice ? "font-weight:700" : null, "aria-current": k === choice ? "page" : null }, w), " "]));
  const [queue, reclaims] = historyCards(hist, label, words);
  clear(main, h("h1", {}, "Fleet", picker),
    h("div", { class: "stats", id: "fleet-stats" },
      stat("GPUs in use", `${held} / ${f.gpus}`, `${f.pools.length} pool(s)`),
      stat("Queue depth", f.pools.reduce((n, p) => n + p.queue_depth, 0), "instances and nodes waiting"),
      stat("Reclaims", f.reclaims_window, words),
      stat("Revenue", money(f.revenue_window, 4), words),
      stat("Revenue (all time)", money(f.revenue_total, 4), `${f.accounts} account(s)`)),
    card("Pools now", pools(f.pools)),
    h("div", { class: "grid2" },
      card(`Utilisation, ${words}`, lineChart({ series: [
        { name: "on-demand", color: BLUE, points: f.series.map((b) => [b.start, 100 * b.utilisation_on_demand]) },
        { name: "interruptible", color: GREEN, points: f.series.map((b) => [b.start, 100 * b.utilisation_interruptible]) },
        { name: "total", color: "#5f6b7a", dashed: true, points: f.series.map((b) => [b.start, 100 * (b.utilisation_on_demand + b.utilisation_interruptible)]) },
      ], yMax: 100, xFormat: label, yFormat: (v) => `${Math.round(v)}%` })),
      queue),
    h("div", { class: "grid2" },
      reclaims,
      card(`Revenue per ${duration(stepS)}`, barChart({ labels: f.series.map((b) => label(b.start)),
        stacks: [{ name: "rated usage", color: "#7c4dff", values: f.series.map((b) => Number(b.revenue)) }], yFormat: (v) => `$${v.toFixed(v < 1 ? 3 : 2)}` }))),
    h("div", { class: "grid2" },
      card("Interruptions per GPU type", table([
        ["GPU type", (s) => h("b", {}, s.gpu_type)],
        ["Interruptions", (s) => s.interruptions, "num"],
        ["Median time between", (s) => (s.median_time_between_interruptions_s === null ? "— (no interruption yet)" : duration(s.median_time_between_interruptions_s)), "num",
          (s) => s.median_time_between_interruptions_s ?? Infinity],
      ], f.interruptions, "", { id: "interruptions" }),
      h("p", { class: "muted" }, "Interruptions over the last 7 days, and the median time an interrupted run had been running since its (re)start when it was interrupted.")),
      card("Instances by state",
        table([["State", ([s]) => s], ["Instances", ([, n]) => n, "num"]], Object.entries(f.instances), "No live instances."))),
    card("Latest reclaims: why the policy chose each victim", reclaimsTable(recent),
      h("p", { class: "muted" }, "The reasoning is the operator's: the customer's Preempted event says what happens to their work, never why it was chosen nor whose on-demand work it was for.")));
}

export async function accountsPage(main, _id, { signal }) {
  const accounts = await api.get("/v1/accounts", { signal });
  clear(main, h("h1", {}, "Accounts"), card(null, table([
    ["Account", (a) => a.id, "mono"],
    ["Name", (a) => a.name],
    ["Balance", (a) => money(a.balance), "num", (a) => Number(a.balance)],
    ["Created", (a) => clock(a.created_at), null, (a) => a.created_at],
  ], accounts, "No accounts yet: lowcostgpu accounts create NAME", { id: "accounts" })),
  h("p", { class: "muted" }, "Top up with `lowcostgpu topup ACCOUNT AMOUNT` (money received outside lowcostgpu)."));
}
