// Small SVG plots drawn here (no chart library): lines/steps, stacked bars, an instance timeline.
const NS = "http://www.w3.org/2000/svg";
let W = 560; // viewBox width: the plots are drawn at about this size, so text stays readable
const PAD = { left: 52, right: 14, top: 26, bottom: 28 };

export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= value) return m * step;
  return 10 * step;
}

// The axes of a plot from yMin (0 unless something is below it) to yMax, four steps.
function frame(height, yMax, yFormat, title, yMin = 0) {
  const root = svg("svg", { viewBox: `0 0 ${W} ${height}`, class: "plot", role: "img", "aria-label": title || "plot" });
  const plotH = height - PAD.top - PAD.bottom;
  const y = (v) => PAD.top + plotH - ((v - yMin) / (yMax - yMin)) * plotH;
  for (let i = 0; i <= 4; i += 1) {
    const v = yMin + ((yMax - yMin) * i) / 4;
    root.append(svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: i ? "grid" : "axis" }));
    root.append(svg("text", { x: PAD.left - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, yFormat(v)));
  }
  if (yMin < 0) root.append(svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y(0), y2: y(0), class: "axis" }));
  return { root, y, plotH };
}

function legend(root, items) {
  let x = PAD.left;
  for (const { name, color } of items) {
    root.append(svg("rect", { x, y: 6, width: 10, height: 10, rx: 2, fill: color }));
    const label = svg("text", { x: x + 14, y: 15, class: "legend" }, name);
    root.append(label);
    x += 26 + name.length * 7.4;
  }
}

// series: [{name, color, points: [[x, y], ...]}]; step: hold each value until the next point.
// integer: counts, so the axis' four steps are whole numbers; a value below 0 extends the axis.
export function lineChart({ series, height = 230, xFormat = String, yFormat = String, step = false, xMin, xMax, yMax, title, integer = false }) {
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = series.flatMap((s) => s.points.map((p) => p[1]));
  const lo = xMin ?? Math.min(...xs);
  const hi = Math.max(xMax ?? Math.max(...xs), lo + 1);
  const most = yMax ?? Math.max(0, ...ys);
  const top = integer ? Math.max(4, Math.ceil(most / 4) * 4) : niceMax(most);
  const least = Math.min(0, ...ys);
  const bottom = least < 0 ? -niceMax(-least) : 0;
  const { root, y } = frame(height, top, yFormat, title, bottom);
  const x = (v) => PAD.left + ((v - lo) / (hi - lo)) * (W - PAD.left - PAD.right);
  for (let i = 0; i <= 4; i += 1) {
    const v = lo + ((hi - lo) * i) / 4;
    root.append(svg("text", { x: x(v), y: height - 8, class: "tick", "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, xFormat(v)));
  }
  for (const s of series) {
    if (!s.points.length) continue;
    let d = "";
    s.points.forEach(([px, py], i) => {
      if (i === 0) d += `M${x(px)},${y(py)}`;
      else if (step) d += `H${x(px)}V${y(py)}`;
      else d += `L${x(px)},${y(py)}`;
    });
    if (step) d += `H${x(hi)}`;
    root.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 2.2, "stroke-dasharray": s.dashed ? "6 4" : null }));
  }
  legend(root, series);
  return root;
}

// Stacked bars: labels[i] under bar i; stacks: [{name, color, values: [...]}].
// integer: counts, so the axis' four steps are whole numbers.
export function barChart({ labels, stacks, height = 230, yFormat = String, title, integer = false }) {
  const totals = labels.map((_, i) => stacks.reduce((sum, s) => sum + (s.values[i] || 0), 0));
  const most = Math.max(0, ...totals);
  const top = integer ? Math.max(4, Math.ceil(most / 4) * 4) : niceMax(most);
  const { root, y } = frame(height, top, yFormat, title);
  const slot = (W - PAD.left - PAD.right) / Math.max(1, labels.length);
  const longest = Math.max(0, ...labels.map((l) => String(l).length));
  const every = Math.max(Math.ceil(labels.length / 8), Math.ceil((longest * 7 + 10) / slot)); // no overlap
  labels.forEach((label, i) => {
    let base = 0;
    const bw = Math.min(slot * 0.7, 40);
    const bx = PAD.left + i * slot + (slot - bw) / 2;
    for (const s of stacks) {
      const v = s.values[i] || 0;
      if (v > 0) {
        root.append(svg("rect", { x: bx, width: bw, y: y(base + v), height: Math.max(0.5, y(base) - y(base + v)), fill: s.color },
          svg("title", {}, `${label} · ${s.name}: ${yFormat(v)}`)));
      }
      base += v;
    }
    if (i % every === 0) root.append(svg("text", { x: bx + bw / 2, y: height - 8, class: "tick", "text-anchor": "middle" }, label));
  });
  legend(root, stacks);
  return root;
}

// The life of one instance: state spans on a lane, events as marks above it.
// spans: [{from, to, state}], marks: [{at, kind, label}], colors: state -> color.
export function timeline({ start, end, spans, marks, colors, xFormat }) {
  const height = 120;
  const laneY = 62;
  const saved = W;
  W = 1000;
  const hi = Math.max(end, start + 1);
  const x = (v) => PAD.left + ((v - start) / (hi - start)) * (W - PAD.left - PAD.right);
  const root = svg("svg", { viewBox: `0 0 ${W} ${height}`, class: "plot timeline", role: "img", "aria-label": "instance timeline" });
  root.append(svg("rect", { x: PAD.left, y: laneY, width: W - PAD.left - PAD.right, height: 18, fill: "#eef1f5", rx: 3 }));
  for (const s of spans) {
    root.append(svg("rect", { x: x(s.from), y: laneY, width: Math.max(1.5, x(s.to) - x(s.from)), height: 18, fill: colors[s.state] || "#9aa5b1" },
      svg("title", {}, `${s.state}: ${xFormat(s.from)} – ${xFormat(s.to)}`)));
  }
  let lastLabel = -Infinity;
  for (const m of marks) {
    const mx = x(m.at);
    if (m.kind === "checkpoint") root.append(svg("circle", { cx: mx, cy: laneY - 10, r: 3.2, class: "mark-checkpoint" }, svg("title", {}, m.label)));
    else root.append(svg("path", { d: `M${mx - 5},${laneY - 20} L${mx + 5},${laneY - 20} L${mx},${laneY - 11} Z`, class: `mark-${m.kind}` }, svg("title", {}, m.label)));
    if (m.kind !== "checkpoint" && mx - lastLabel > 70) {
      const anchor = mx > W - PAD.right - 60 ? "end" : mx < PAD.left + 60 ? "start" : "middle";
      root.append(svg("text", { x: mx, y: laneY - 26, class: `mark-label mark-${m.kind}`, "text-anchor": anchor }, m.label));
      lastLabel = mx;
    }
  }
  for (let i = 0; i <= 4; i += 1) {
    const v = start + ((hi - start) * i) / 4;
    root.append(svg("text", { x: x(v), y: height - 10, class: "tick", "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, xFormat(v)));
  }
  legend(root, [...Object.entries(colors).map(([name, color]) => ({ name, color })), { name: "checkpoint", color: "#7c4dff" }]);
  W = saved;
  return root;
}
