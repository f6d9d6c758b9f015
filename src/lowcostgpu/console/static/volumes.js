// Volumes: one row per volume of the account (what the bill counts), with the instances that use
// it and its last checkpoint step; grow one (never shrink) or delete one (refused while in use).
import { api } from "./api.js";
import { card, clear, h, link, problem, table, when } from "./dom.js";

const REFRESH_MS = 5000; // the list is redrawn this often (a run's checkpoint moves it)

function users(v) {
  if (!v.in_use_by.length) return h("span", { class: "muted" }, "not in use");
  return v.in_use_by.map((id) => [link(`#/instances/${id}`, id), " "]);
}

export async function volumesPage(main, _id, { signal }) {
  const list = h("div");
  const note = h("div", { id: "volume-result" });
  const order = {}; // the table's sort and page, kept across its redraws
  // The outcome is shown once the table is redrawn, so a notice never sits beside the old row.
  const act = async (fn, done) => {
    clear(note);
    let outcome;
    try { await fn(); outcome = h("div", { class: "notice" }, done); } catch (err) { outcome = problem(err); }
    await draw().catch(() => {});
    clear(note, outcome);
  };
  const resize = (v) => {
    const size = h("input", { type: "number", name: `size-${v.name}`, min: v.size_gb, value: v.size_gb, style: "width:80px", "aria-label": `new size of ${v.name} in GB` });
    return h("form", { class: "inline", onsubmit: (e) => {
      e.preventDefault();
      act(() => api.patch(`/v1/volumes/${encodeURIComponent(v.name)}`, { size_gb: Number(size.value) }),
        `Volume ${v.name} is ${size.value} GB: billed at that size from now on.`);
    } }, size, h("span", { class: "muted" }, "GB"), h("button", { type: "submit" }, "Grow"));
  };
  const remove = (v) => h("button", { class: "danger", type: "button", onclick: () => {
    if (!window.confirm(`Delete volume ${v.name} and its data? This cannot be undone.`)) return;
    act(() => api.del(`/v1/volumes/${encodeURIComponent(v.name)}`), `Volume ${v.name} deleted: its storage is no longer billed.`);
  } }, "Delete");
  const draw = async () => {
    const found = await api.get("/v1/volumes", { signal });
    clear(list, table([
      ["Volume", (v) => v.name, "mono"],
      ["Size", (v) => `${v.size_gb} GB`, "num", (v) => v.size_gb],
      ["Created", (v) => when(v.created_at), "nowrap", (v) => v.created_at],
      ["Used by", users, "mono", (v) => v.in_use_by.length],
      ["Checkpoint", (v) => (v.checkpoint_step === null ? "—" : `step ${v.checkpoint_step}`), "num", (v) => v.checkpoint_step ?? -1],
      ["Grow to", resize],
      ["", remove],
    ], found, "No volumes yet: launch with --volume NAME:SIZE (e.g. ckpts:10GB) to keep checkpoints across restarts.", { id: "volumes" }, { state: order }));
  };
  await draw();
  clear(main, h("h1", {}, "Volumes"), note, card(null, list),
    h("p", { class: "muted" }, "A volume keeps a run's checkpoints across interruptions and is billed per GB-month while it exists. ",
      "A launch attaches one by name (--volume ckpts) and resumes from its last checkpoint; volumes only grow, and one in use by an instance (not deleted) cannot be deleted."));
  // Not while the user is in the list (typing a size): a redraw would reset what they typed.
  const timer = setInterval(() => { if (!list.contains(document.activeElement)) draw().catch(() => {}); }, REFRESH_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
}
