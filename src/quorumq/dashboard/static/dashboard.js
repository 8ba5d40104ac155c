// The quorumq dashboard: polls /api/state every POLL_MS and redraws; keeps HISTORY_POINTS of each
// series for the small charts (the last few minutes since the page was opened).
"use strict";

const POLL_MS = 2000;
const HISTORY_POINTS = 150; // 5 minutes at one point every 2 s
const history = new Map(); // series name -> recent values

function remember(name, value) {
  const values = history.get(name) || [];
  values.push(value);
  if (values.length > HISTORY_POINTS) values.shift();
  history.set(name, values);
  return values;
}

function spark(values) {
  const max = Math.max(1, ...values);
  const step = 160 / Math.max(1, HISTORY_POINTS - 1);
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(27 - (v / max) * 26).toFixed(1)}`).join(" ");
  return `<svg class="spark" viewBox="0 0 160 28"><polyline points="${points}"/></svg>`;
}

function text(value) {
  const span = document.createElement("span");
  span.textContent = value;
  return span.innerHTML;
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function renderGroups(groups) {
  document.getElementById("groups").innerHTML = groups.map((group) => {
    const replicas = group.replicas.map((r) => {
      const isMaster = r.address === group.master;
      const lag = r.lag_bytes === undefined ? "" : `lag ${bytes(r.lag_bytes)} ${spark(remember(`lag ${group.broker_name} ${r.address}`, r.lag_bytes))}`;
      const state = !r.answers ? `<span class="down">not answering</span>` : (isMaster ? "master" : (r.fenced ? "fenced" : "slave"));
      return `<tr data-address="${text(r.address)}"><td class="${isMaster ? "master" : ""}">${text(r.address)}</td>` +
        `<td>${text(r.id)}</td><td>${state}</td><td>${r.max_offset === undefined ? "" : r.max_offset}</td><td>${lag}</td></tr>`;
    }).join("");
    const sss = group.sync_state_set ? `<span>SyncStateSet {${text(group.sync_state_set)}}</span>` : "";
    return `<div class="group" data-group="${text(group.broker_name)}">` +
      `<h3>${text(group.broker_name)} <small>(${text(group.cluster)})</small></h3>` +
      `<div class="facts"><span>master <span class="master" data-role="master">${text(group.master || "none")}</span></span>` +
      `<span>epoch <span data-role="epoch">${group.epoch}</span></span>${sss}</div>` +
      `<table><thead><tr><th>replica</th><th>id</th><th>role</th><th>log end</th><th>behind the master</th></tr></thead>` +
      `<tbody>${replicas}</tbody></table></div>`;
  }).join("") || "<p>no broker registered</p>";
}

function renderTables(state) {
  document.querySelector("#topics tbody").innerHTML = state.topics.map((t) =>
    `<tr data-topic="${text(t.topic)}"><td>${text(t.topic)}</td><td>${t.in_rate.toFixed(1)}</td>` +
    `<td>${t.out_rate.toFixed(1)}</td><td>${t.in}</td><td>${spark(remember(`in ${t.topic}`, t.in_rate))}</td></tr>`).join("");
  document.querySelector("#consumers tbody").innerHTML = state.consumer_groups.map((c) =>
    `<tr><td>${text(c.group)}</td><td>${text(c.topic)}</td><td>${c.lag}</td><td>${c.out_rate.toFixed(1)}</td>` +
    `<td>${spark(remember(`lag ${c.group} ${c.topic}`, c.lag))}</td></tr>`).join("");
}

function renderExtras(state) {
  const controller = document.getElementById("controller-section");
  controller.hidden = !state.controller;
  if (state.controller) {
    document.getElementById("controller").innerHTML = state.controller.error
      ? `<span class="down">${text(state.controller.error)}</span>`
      : `leader <b>${text(state.controller.leader)}</b> of ${text(state.controller.controllers.join(", "))}`;
  }
  const replicator = document.getElementById("replicator-section");
  replicator.hidden = !state.replicator;
  if (state.replicator) {
    const hb = state.replicator.heartbeat || {};
    const totals = state.replicator.metrics || {};
    document.getElementById("replicator").innerHTML =
      `heartbeat ${hb.alive ? "alive" : '<span class="down">not alive</span>'}` +
      (hb.latencyMs === undefined ? "" : `, latency ${hb.latencyMs} ms`) +
      `; written ${totals.written || 0}, deduplicated ${totals.deduped || 0}, dismissed ${totals.dismissed || 0}`;
  }
}

async function poll() {
  try {
    const answer = await fetch("/api/state");
    const state = await answer.json();
    document.getElementById("namesrv").textContent = `name server ${state.namesrv}`;
    document.getElementById("problem").textContent = state.error || "";
    if (!state.error) {
      renderGroups(state.groups);
      renderTables(state);
      renderExtras(state);
    }
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    document.getElementById("problem").textContent = `the dashboard server does not answer (${error})`;
  }
}

async function act(event) {
  event.preventDefault();
  const form = event.target;
  const fields = Object.fromEntries(new FormData(form).entries());
  if (fields.time !== undefined) {
    if (fields.time) fields.timestamp_ms = new Date(fields.time).getTime();
    delete fields.time;
  }
  const answer = await fetch(form.dataset.action, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(fields)});
  const result = await answer.json();
  document.getElementById("action-result").textContent = result.ok ? result.result : result.error;
  poll();
}

document.querySelectorAll("form").forEach((form) => form.addEventListener("submit", act));
poll();
setInterval(poll, POLL_MS);
