// Billing: balance, the bill and its savings against on-demand, usage over time (GPU vs storage),
// the ledger and the price table.
import { api } from "./api.js";
import { card, clear, h, money, stat, table, when } from "./dom.js";
import { barChart } from "./plot.js";

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

export async function billingPage(main, _id, { signal }) {
  const [bill, balance, records, prices] = await Promise.all([
    api.get("/v1/billing", { signal }), api.get("/v1/billing/balance?ledger=12", { signal }),
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
      card("Bill", table([
        ["Line", (l) => l.description],
        ["Amount", (l) => money(l.amount), "num"],
        ["Exact", (l) => money(l.amount_exact, 4), "num mono"],
        ["Saved", (l) => (l.kind === "gpu" ? money(l.savings) : "—"), "num"],
      ], bill.lines, "Nothing billed yet.", { id: "bill" }))),
    h("div", { class: "grid2" },
      card("Prices (per GPU-hour)", table([
        ["GPU", (g) => [h("b", {}, g.gpu), h("div", { class: "muted" }, `${g.name} · ${g.memory_gb} GB`)]],
        ["On-demand", (g) => money(g.on_demand_per_gpu_hour, 3), "num"],
        ["Interruptible", (g) => money(g.interruptible_per_gpu_hour, 3), "num"],
        ["100 GPU-h saves", (g) => money(g.savings_100_gpu_hours), "num"],
      ], prices.gpus, "", { id: "prices" }), h("p", { class: "muted" }, `Storage ${money(prices.storage_per_gb_month)} per GB-month.`)),
      card("Balance movements", table([
        ["When", (e) => when(e.at), "nowrap"],
        ["Kind", (e) => e.kind],
        ["Amount", (e) => money(e.amount, 4), "num"],
        ["Memo", (e) => e.memo, "mono"],
      ], [...balance.ledger].reverse(), "No movements yet."))));
}
