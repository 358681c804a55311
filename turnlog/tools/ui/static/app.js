// turnlog ui: the behaviour of the pages. Plain DOM, no framework, no inline script.
// Everything recorded is put into the page with textContent, never as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// ------------------------------------------------------------------------------------- copy

function setupCopy() {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.addEventListener("click", () => {
      const target = document.getElementById(button.dataset.copy);
      if (target && navigator.clipboard) navigator.clipboard.writeText(target.textContent);
      button.textContent = "copied";
    });
  }
}

// --------------------------------------------------------------------------------- scrubber

function setupScrubber() {
  const box = document.querySelector(".scrubber");
  const slider = document.getElementById("scrubber");
  if (!box || !slider) return;
  const branch = box.dataset.branch;
  const head = Number(box.dataset.head);
  const base = "/branches/" + encodeURIComponent(branch);
  const conv = document.getElementById("conversation");
  let pending = null;
  let shown = Number(slider.value);

  async function show(version) {
    version = Math.max(1, Math.min(head, version));
    slider.value = String(version);
    document.getElementById("at").textContent = String(version);
    document.getElementById("prev").href = base + "?at=" + Math.max(1, version - 1);
    document.getElementById("next").href = base + "?at=" + Math.min(head, version + 1);
    document.getElementById("diff-link").href = base + "/diff?a=" + Math.max(1, version - 1) + "&b=" + version;
    const forkAt = document.getElementById("fork-at");
    if (forkAt) forkAt.value = String(version);
    for (const row of document.querySelectorAll(".timeline tbody tr")) {
      const v = Number(row.dataset.version);
      row.classList.toggle("current", v === version);
      row.classList.toggle("future", v > version);
    }
    history.replaceState(null, "", base + "?at=" + version);
    if (pending) pending.abort();
    pending = new AbortController();
    try {
      const response = await fetch(base + "/conversation?at=" + version, { signal: pending.signal });
      if (!response.ok) return;
      // the fragment is built by the server with every recorded string escaped
      conv.innerHTML = await response.text();
      shown = version;
      conv.dataset.version = String(version);
    } catch (err) {
      if (err.name !== "AbortError") throw err;
    }
  }

  slider.addEventListener("input", () => show(Number(slider.value)));
  for (const id of ["prev", "next"]) {
    document.getElementById(id).addEventListener("click", (event) => {
      event.preventDefault();
      show(shown + (id === "prev" ? -1 : 1));
    });
  }
  document.addEventListener("keydown", (event) => {
    const tag = (event.target && event.target.tagName) || "";
    if (tag === "INPUT" && event.target !== slider) return;
    if (tag === "TEXTAREA") return;
    if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      event.preventDefault();
      show(Number(slider.value) + (event.key === "ArrowLeft" ? -1 : 1));
    }
  });
}

// ------------------------------------------------------------------------------------- runs

const CHUNK_COLORS = {
  text: "#2b6cb0", thinking: "#805ad5", tool_use: "#dd6b20", tool_result: "#38a169",
  system: "#718096", result: "#1a202c", error: "#e53e3e",
};

function drawAxis() {
  const axis = document.getElementById("chunk-axis");
  if (!axis) return;
  const rows = [...document.querySelectorAll("#chunk-rows tr")];
  while (axis.firstChild) axis.removeChild(axis.firstChild);
  const width = 900, height = 70, pad = 30;
  axis.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const times = rows.map((r) => Number(r.dataset.t));
  const end = Math.max(1, ...times);
  axis.appendChild(svg("line", { x1: pad, y1: 40, x2: width - pad, y2: 40, stroke: "#a0aec0" }));
  axis.appendChild(svg("text", { x: pad, y: 62, class: "tick" }, "0 ms"));
  axis.appendChild(svg("text", { x: width - pad, y: 62, class: "tick", "text-anchor": "end" }, Math.round(end) + " ms"));
  rows.forEach((row, i) => {
    const x = pad + (times[i] / end) * (width - 2 * pad);
    const mark = svg("rect", { x: x - 2, y: 24, width: 4, height: 32, fill: CHUNK_COLORS[row.dataset.type] || "#4a5568", class: "chunk-mark" });
    mark.appendChild(svg("title", {}, `#${row.cells[0].textContent} ${row.dataset.type} at ${times[i]} ms`));
    axis.appendChild(mark);
  });
}

// an event that fails its hash check, as the server marks it (see _conversation.TAMPERED_BADGE)
function tamperedBadge() {
  return el("span", { class: "badge tampered", title: "this event does not match the hash chain" }, "TAMPERED");
}

function chunkRow(c) {
  let content = c.content;
  if (c.tool) content = c.tool + "(" + (c.input ? JSON.stringify(c.input) : "") + ")";
  else if (c.type === "tool_result") content = JSON.stringify(c.output);
  const row = el("tr", {
    class: "chunk type-" + c.type + (c.error ? " error" : "") + (c.tampered ? " tampered" : ""),
    "data-seq": String(c.seq),
    "data-t": String(c.t_ms),
    "data-type": c.type,
  });
  row.appendChild(el("td", {}, String(c.seq)));
  row.appendChild(el("td", {}, String(Math.round(c.t_ms))));
  const type = el("td", {}, c.type);
  if (c.tampered) type.appendChild(tamperedBadge());
  row.appendChild(type);
  const cell = el("td");
  cell.appendChild(el("pre", { class: "text" }, content));
  row.appendChild(cell);
  return row;
}

function setupRun() {
  const live = document.getElementById("run-live");
  if (!live) return;
  drawAxis();
  if (live.dataset.live !== "1") return;
  const status = document.getElementById("run-status");
  status.classList.add("live");
  const source = new EventSource(`/runs/${encodeURIComponent(live.dataset.run)}/live?after=${live.dataset.after}`);
  source.addEventListener("chunk", (event) => {
    const chunk = JSON.parse(event.data);
    if (document.querySelector(`#chunk-rows tr[data-seq="${Number(chunk.seq)}"]`)) return;  // shown already
    document.getElementById("chunk-rows").appendChild(chunkRow(chunk));
    document.getElementById("chunk-count").textContent = String(document.querySelectorAll("#chunk-rows tr").length);
    drawAxis();
  });
  source.addEventListener("status", (event) => {
    status.textContent = JSON.parse(event.data).status;
    status.classList.remove("live");
    source.close();
  });
}

// ------------------------------------------------------------------------------------- tail

function setupTail() {
  const live = document.getElementById("tail-live");
  if (!live) return;
  const body = document.getElementById("tail-rows");
  const source = new EventSource(`/tail/live?after=${live.dataset.after}`);
  source.addEventListener("event", (event) => {
    const e = JSON.parse(event.data);
    if (body.querySelector(`tr[data-position="${Number(e.position)}"]`)) return;  // shown already
    const row = el("tr", { class: e.tampered ? "fresh tampered" : "fresh", "data-position": String(e.position) });
    row.appendChild(el("td", {}, String(e.position)));
    row.appendChild(el("td", { class: "nowrap" }, e.time));
    const where = el("td");
    where.appendChild(el("code", {}, `${e.stream}@${e.version}`));
    row.appendChild(where);
    const type = el("td");
    if (e.tampered) type.appendChild(tamperedBadge());
    type.appendChild(el("code", {}, e.type));
    row.appendChild(type);
    const payload = el("td");
    payload.appendChild(el("code", {}, e.payload));
    row.appendChild(payload);
    body.insertBefore(row, body.firstChild);
    while (body.rows.length > 500) body.deleteRow(-1);
  });
}

// ----------------------------------------------------------------------------------- charts

function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (Math.abs(v) >= 100) return String(Math.round(v));
  return String(Math.round(v * 1e6) / 1e6);
}

function barChart(title, labels, series) {
  // series: [{name, values, color}]
  const width = 440, rowH = 22, pad = 130;
  const height = 40 + labels.length * rowH * series.length;
  const box = el("figure", { class: "chart" });
  box.appendChild(el("figcaption", {}, title));
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  const max = Math.max(1e-12, ...series.flatMap((s) => s.values.map((v) => v || 0)));
  let y = 10;
  labels.forEach((label, i) => {
    chart.appendChild(svg("text", { x: pad - 6, y: y + 14, "text-anchor": "end", class: "label" }, String(label)));
    for (const s of series) {
      const v = s.values[i];
      const w = ((v || 0) / max) * (width - pad - 70);
      const bar = svg("rect", { x: pad, y: y + 3, width: Math.max(w, 0.5), height: rowH - 6, fill: s.color, class: "bar" });
      bar.appendChild(svg("title", {}, `${label} ${s.name}: ${fmt(v)}`));
      chart.appendChild(bar);
      chart.appendChild(svg("text", { x: pad + w + 4, y: y + 15, class: "value" }, `${fmt(v)} ${s.name}`));
      y += rowH;
    }
  });
  box.appendChild(chart);
  return box;
}

function lineChart(title, labels, series) {
  const width = 440, height = 180, pad = 36;
  const box = el("figure", { class: "chart" });
  box.appendChild(el("figcaption", {}, title));
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  const max = Math.max(1e-12, ...series.flatMap((s) => s.values.map((v) => v || 0)));
  const x = (i) => pad + (labels.length > 1 ? (i / (labels.length - 1)) * (width - 2 * pad) : (width - 2 * pad) / 2);
  const y = (v) => height - pad - ((v || 0) / max) * (height - 2 * pad);
  chart.appendChild(svg("line", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: "#a0aec0" }));
  chart.appendChild(svg("text", { x: 2, y: pad, class: "tick" }, fmt(max)));
  labels.forEach((label, i) => {
    if (labels.length <= 8 || i % Math.ceil(labels.length / 8) === 0) {
      chart.appendChild(svg("text", { x: x(i), y: height - 12, "text-anchor": "middle", class: "tick" }, String(label).slice(5)));
    }
  });
  series.forEach((s, k) => {
    const points = s.values.map((v, i) => `${x(i)},${y(v)}`).join(" ");
    chart.appendChild(svg("polyline", { points, fill: "none", stroke: s.color, "stroke-width": 2 }));
    s.values.forEach((v, i) => {
      const dot = svg("circle", { cx: x(i), cy: y(v), r: 3, fill: s.color });
      dot.appendChild(svg("title", {}, `${labels[i]} ${s.name}: ${fmt(v)}`));
      chart.appendChild(dot);
    });
    chart.appendChild(svg("text", { x: width - pad, y: 14 + k * 14, "text-anchor": "end", fill: s.color, class: "legend" }, s.name));
  });
  box.appendChild(chart);
  return box;
}

function setupCharts() {
  const host = document.getElementById("charts");
  if (!host) return;
  const f = JSON.parse(host.dataset.figures);
  const label = (k) => (k === "" && f.by === "model" ? "(default model)" : k === null ? "(none)" : k);
  if (f.usage && f.usage.length) {
    const keys = f.usage.map((r) => label(r.key));
    host.appendChild(barChart(`tokens by ${f.by}`, keys, [
      { name: "in", values: f.usage.map((r) => r.input_tokens), color: "#2b6cb0" },
      { name: "out", values: f.usage.map((r) => r.output_tokens), color: "#dd6b20" },
    ]));
    host.appendChild(barChart(`cost ($) by ${f.by}`, keys, [{ name: "$", values: f.usage.map((r) => r.cost_usd), color: "#38a169" }]));
    host.appendChild(barChart(`latency (ms) by ${f.by}`, keys, [
      { name: "p50", values: f.usage.map((r) => r.latency_ms.p50), color: "#805ad5" },
      { name: "p95", values: f.usage.map((r) => r.latency_ms.p95), color: "#d53f8c" },
    ]));
    host.appendChild(barChart(`error rate by ${f.by}`, keys, [{ name: "", values: f.usage.map((r) => r.error_rate), color: "#e53e3e" }]));
  }
  if (f.runs && f.runs.length) {
    const keys = f.runs.map((r) => r.key);
    host.appendChild(barChart("runs by verb", keys, [
      { name: "ok", values: f.runs.map((r) => r.ok), color: "#38a169" },
      { name: "failed", values: f.runs.map((r) => r.failed), color: "#e53e3e" },
    ]));
  }
  if (f.days && f.days.length) {
    const days = [...f.days].sort((a, b) => (a.key < b.key ? -1 : 1));
    const keys = days.map((r) => r.key);
    host.appendChild(lineChart("tokens per day", keys, [
      { name: "in", values: days.map((r) => r.input_tokens), color: "#2b6cb0" },
      { name: "out", values: days.map((r) => r.output_tokens), color: "#dd6b20" },
    ]));
    host.appendChild(lineChart("latency per day (ms)", keys, [
      { name: "p50", values: days.map((r) => r.latency_ms.p50), color: "#805ad5" },
      { name: "p95", values: days.map((r) => r.latency_ms.p95), color: "#d53f8c" },
    ]));
    host.appendChild(lineChart("cost per day ($)", keys, [{ name: "$", values: days.map((r) => r.cost_usd), color: "#38a169" }]));
    host.appendChild(lineChart("error rate per day", keys, [{ name: "errors", values: days.map((r) => r.error_rate), color: "#e53e3e" }]));
  }
  if (f.series && f.series.days.length) {
    const palette = ["#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#e53e3e", "#319795", "#718096"];
    const lines = (values) => Object.keys(values).map((key, i) => ({
      name: label(key), values: values[key], color: palette[i % palette.length],
    }));
    const days = f.series.days;
    host.appendChild(lineChart(`tokens per day by ${f.by}`, days, lines(f.series.tokens)));
    host.appendChild(lineChart(`latency p95 per day by ${f.by} (ms)`, days, lines(f.series.p95)));
    host.appendChild(lineChart(`cost per day by ${f.by} ($)`, days, lines(f.series.cost)));
    host.appendChild(lineChart(`error rate per day by ${f.by}`, days, lines(f.series.error_rate)));
  }
  const tools = f.tools || f.tool_calls || [];
  if (tools.length) {
    host.appendChild(barChart("tool calls", tools.map((r) => r.key), [
      { name: "ok", values: tools.map((r) => r.ok), color: "#38a169" },
      { name: "errors", values: tools.map((r) => r.errors), color: "#e53e3e" },
    ]));
  }
  host.dataset.drawn = String(host.querySelectorAll("figure").length);
}

document.addEventListener("DOMContentLoaded", () => {
  setupCopy();
  setupScrubber();
  setupRun();
  setupTail();
  setupCharts();
  document.body.dataset.ready = "1";
});
