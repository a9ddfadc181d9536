// The live page: polls GET /admin/stats every second and draws it; the switches call
// PUT /admin/mode. Everything from the service (keys above all, which clients choose) is put
// in the page as text, never as markup.
"use strict";

const MODES = ["enforce", "shadow", "open", "closed"];
const CHART_SECONDS = 300;
let token = sessionStorage.getItem("sluicegate-admin-token") || "";

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function headers() {
  const all = { "Content-Type": "application/json" };
  if (token) all.Authorization = "Bearer " + token;
  return all;
}

function sum(series, seconds) {
  return series.slice(-seconds).reduce((a, b) => a + b, 0);
}

function millis(micros) {
  if (micros === null || micros === undefined) return "–";
  return micros >= 1000 ? (micros / 1000).toFixed(1) + " ms" : micros + " µs";
}

function chart(rule) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${CHART_SECONDS} 60`);
  svg.setAttribute("preserveAspectRatio", "none");
  const n = rule.allowed.length;
  let peak = 1;
  for (let i = 0; i < n; i++) {
    peak = Math.max(peak, rule.allowed[i] + rule.denied[i] + rule.shadow_denied[i]);
  }
  for (let i = 0; i < n; i++) {
    let base = 60;
    for (const [series, cls] of [[rule.allowed, "a"], [rule.shadow_denied, "s"], [rule.denied, "d"]]) {
      const h = (series[i] / peak) * 58;
      if (h <= 0) continue;
      const bar = document.createElementNS(ns, "rect");
      bar.setAttribute("x", CHART_SECONDS - n + i);
      bar.setAttribute("width", 1);
      bar.setAttribute("y", base - h);
      bar.setAttribute("height", h);
      bar.setAttribute("class", cls);
      svg.append(bar);
      base -= h;
    }
  }
  return svg;
}

function modeSwitch(rule, current) {
  const box = el("span", { class: "switch", "data-rule": rule });
  for (const mode of MODES) {
    const button = el("button", { type: "button", "data-mode": mode, "data-testid": `mode-${rule}-${mode}` }, mode);
    if (mode === current) button.classList.add("on");
    button.addEventListener("click", () => setMode(rule, mode));
    box.append(button);
  }
  return box;
}

async function setMode(rule, mode) {
  const answer = await fetch("/admin/mode", { method: "PUT", headers: headers(), body: JSON.stringify({ rule, mode }) });
  if (answer.status === 401) return askForToken();
  if (!answer.ok) {
    console.warn("mode change refused:", answer.status, await answer.text());
    return;
  }
  await refresh();
}

function number(label, value, cls, testid) {
  return el("span", { class: cls }, label + " ", el("b", { "data-testid": testid }, value));
}

function drawRule(rule) {
  const id = rule.id;
  const card = el("article", { class: "rule", "data-rule": id });
  card.append(el("h2", {},
    el("span", {}, id),
    el("span", { class: "where" }, `${rule.file}:${rule.line}:${rule.column}${rule.shadow_mode ? " · shadow_mode in file" : ""}`),
    modeSwitch(id, rule.mode)));
  const last = (series) => (series.length ? series[series.length - 1] : 0);
  card.append(el("div", { class: "numbers" },
    number("allowed/s", last(rule.allowed), "allowed", `rule-${id}-allowed-1s`),
    number("denied/s", last(rule.denied), "denied", `rule-${id}-denied-1s`),
    number("shadow-denied/s", last(rule.shadow_denied), "shadow", `rule-${id}-shadow-1s`),
    number("last minute: allowed", sum(rule.allowed, 60), "allowed", `rule-${id}-allowed-60s`),
    number("denied", sum(rule.denied, 60), "denied", `rule-${id}-denied-60s`),
    number("shadow-denied", sum(rule.shadow_denied, 60), "shadow", `rule-${id}-shadow-60s`),
    number("near limit", sum(rule.near_limit, 60), "near", `rule-${id}-near-60s`)));
  card.append(chart(rule));
  if (rule.top_limited.length) {
    const list = el("ul", { class: "top", "data-testid": `rule-${id}-top` }, el("li", {}, "most limited, last minute:"));
    for (const hit of rule.top_limited) {
      list.append(el("li", {}, el("code", {}, hit.key), " ", hit.count));
    }
    card.append(list);
  }
  return card;
}

function draw(stats) {
  const service = document.querySelector("#service");
  service.replaceChildren(el("span", {}, "whole service: "), modeSwitch("*", stats.modes["*"] || "enforce"));
  const backend = stats.backend;
  const health = [el("span", {}, "store: ", el("b", {}, backend.store))];
  if (backend.store === "redis") {
    health.push(el("span", { class: backend.redis_up ? "up" : "down", "data-testid": "redis" }, backend.redis_up ? "redis up" : "redis down"));
    health.push(el("span", {}, "failure policy: ", el("b", {}, backend.failure_policy)));
    const cache = backend.over_limit_cache;
    if (cache && cache.capacity > 0) {
      health.push(el("span", { "data-testid": "over-limit-cache" }, "over-limit cache: ", el("b", {}, `${cache.hits} hits`), `, ${cache.entries}/${cache.capacity} entries`));
    }
    const lease = backend.leasing;
    if (lease && lease.on) {
      health.push(el("span", { "data-testid": "leasing" }, "leasing: ", el("b", {}, `${lease.local_grants} round trips saved`), `, ${lease.leases} leases, ${lease.permits_held} held, ${lease.permits_returned} returned, ${lease.permits_expired_unused} expired unused`));
    }
  }
  health.push(el("span", {}, "backend errors: ", el("b", {}, backend.errors)));
  health.push(el("span", {}, `reloads: ${backend.reloads.success} ok, ${backend.reloads.failure} refused`));
  document.querySelector("#health").replaceChildren(...health);
  const latency = stats.latency_micros;
  document.querySelector("#summary").replaceChildren(
    el("div", {}, "decision p50", el("b", {}, millis(latency.p50))),
    el("div", {}, "p90", el("b", {}, millis(latency.p90))),
    el("div", {}, "p99", el("b", {}, millis(latency.p99))),
    el("div", {}, "p99.9", el("b", {}, millis(latency.p999))),
    el("div", {}, "counter keys", el("b", { "data-testid": "keys" }, `${stats.keys.live ?? "–"} / ${stats.keys.max ?? "–"}`)));
  document.querySelector("#rules").replaceChildren(...stats.rules.map(drawRule));
  document.body.dataset.updated = String(stats.now);
}

function askForToken() {
  document.querySelector("#login").hidden = false;
}

async function refresh() {
  const answer = await fetch("/admin/stats", { headers: headers() });
  if (answer.status === 401) return askForToken();
  if (!answer.ok) throw new Error(`GET /admin/stats: ${answer.status}`);
  document.querySelector("#login").hidden = true;
  draw(await answer.json());
}

document.querySelector("#login").addEventListener("submit", (event) => {
  event.preventDefault();
  token = document.querySelector("#token").value;
  sessionStorage.setItem("sluicegate-admin-token", token);
  refresh().catch((error) => { document.querySelector("#login-error").textContent = error.message; });
});

refresh().catch((error) => console.warn(error.message));
setInterval(() => refresh().catch((error) => console.warn(error.message)), 1000);
