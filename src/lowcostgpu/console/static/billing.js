// Billing: balance, the bill and its savings against on-demand, usage over time (GPU vs storage),
// the balance over time (from the ledger), the ledger and the price table.
import { api } from "./api.js";
import { card, clear, h, money, stat, table, when } from "./dom.js";
import { barChart, lineChart } from "./plot.js";

const LEDGER = 10000; // movements read for the plot and the table (the API's most)

const SECONDS_PER_MONTH = 730 * 3600;

// The bucket that makes a readable plot of usage spanning `span_s`: days, hours or minutes.
function bucketFor(span) {
  if (span > 3 * 86400) return [86400, "day", (t) => new Date(t * 1000).toISOString().slice(5, 10)];
  if (span > 3 * 3600) return [3600, "hour", (t) => new Date(t * 1000).toISOString().slice(11, 16)];
  return [60, "minute", (t) => new Date(t * 1000).toISOString().slice(11, 16)];
}

// Amounts per bucket, GPU and storage, from the metered records and the price table (for the
// plot; the exact amounts are the bill's).
function perBucket(records, prices) {
  if (!records.length) return null;
  const rate = Object.fromEntries(prices.gpus.map((g) => [g.gpu, g]));
  const first = Math.min(...records.map((r) => r.interval_start));
  const last = Math.max(...records.map((r) => r.interval_end));
  const [size, unit, label] = bucketFor(last - first);
  const start = Math.floor(first / size) * size;
  const n = Math.min(120, Math.floor((last - 1 - start) / size) + 1);
  const from = Math.max(start, (Math.floor((last - 1) / size) - n + 1) * size);
  const gpu = Array(n).fill(0);
  const storage = Array(n).fill(0);
  for (const r of records) {
    const i = Math.floor((r.interval_start - from) / size);
    if (i < 0 || i >= n) continue;
    if (r.kind === "storage") storage[i] += (r.quantity_s * Number(prices.storage_per_gb_month)) / SECONDS_PER_MONTH;
    else {
      const g = rate[r.resource];
      const perHour = r.capacity_class === "on-demand" ? g.on_demand_per_gpu_hour : g.interruptible_per_gpu_hour;
      gpu[i] += (r.quantity_s * Number(perHour)) / 3600;
    }
  }
  const labels = Array.from({ length: n }, (_, i) => label(from + i * size));
  return { labels, gpu, storage, unit };
}

// The balance over time: the balance now, walked back through the ledger's movements (the balance
// is their sum), so the plot is exact even when only the latest LEDGER movements are read.
function balanceHistory(balance) {
  const entries = balance.ledger;
  if (!entries.length) return null;
  const cents = (v) => Math.round(v * 1e6) / 1e6; // no float dust below a millionth of a dollar
  let level = cents(Number(balance.balance) - entries.reduce((sum, e) => sum + Number(e.amount), 0));
  const points = [[entries[0].at, level]]; // before the first movement read
  let last = null;
  for (const e of entries) {
    level = cents(level + Number(e.amount));
    if (e.at === last) points[points.length - 1][1] = level; // one step per second
    else points.push([e.at, level]);
    last = e.at;
  }
  const now = Math.max(Date.now() / 1000, entries[entries.length - 1].at + 1);
  points.push([now, Number(balance.balance)]);
  return { points, from: entries[0].at, now, complete: entries.length < LEDGER };
}

function balanceCard(balance) {
  const history = balanceHistory(balance);
  if (!history) return card("Balance over time", h("p", { class: "empty" }, "No movements yet."));
  const span = history.now - history.from;
  const iso = (t) => new Date(t * 1000).toISOString();
  const label = (t) => (span > 2 * 86400 ? iso(t).slice(5, 10) : span > 3600 ? iso(t).slice(11, 16) : iso(t).slice(11, 19));
  return card("Balance over time",
    h("div", { id: "balance-plot" }, lineChart({ step: true, xMin: history.from, xMax: history.now, xFormat: label,
      series: [{ name: "balance", color: "#1a9b5b", points: history.points }],
      yFormat: (v) => `${v < 0 ? "−" : ""}$${Math.abs(v).toFixed(Math.abs(v) >= 100 ? 0 : 2)}`, title: "balance over time" })),
    h("p", { class: "plot-note" }, `${balance.ledger.length} movement(s): top-ups and lost-work credits raise it, metered usage lowers it${history.complete ? "" : `; the latest ${LEDGER}`}.`));
}

// Lost-work credits (`serve --credit-lost-work`, docs/billing.md): each its own bill line, with its
// reason, as a negative amount.
function creditLines(bill) {
  return (bill.credits || []).map((c) => ({
    kind: "credit", description: c.description, amount: `-${c.amount}`, amount_exact: `-${c.amount_exact}`,
  }));
}

export async function billingPage(main, _id, { signal }) {
  const [bill, balance, records, prices] = await Promise.all([
    api.get("/v1/billing", { signal }), api.get(`/v1/billing/balance?ledger=${LEDGER}`, { signal }),
    api.get("/v1/billing/usage", { signal }), api.get("/v1/prices", { signal })]);
  const usage = perBucket(records, prices);
  const gpuTotal = bill.lines.filter((l) => l.kind === "gpu").reduce((s, l) => s + Number(l.amount_exact), 0);
  const storageTotal = bill.lines.filter((l) => l.kind === "storage").reduce((s, l) => s + Number(l.amount_exact), 0);
  clear(main, h("h1", {}, "Billing"),
    h("div", { class: "stats", id: "billing-stats" },
      stat("Balance", money(balance.balance), balance.can_launch ? "prepaid" : "top up to launch"),
      stat("Total billed", money(bill.total), `exact ${money(bill.total_exact, 4)}`),
      stat("Saved vs on-demand", money(bill.savings), "interruptible GPU-hours"),
      stat("GPU", money(gpuTotal, 4), `${(bill.gpu_seconds / 3600).toFixed(4)} GPU-h`),
      stat("Storage", money(storageTotal, 4), "volumes")),
    h("div", { class: "grid2" },
      card(usage ? `Usage per ${usage.unit}: GPU vs storage` : "Usage",
        usage ? barChart({ labels: usage.labels, stacks: [{ name: "GPU", color: "#1f6feb", values: usage.gpu }, { name: "storage", color: "#d08700", values: usage.storage }],
          yFormat: (v) => `$${v < 0.01 && v > 0 ? v.toFixed(4) : v.toFixed(2)}` }) : h("p", { class: "empty" }, "Nothing metered yet.")),
      balanceCard(balance)),
    h("div", { class: "grid2" },
      card("Bill", table([
        ["Line", (l) => l.description],
        ["Amount", (l) => money(l.amount), "num", (l) => Number(l.amount)],
        ["Exact", (l) => money(l.amount_exact, 4), "num mono", (l) => Number(l.amount_exact)],
        ["Saved", (l) => (l.kind === "gpu" ? money(l.savings) : "—"), "num", (l) => (l.kind === "gpu" ? Number(l.savings) : -1)],
      ], [...bill.lines, ...creditLines(bill)], "Nothing billed yet.", { id: "bill" })),
      card("Prices (per GPU-hour)", table([
        ["GPU", (g) => [h("b", {}, g.gpu), h("div", { class: "muted" }, `${g.name} · ${g.memory_gb} GB`)], null, (g) => g.gpu],
        ["On-demand", (g) => money(g.on_demand_per_gpu_hour, 3), "num", (g) => Number(g.on_demand_per_gpu_hour)],
        ["Interruptible", (g) => money(g.interruptible_per_gpu_hour, 3), "num", (g) => Number(g.interruptible_per_gpu_hour)],
        ["100 GPU-h saves", (g) => money(g.savings_100_gpu_hours), "num", (g) => Number(g.savings_100_gpu_hours)],
      ], prices.gpus, "", { id: "prices" }), h("p", { class: "muted" }, `Storage ${money(prices.storage_per_gb_month)} per GB-month.`))),
    card("Balance movements", table([
      ["When", (e) => when(e.at), "nowrap", (e) => e.at],
      ["Kind", (e) => e.kind],
      ["Amount", (e) => money(e.amount, 4), "num", (e) => Number(e.amount)],
      ["Memo", (e) => e.memo, "mono"],
    ], [...balance.ledger].reverse(), "No movements yet.", { id: "ledger" })));
}
