// The live page of `trizre watch --web`. Everything peers send (names,
// headers, groups) is put in the page as text (textContent), never as HTML.
"use strict";

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

function row(cells, attrs) {
  const tr = el("tr", null, attrs);
  for (const cell of cells) {
    tr.appendChild(cell instanceof Node ? wrap(cell) : el("td", cell));
  }
  return tr;
}

function wrap(node) { const td = el("td"); td.appendChild(node); return td; }

function when(seconds) { return new Date(seconds * 1000).toLocaleTimeString(); }

function fill(tbody, rows, emptyText, columns) {
  tbody.replaceChildren(...rows);
  if (!rows.length) {
    const td = el("td", emptyText, { class: "empty", colspan: String(columns) });
    const tr = el("tr"); tr.appendChild(td); tbody.appendChild(tr);
  }
}

let lastSeq = 0;

function render(snap) {
  document.getElementById("self").textContent = snap.node.name + " " + snap.node.uuid;
  fill(document.querySelector("#peers tbody"), snap.peers.map((p) => row([
    p.name,
    el("span", p.presence, { class: p.presence }),
    el("span", p.endpoint, { class: "mono" }),
    p.groups.join(", "),
    Object.entries(p.headers).map(([k, v]) => k + "=" + v).join(", "),
    el("span", p.uuid, { class: "mono" }),
  ], { "data-peer": p.name, "data-presence": p.presence })), "no peers yet", 6);

  fill(document.querySelector("#groups tbody"), Object.entries(snap.groups).map(([g, members]) =>
    row([g, members.join(", ")], { "data-group": g })), "no groups", 2);

  fill(document.querySelector("#services tbody"), snap.services.map((s) =>
    row([s.service, s.workers.map((w) => w.name).join(", ")],
        { "data-service": s.service, "data-workers": String(s.workers.length) })),
    "no services", 2);

  fill(document.querySelector("#pairs tbody"), snap.pairs.map((pair) => {
    const health = pair.health;
    let words = health.reason ? health.status + ": " + health.reason : health.status;
    if (health.since !== null && health.status !== "ok") words += " since " + when(health.since);
    const servers = el("div", null, { class: "servers" });
    for (const server of pair.servers) {
      const line = el("div");
      line.appendChild(el("span", server.name + " (" + server.role + ") "));
      const down = server.state === "down";
      const shown = down && server.last_heard !== null ? "down, last heard " + when(server.last_heard) : server.state;
      line.appendChild(el("span", shown, {
        class: down ? "down" : server.state,
        "data-server": server.name,
        "data-state": server.state,
        "data-up": server.up ? "1" : "0",
      }));
      servers.appendChild(line);
    }
    const last = pair.last_failover;
    return row([
      pair.pair,
      el("span", words, { class: "health-" + health.status.split(" ")[0], "data-health": health.status }),
      servers,
      el("span", last ? when(last.time) + " to " + last.server + " (" + last.event + ": " + last.why + ")" : "none",
        { "data-last-failover": last ? last.server : "" }),
    ], { "data-pair": pair.pair });
  }), "no Binary Star pairs", 4);

  const transitions = [];
  for (const pair of snap.pairs) {
    for (const t of pair.history) transitions.push([t, pair.pair]);
  }
  transitions.sort((a, b) => b[0].time - a[0].time);
  fill(document.querySelector("#transitions tbody"), transitions.slice(0, 40).map(([t, name]) =>
    row([when(t.time), name, t.server, t.old + " \u2192 " + t.new, t.event],
        { "data-transition": t.server + ":" + t.new })), "no transitions", 5);

  const log = document.getElementById("log");
  if (snap.log.length && snap.log[snap.log.length - 1].seq < lastSeq) {
    lastSeq = 0; // a new watcher process: its log starts again
    log.replaceChildren();
  }
  const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  for (const entry of snap.log) {
    if (entry.seq <= lastSeq) continue;
    lastSeq = entry.seq;
    log.appendChild(el("div", when(entry.time) + "  " + entry.text, { "data-seq": String(entry.seq), "data-kind": entry.kind }));
  }
  while (log.childElementCount > 500) log.firstElementChild.remove();
  if (atBottom) log.scrollTop = log.scrollHeight;
}

const status = document.getElementById("status");
const source = new EventSource("/events");
source.onopen = () => { status.textContent = "live"; status.setAttribute("data-live", "1"); };
source.onerror = () => { status.textContent = "disconnected, retrying…"; status.setAttribute("data-live", "0"); };
source.onmessage = (message) => {
  render(JSON.parse(message.data));
  status.textContent = "live, updated " + new Date().toLocaleTimeString();
};
