// The lab page (docs/serve.md): renders /api/lab's JSON and asks for it again every poll_ms.
// Every value is written as text (textContent), never parsed as markup: a device, cell or
// cause named `<script>` shows as those characters.
"use strict";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function num(value, digits) {
  return value === null || value === undefined ? "—" : Number(value).toFixed(digits);
}

function runningCell(device) {
  const td = el("td");
  for (const run of device.running) {
    td.append(el("code", run.cell_key));
    td.append(el("span", `run ${run.run_id} · session ${run.session_id}` +
                         (run.matrix ? ` · ${run.matrix}` : ""), "sub"));
  }
  if (!device.running.length && device.lab && device.lab.running) td.append(el("code", device.lab.running));
  if (!td.childNodes.length) td.textContent = "—";
  return td;
}

function sum(runs, key) {
  if (!runs.length) return null;
  return runs.reduce((acc, r) => acc + (r[key] || 0), 0);
}

function queueCell(device) {
  const td = el("td");
  const waiting = device.lab ? device.lab.waiting : device.queue.length;
  if (!device.queue.length) { td.textContent = waiting ? String(waiting) : "—"; return td; }
  const list = el("ol", null, "queue");
  for (const cell of device.queue) {
    // `delivered`: a consumer took it (the cell it runs now, or one a dead consumer left)
    const taken = cell.state === "delivered" ? ", taken" : "";
    list.append(el("li", `${cell.cell_key} (session ${cell.session_id}${taken})`));
  }
  td.append(list);
  if (waiting > device.queue.length) td.append(el("span", `${waiting} waiting in all`, "sub"));
  return td;
}

function deviceRow(device) {
  const tr = el("tr");
  tr.dataset.device = device.device;
  const name = el("td");
  name.append(el("strong", device.device));
  if (device.kind) name.append(el("span", device.kind + (device.lab ? ` · ${device.lab.worker}@${device.lab.host}` : ""), "sub"));
  tr.append(name);
  const state = el("td");
  state.append(el("span", device.state, `state state-${device.state}`));
  tr.append(state);
  tr.append(runningCell(device));
  const tokens = sum(device.running, "tokens");
  tr.append(el("td", tokens === null ? "—" : String(tokens), "num tokens"));
  const rates = device.running.map(r => r.tok_s).filter(v => v !== null);
  tr.append(el("td", rates.length ? rates.map(v => num(v, 2)).join(", ") : "—", "num tok-s"));
  const sample = device.sample || {};
  tr.append(el("td", num(sample.temp_c, 1), "num"));
  tr.append(el("td", num(sample.mem_avail_mib, 0), "num"));
  tr.append(queueCell(device));
  tr.append(el("td", device.lab ? device.lab.health : "—"));
  return tr;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "—";
}

function linked(text, href) {
  const td = el("td");
  const link = el("a", text);
  link.href = href;
  td.append(link);
  return td;
}

function failureRow(f, site) {
  const tr = el("tr");
  tr.append(linked(String(f.run_id), `/api/runs/${encodeURIComponent(f.run_id)}`));
  // the session's page where the server has the site's pages, else its number
  tr.append(site ? linked(String(f.session_id), `/sessions/${encodeURIComponent(f.session_id)}.html`)
                 : el("td", f.session_id));
  for (const value of [f.device, f.cell_key, f.status, f.cause || "—", when(f.ended_at)]) {
    tr.append(el("td", value));
  }
  return tr;
}

function render(data) {
  const devices = document.querySelector("#devices tbody");
  devices.replaceChildren(...data.devices.map(deviceRow));
  document.getElementById("no-devices").hidden = data.devices.length > 0;
  const failures = document.querySelector("#failures tbody");
  const site = document.body.dataset.site === "1";
  failures.replaceChildren(...data.failures.map(f => failureRow(f, site)));
  document.getElementById("no-failures").hidden = data.failures.length > 0;
  document.getElementById("updated").textContent = new Date(data.at).toLocaleTimeString();
}

function stale(why) {
  document.getElementById("stale").hidden = why === null;
  document.getElementById("stale-why").textContent = why || "";
}

async function poll(every) {
  try {
    const response = await fetch("/api/lab", {cache: "no-store"});
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
    stale(null);
  } catch (err) {
    stale(String(err.message || err));   // the server stopped or the store failed: say so
  }
  setTimeout(() => poll(every), every);
}

document.addEventListener("DOMContentLoaded", () => {
  const node = document.getElementById("lab-data");
  render(JSON.parse(node.textContent));
  const every = Number(node.dataset.pollMs) || 1000;
  setTimeout(() => poll(every), every);
});
