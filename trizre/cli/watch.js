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

  const pairs = document.getElementById("pairs");
  pairs.replaceChildren();
  if (!snap.pairs.length) pairs.appendChild(el("div", "no Binary Star pairs", { class: "empty" }));
  for (const pair of snap.pairs) {
    const box = el("div", null, { "data-pair": pair.pair });
    const head = el("div");
    for (const server of pair.servers) {
      head.appendChild(el("span", server.name + " (" + server.role + ") ", {}));
      const shown = server.stale ? server.state + " (stale: replaced)" : server.state;
      head.appendChild(el("span", shown, {
        class: server.stale ? "stale" : server.state,
        "data-server": server.name,
        "data-state": server.state,
        "data-stale": server.stale ? "1" : "0",
      }));
      head.appendChild(document.createTextNode("   "));
    }
    box.appendChild(head);
    const last = pair.last_failover;
    box.appendChild(el("div", last ? "last failover: " + when(last.time) + " to " + last.server : "no failover yet",
      { "data-last-failover": last ? last.server : "" }));
    const table = el("table");
    const body = el("tbody");
    for (const t of pair.history.slice().reverse()) {
      body.appendChild(row([when(t.time), t.server, t.old + " \u2192 " + t.new, t.event],
        { "data-transition": t.server + ":" + t.new }));
    }
    table.appendChild(body);
    box.appendChild(table);
    pairs.appendChild(box);
  }

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
