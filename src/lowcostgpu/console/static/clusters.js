// Clusters: the list and the create form (validated by the API, its message shown in the page);
// one cluster: nodes with their compute-class, desired vs allocated preemptible GPUs over time,
// and the target form.
import { allEvents, api, ApiError, follow, tailCursor } from "./api.js";
import { badge, card, clear, elapsed, h, link, problem, stat, table, when } from "./dom.js";
import { gpuChoices } from "./instances.js";
import { lineChart } from "./plot.js";

const num = (name, value, min) => h("input", { type: "number", name, value, min, step: 1, required: true, style: "width:110px" });

function field(label, input) {
  return h("label", { class: "field" }, label, input);
}

async function createForm(onCreated) {
  const { prices, chosen } = await gpuChoices();
  const gpu = h("select", { name: "gpu" }, prices.gpus.map((g) => h("option", { value: g.gpu, selected: g.gpu === chosen || null }, `${g.gpu} (${g.name})`)));
  const region = h("input", { name: "region", placeholder: "any", style: "width:110px" });
  const perNode = num("gpus_per_node", 1, 1);
  const standard = num("standard_nodes", 1, 0);
  const desired = num("desired_preemptible_gpus", 0, 0);
  const error = h("div", { id: "form-error" });
  const form = h("form", { class: "inline", id: "create-cluster", onsubmit: async (e) => {
    e.preventDefault();
    clear(error);
    try {
      const body = { gpu: gpu.value, gpus_per_node: Number(perNode.value), standard_nodes: Number(standard.value),
        desired_preemptible_gpus: Number(desired.value) };
      if (region.value.trim()) body.region = region.value.trim();
      const made = await api.post("/v1/clusters", body);
      onCreated(made);
    } catch (err) {
      clear(error, problem(err));
    }
  } },
  field("GPU", gpu), field("Region", region), field("GPUs per node", perNode), field("Standard nodes", standard),
  field("Preemptible GPUs (target)", desired), h("button", { class: "primary", type: "submit" }, "Create cluster"));
  return [form, error];
}

export async function clustersPage(main, _id, { signal }) {
  const list = h("div");
  const order = {};
  const draw = async () => {
    const clusters = await api.get("/v1/clusters", { signal });
    clear(list, table([
      ["Cluster", (c) => link(`#/clusters/${c.id}`, c.id), "mono"],
      ["State", (c) => badge(c.status)],
      ["GPU", (c) => `${c.gpu} · ${c.gpus_per_node}/node`],
      ["Standard nodes", (c) => c.standard_nodes, "num"],
      ["Preemptible GPUs", (c) => `${c.allocated_preemptible_gpus} of ${c.desired_preemptible_gpus}`, "num"],
      ["Target", (c) => (c.target_met === null ? "—" : badge(c.target_met ? "met" : "unmet", c.target_met ? "ready" : "warning"))],
      ["Created", (c) => when(c.created_at), null, (c) => c.created_at],
    ], clusters, "No clusters yet.", { id: "clusters" }, { state: order }));
  };
  await draw();
  const form = await createForm((made) => { location.hash = `#/clusters/${made.id}`; });
  clear(main, h("h1", {}, "Clusters"), card(null, list), card("New cluster", ...form,
    h("p", { class: "muted" }, "Standard nodes are never preempted (at least one, for critical components); the preemptible target is a multiple of the GPUs per node, refilled through the queue as capacity frees.")));
  follow(await tailCursor(signal), "", draw, signal);
}

// Desired and allocated preemptible GPUs over time: the target from the cluster's
// TargetChanged events (data: from, to), the allocated GPUs from its preemptible nodes' events.
function history(cluster, events) {
  const isPreemptible = (e) => String((e.data || {}).compute_class || e.message).includes("preemptible");
  const changes = events.filter((e) => e.object_id === cluster.id && e.reason === "TargetChanged");
  const initial = changes.length ? changes[0].data.from : cluster.desired_preemptible_gpus;
  const desired = [[cluster.created_at, initial], ...changes.map((e) => [e.at, e.data.to])];
  const ready = new Set();
  const alloc = [[cluster.created_at, 0]];
  const gpn = cluster.gpus_per_node;
  for (const e of events) {
    const node = e.object_id;
    if (node === cluster.id) continue;
    if (e.reason === "NodeAdded" && isPreemptible(e)) ready.add(node);
    if (e.reason === "NodeRemoved") ready.delete(node);
    alloc.push([e.at, ready.size * gpn]);
  }
  const now = Math.max(Date.now() / 1000, ...events.map((e) => e.at));
  desired.push([now, cluster.desired_preemptible_gpus]);
  alloc.push([now, cluster.allocated_preemptible_gpus]);
  return { desired, alloc, now };
}

function nodesTable(cluster, state) {
  return table([
    ["Node", (n) => n.id, "mono"],
    ["Compute class", (n) => badge(n.compute_class)],
    // a node among the next victims (`risk`: "next") says so beside its state: advice, not a notice
    ["State", (n) => (n.risk ? h("span", {}, badge(n.status), " ", badge("at risk", "warning")) : badge(n.status))],
    ["GPUs", (n) => n.gpus, "num"],
    ["Host", (n) => (n.host_id ? `${n.host_id} [${n.gpu_indices.join(",")}]` : "waiting in queue"), "mono"],
    ["Taints", (n) => n.taints.map((t) => `${t.key}=${t.value}:${t.effect}`).join(" ") || "—", "mono"],
    ["Started", (n) => when(n.started_at), null, (n) => n.started_at ?? Infinity],
  ], cluster.nodes, "No nodes.", { id: "nodes" }, { state });
}

function targetForm(cluster, onDone) {
  const desired = num("desired_preemptible_gpus", cluster.desired_preemptible_gpus, 0);
  const error = h("div", { id: "target-error" });
  const form = h("form", { class: "inline", id: "update-target", onsubmit: async (e) => {
    e.preventDefault();
    clear(error);
    try {
      await api.patch(`/v1/clusters/${cluster.id}`, { desired_preemptible_gpus: Number(desired.value) });
      await onDone();
    } catch (err) { clear(error, problem(err)); }
  } }, field("Preemptible GPUs (target)", desired), h("button", { class: "primary", type: "submit" }, "Update target"));
  return [form, error];
}

export async function clusterPage(main, id, { signal }) {
  let cluster;
  try {
    cluster = await api.get(`/v1/clusters/${encodeURIComponent(id)}`, { signal });
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      clear(main, h("h1", {}, "Cluster not found"), problem({ message: `No cluster ${id} in your account (not found).` }));
      return;
    }
    throw err;
  }
  const mine = (e) => e.object_id === cluster.id || e.object_id.startsWith(`${cluster.id}-n`);
  const query = `&object=${encodeURIComponent(`${cluster.id}*`)}`; // the cluster and its nodes
  const read = await allEvents(query, signal);
  const events = read.events.filter(mine);
  const body = h("div");
  const orders = { nodes: {}, events: {} }; // the tables' sort and page, kept across redraws
  const draw = async () => {
    cluster = await api.get(`/v1/clusters/${cluster.id}`, { signal });
    const { desired, alloc, now } = history(cluster, events);
    clear(body,
      h("h1", {}, cluster.id, badge(cluster.status), h("span", { class: "sub" }, `${cluster.gpu} · ${cluster.region}`), h("span", { class: "live" }, "live")),
      h("div", { class: "stats" },
        stat("Standard nodes", cluster.standard_nodes, "never preempted"),
        stat("Preemptible GPUs", `${cluster.allocated_preemptible_gpus} / ${cluster.desired_preemptible_gpus}`, "allocated / desired"),
        stat("Pending", cluster.pending_preemptible_gpus, "GPUs waiting in the queue"),
        stat("GPUs per node", cluster.gpus_per_node, `grace ${cluster.grace_period_s} s`)),
      h("div", { class: "grid2" },
        card("Preemptible GPUs over time", lineChart({ step: true, xMin: cluster.created_at, xMax: now,
          series: [{ name: "allocated", color: "#1a9b5b", points: alloc }, { name: "desired", color: "#7c4dff", dashed: true, points: desired }],
          xFormat: (t) => elapsed(t - cluster.created_at), yFormat: (v) => String(Math.round(v * 10) / 10) })),
        card("Preemptible target", ...targetForm(cluster, draw),
          h("p", { class: "muted" }, `A multiple of ${cluster.gpus_per_node} (GPUs per node). Lowering it drains preemptible nodes; raising it queues new ones.`))),
      card("Nodes", nodesTable(cluster, orders.nodes)),
      card("Events", table([["Time", (e) => when(e.at), null, (e) => e.seq], ["Object", (e) => e.object_id, "mono"], ["Reason", (e) => e.reason, "reason"], ["Message", (e) => e.message]],
        [...events].reverse(), "No events yet.", { class: "events", id: "cluster-events" }, { state: orders.events })));
  };
  await draw();
  clear(main, body);
  follow(read.cursor, query, async (page) => {
    const ours = page.filter(mine);
    events.push(...ours);
    if (ours.length) await draw();
  }, signal);
}
