// Events: the account's most recent events, live (long-poll), filtered by object and reason by the
// server; "Older events" reads the page before the oldest shown.
import { follow, recentEvents } from "./api.js";
import { badge, card, clear, h, link, table, when } from "./dom.js";

const REASONS = ["Queued", "Scheduled", "Started", "Preempted", "PreemptionRisk", "Cordoned", "Killed", "Interrupted", "Requeued",
  "Restarted", "CheckpointReported", "Succeeded", "Failed", "Stopping", "Stopped", "Deleted", "NodeAdded",
  "NodeRemoved", "TargetMet", "TargetUnmet", "BalanceLow", "VolumeCreated", "VolumeResized", "VolumeDeleted", "WebhookDisabled", "WebhookEnabled"];

const RECENT = 200; // events read at a time: the newest first, older ones on request

function objectLink(e) {
  if (e.object_kind === "instance") return link(`#/instances/${e.object_id}`, e.object_id);
  if (e.object_kind === "cluster") return link(`#/clusters/${e.object_id}`, e.object_id);
  return e.object_id;
}

export async function eventsPage(main, _id, { signal }) {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const object = h("input", { name: "object", placeholder: "i-…, c-…, or c-…* with its nodes", value: params.get("object") || "" });
  const reason = h("select", { name: "reason" }, h("option", { value: "" }, "any reason"),
    REASONS.map((r) => h("option", { value: r, selected: r === params.get("reason") }, r)));
  const apply = (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    if (object.value.trim()) q.set("object", object.value.trim());
    if (reason.value) q.set("reason", reason.value);
    location.hash = `#/events?${q}`;
  };
  const query = [...params.entries()].map(([k, v]) => `&${k}=${encodeURIComponent(v)}`).join("");
  const read = await recentEvents(query, { limit: RECENT, signal });
  const events = read.events;
  let complete = events.length < RECENT; // every matching event is shown
  const box = h("div");
  const count = h("span", { class: "muted" });
  const older = h("button", { type: "button", id: "older-events", onclick: async () => {
    older.disabled = true;
    try {
      const page = await recentEvents(query, { limit: RECENT, before: events[0].seq, signal });
      events.unshift(...page.events);
      complete = page.events.length < RECENT;
      draw();
    } finally { older.disabled = false; }
  } }, "Older events");
  const order = {}; // the table's sort and page, kept as new events arrive
  const draw = () => {
    count.textContent = `${events.length}${complete ? "" : " most recent"} event(s), newest first`;
    older.hidden = complete;
    clear(box, table([
      ["Seq", (e) => e.seq, "num"],
      ["Time", (e) => when(e.at), "nowrap", (e) => e.seq],
      ["Type", (e) => badge(e.type)],
      ["Reason", (e) => e.reason, "reason"],
      ["Object", objectLink, "mono"],
      ["Message", (e) => e.message],
    ], [...events].reverse(), "No events match.", { id: "events", class: "events" },
    { state: order, rowClass: (e) => (e.type === "Warning" ? "warning" : null) }));
  };
  draw();
  clear(main, h("h1", {}, "Events", h("span", { class: "live" }, "live")),
    card(null, h("div", { class: "toolbar" },
      h("form", { class: "inline", onsubmit: apply }, object, reason, h("button", { type: "submit" }, "Filter"),
        h("a", { href: "#/events" }, "clear")), count), box, older));
  follow(read.cursor, query, (page) => { events.push(...page); draw(); }, signal);
}
