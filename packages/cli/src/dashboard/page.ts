/**
 * The dashboard's page: static HTML, CSS and JavaScript, served as is (no build step, no outside
 * resource). It listens to `/events` and redraws from each state the server sends; every text from the
 * group's records goes in through `textContent`, never as markup.
 */
export const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>leasehold dashboard</title>
<style>
  :root { --alive: #1a7f37; --expired: #bf8700; --dead: #cf222e; --free: #6e7781; --finished: #0969da; --stalled: #bc4c00; --rewind: #8250df; --line: #d0d7de; }
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; }
  header { background: #24292f; color: #fff; padding: 10px 16px; display: flex; gap: 24px; flex-wrap: wrap; align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  header .muted { color: #afb8c1; }
  main { padding: 12px 16px; display: grid; gap: 16px; grid-template-columns: minmax(0, 3fr) minmax(260px, 1fr); }
  section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; overflow-x: auto; }
  section h2 { font-size: 15px; margin: 0 0 8px; }
  .wide { grid-column: 1 / -1; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; }
  th { font-weight: 600; color: #57606a; }
  .badge { display: inline-block; padding: 0 6px; border-radius: 10px; color: #fff; font-size: 12px; }
  .alive { background: var(--alive); } .expired { background: var(--expired); } .dead { background: var(--dead); }
  .free { background: var(--free); } .finished { background: var(--finished); } .stalled { background: var(--stalled); } .rewind { background: var(--rewind); }
  tr.stalled-row td { background: #fff1e5; }
  .mono { font-family: ui-monospace, monospace; font-size: 12px; }
  #timeline { list-style: none; padding: 0; margin: 0; max-height: 520px; overflow-y: auto; }
  #timeline li { border-bottom: 1px solid var(--line); padding: 3px 0; }
  #timeline .kind { font-size: 11px; color: #57606a; margin-right: 6px; }
  .error { color: var(--dead); }
  .note { color: #57606a; }
  svg text { font: 11px ui-monospace, monospace; }
  button { cursor: pointer; }
  #confirm { position: fixed; inset: 0; background: rgba(0,0,0,.35); display: none; align-items: center; justify-content: center; }
  #confirm.open { display: flex; }
  #confirm > div { background: #fff; padding: 16px; border-radius: 6px; max-width: 520px; }
  pre { white-space: pre-wrap; max-height: 240px; overflow-y: auto; background: #f6f8fa; padding: 6px; }
  form { display: flex; gap: 6px; flex-wrap: wrap; align-items: center; margin-bottom: 8px; }
</style>
</head>
<body>
<header>
  <h1>leasehold · <span id="group">…</span></h1>
  <span class="muted">storage <span id="storage" class="mono"></span></span>
  <span class="muted">leader <span id="leader"></span></span>
  <span class="muted">observed for <span id="observed"></span></span>
  <span class="muted" id="lag"></span>
  <span id="connection" class="muted">connecting…</span>
</header>
<main>
  <section class="wide"><h2>Members</h2><p class="note">Liveness as this dashboard observes it: a member expires once its record has not moved for its own lease duration, on this machine's monotonic clock.</p><div id="members"></div></section>
  <section class="wide"><h2>Leases</h2><div id="leases"></div></section>
  <section><h2>Shard lineage</h2><p class="note">Generations left to right, parents before children; grey: finished and cleaned up by the leader.</p><div id="lineage"></div></section>
  <section><h2>Timeline</h2><p class="note">What changed while this dashboard watched, newest first.</p><ul id="timeline"></ul></section>
  <section class="wide" id="corrupt-section" hidden><h2>Records that cannot be read back</h2><div id="corrupt"></div></section>
  <section class="wide" id="actions" hidden>
    <h2>Actions</h2>
    <p class="note">Each action runs the leasehold command of the same name, with its guards; writes ask for confirmation.</p>
    <form id="rewind-form"><strong>rewind</strong> to <input name="to" placeholder="2024-05-01T10:00:00Z | trim-horizon | latest" size="32" required>
      shards <input name="shards" placeholder="all, or shard ids, comma separated" size="28"> stream <input name="stream" size="12">
      <button type="submit" name="plan" value="1">Plan</button><button type="button" id="rewind-request">Request…</button></form>
    <form id="checkpoint-form"><strong>checkpoint set</strong> lease <input name="lease" required size="24"> position <input name="position" required size="24">
      <label><input type="checkbox" name="reopen"> reopen finished</label><button type="submit">Set…</button></form>
    <pre id="action-output" hidden></pre>
  </section>
</main>
<div id="confirm"><div><p id="confirm-text"></p><button id="confirm-yes">Confirm</button> <button id="confirm-no">Cancel</button></div></div>
<script>
"use strict";
var state = null;
function h(tag, attrs) {
  var node = document.createElement(tag);
  for (var name in attrs || {}) {
    var value = attrs[name];
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "onclick") node.addEventListener("click", value);
    else node.setAttribute(name, String(value));
  }
  for (var i = 2; i < arguments.length; i++) {
    var child = arguments[i];
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}
function svg(tag, attrs) {
  var node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (var name in attrs) { if (name === "text") node.textContent = attrs[name]; else node.setAttribute(name, String(attrs[name])); }
  return node;
}
function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return Math.round(ms) + "ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
  return Math.floor(ms / 60000) + "m" + String(Math.floor((ms % 60000) / 1000)).padStart(2, "0") + "s";
}
function badge(cls, text) { return h("span", { "class": "badge " + cls, text: text }); }
function table(headers, rows) {
  var head = h("tr", null);
  headers.forEach(function (title) { head.append(h("th", { text: title })); });
  var body = h("tbody", null);
  rows.forEach(function (row) { body.append(row); });
  return h("table", null, h("thead", null, head), body);
}
function cell(content, attrs) {
  var td = h("td", attrs || null);
  if (content instanceof Node) td.append(content); else td.textContent = content === null || content === undefined ? "-" : String(content);
  return td;
}
function leaseState(lease) {
  if (lease.finished) return "finished";
  if (lease.rewindRequest) return "rewind";
  if (lease.checkpointStalled || lease.stalled) return "stalled";
  if (lease.held) return "alive";
  if (lease.ownerLiveness === "expired") return "expired";
  if (lease.owner !== null && lease.ownerLiveness !== "alive") return "dead";
  return "free";
}
var COLORS = { alive: "#1a7f37", expired: "#bf8700", dead: "#cf222e", free: "#6e7781", finished: "#0969da", stalled: "#bc4c00", rewind: "#8250df", deleted: "#afb8c1" };

function renderMembers(snapshot) {
  var rows = snapshot.members.map(function (member) {
    var requests = member.requests.map(function (r) { return r.leaseKey + "←" + r.from; }).join(", ");
    var actions = state.actions ? h("button", { text: "remove…", onclick: function () {
      ask("Remove member " + member.workerId + " at version " + member.version + "? leasehold member remove runs with its guard: an alive member is watched for its lease duration first.",
        { action: "member-remove", worker: member.workerId, version: member.version, confirm: true });
    } }) : null;
    return h("tr", { "data-worker": member.workerId, "data-liveness": member.liveness },
      cell(member.workerId + (member.leader ? " (leader)" : "")),
      cell(badge(member.liveness, member.liveness)),
      cell(member.incarnation, { "class": "mono" }),
      cell(member.sinceMovedMs === null ? (member.sinceMovedAtLeastMs === 0 ? "—" : "≥" + duration(member.sinceMovedAtLeastMs)) : duration(member.sinceMovedMs) + " ago"),
      cell(duration(member.leaseDurationMs)),
      cell(member.leases),
      cell(member.leaving ? "leaving" : "-"),
      cell(requests || "-"),
      cell(actions));
  });
  var box = document.getElementById("members");
  box.replaceChildren(snapshot.members.length === 0 ? h("p", { "class": "note", text: "no member: no worker has joined the group" }) :
    table(["worker", "liveness", "incarnation", "record moved", "lease duration", "leases held", "leaving", "handoff requests", ""], rows));
}

function streamsOf(leases) {
  var streams = new Map();
  leases.forEach(function (lease) {
    var key = lease.streamId === null ? "" : lease.streamId;
    if (!streams.has(key)) streams.set(key, []);
    streams.get(key).push(lease);
  });
  return Array.from(streams.entries()).sort(function (a, b) { return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0; });
}

function renderLeases(snapshot) {
  var box = document.getElementById("leases");
  var parts = [];
  if (snapshot.leases.length === 0) parts.push(h("p", { "class": "note", text: "no lease yet: the leader creates one per shard" }));
  streamsOf(snapshot.leases).forEach(function (entry) {
    if (entry[0] !== "") parts.push(h("h3", { text: "stream " + entry[0] }));
    var rows = entry[1].map(function (lease) {
      var kind = leaseState(lease);
      var stall = lease.checkpointStalled ? "checkpoint still ≥" + duration(lease.checkpointStillAtLeastMs) + " while others move" : "";
      if (lease.stalled) stall = (stall ? stall + "; " : "") + "worker reports " + lease.stalled.reason;
      var rewind = lease.rewindRequest ? "requested " + lease.rewindRequest.id + " → " + lease.rewindRequest.to : lease.rewound ? "applied " + lease.rewound : "-";
      return h("tr", { "data-lease": lease.leaseKey, "data-owner": lease.owner === null ? "" : lease.owner, "data-state": kind,
          "data-rewind": lease.rewindRequest ? lease.rewindRequest.id : (lease.rewound || ""), "class": kind === "stalled" ? "stalled-row" : null },
        cell(lease.leaseKey, { "class": "mono" }),
        cell(badge(kind, kind)),
        cell(lease.owner),
        cell(lease.ownerLiveness),
        cell(lease.checkpoint, { "class": "mono" }),
        cell(lease.finished ? "-" : lease.checkpointMovedMs === null ? "≥" + duration(lease.checkpointStillAtLeastMs) + " still" : duration(lease.checkpointMovedMs) + " ago"),
        cell(stall || "-"),
        cell(rewind),
        cell(lease.parentKeys.join(", ") || "-", { "class": "mono" }),
        cell(lease.epoch));
    });
    parts.push(table(["lease", "state", "owner", "owner is", "checkpoint", "checkpoint moved", "stall", "rewind", "parents", "epoch"], rows));
  });
  box.replaceChildren.apply(box, parts);
}

function renderLineage(snapshot) {
  var box = document.getElementById("lineage");
  var parts = [];
  var keys = new Set(snapshot.leases.map(function (lease) { return lease.leaseKey; }));
  var retired = snapshot.retired.map(function (lease) { return { leaseKey: lease.leaseKey, streamId: lease.streamId, parentKeys: lease.parentKeys, generation: lease.generation, retired: true }; });
  retired.forEach(function (lease) { keys.add(lease.leaseKey); });
  streamsOf(retired.concat(snapshot.leases)).forEach(function (entry) {
    var leases = entry[1];
    var columns = [];
    leases.forEach(function (lease) { (columns[lease.generation] = columns[lease.generation] || []).push(lease); });
    var where = new Map();
    // Nodes wide enough for the longest key (Kinesis shard ids are 20 characters), up to a limit.
    var nodeWidth = Math.min(260, Math.max(90, 10 + 7 * Math.max.apply(null, leases.map(function (lease) { return lease.leaseKey.length; }))));
    var width = nodeWidth + 36, height = 26, maxRows = 0;
    columns.forEach(function (column, x) { (column || []).forEach(function (lease, y) { where.set(lease.leaseKey, { x: 8 + x * width, y: 8 + y * height }); maxRows = Math.max(maxRows, y + 1); }); });
    var picture = svg("svg", { width: 16 + columns.length * width, height: 16 + maxRows * height, role: "img", "aria-label": "lineage" + (entry[0] ? " of " + entry[0] : "") });
    leases.forEach(function (lease) {
      lease.parentKeys.forEach(function (parentKey) {
        if (!keys.has(parentKey) || !where.has(parentKey)) return;
        var from = where.get(parentKey), to = where.get(lease.leaseKey);
        picture.append(svg("line", { x1: from.x + nodeWidth, y1: from.y + 9, x2: to.x, y2: to.y + 9, stroke: "#8c959f", "data-edge": parentKey + ">" + lease.leaseKey }));
      });
    });
    leases.forEach(function (lease) {
      var at = where.get(lease.leaseKey), kind = lease.retired ? "deleted" : leaseState(lease);
      var node = svg("g", { "data-node": lease.leaseKey, "data-generation": lease.generation, "data-state": kind, "data-parents": lease.parentKeys.join(",") });
      node.append(svg("rect", { x: at.x, y: at.y, width: nodeWidth, height: 18, rx: 4, fill: COLORS[kind] }));
      var fits = Math.floor((nodeWidth - 10) / 7);
      var label = lease.leaseKey.length > fits ? "…" + lease.leaseKey.slice(-(fits - 1)) : lease.leaseKey;
      node.append(svg("text", { x: at.x + 4, y: at.y + 13, fill: "#fff", text: label }));
      node.append(svg("title", { text: lease.leaseKey + ": " + kind + (lease.owner ? " (" + lease.owner + ")" : "") }));
      picture.append(node);
    });
    if (entry[0] !== "") parts.push(h("h3", { text: "stream " + entry[0] }));
    parts.push(picture);
  });
  box.replaceChildren.apply(box, parts);
}

function renderCorrupt(snapshot) {
  var section = document.getElementById("corrupt-section");
  section.hidden = snapshot.corrupt.length === 0;
  document.getElementById("corrupt").replaceChildren(table(["kind", "key", "error"], snapshot.corrupt.map(function (record) {
    return h("tr", { "data-corrupt": record.key === null ? "" : record.key }, cell(record.kind), cell(record.key), cell(record.error));
  })));
}

function renderTimeline(events) {
  var list = document.getElementById("timeline");
  var items = events.slice().reverse().map(function (event) {
    return h("li", { "data-kind": event.kind, "data-lease": event.leaseKey, "data-worker": event.workerId },
      h("span", { "class": "kind", text: event.at.slice(11, 19) + " " + event.kind }), event.text);
  });
  list.replaceChildren.apply(list, items.length === 0 ? [h("li", { "class": "note", text: "nothing changed yet" })] : items);
}

function render() {
  var snapshot = state.snapshot;
  document.getElementById("actions").hidden = !state.actions;
  var connection = document.getElementById("connection");
  connection.textContent = state.error ? "storage did not answer: " + state.error : "live, read every " + duration(state.intervalMs);
  connection.className = state.error ? "error" : "muted";
  if (snapshot === null) return;
  document.getElementById("group").textContent = snapshot.group;
  document.getElementById("storage").textContent = snapshot.storage;
  document.getElementById("leader").textContent = snapshot.leader === null ? "none" : (snapshot.leader.holder || "none") + " (term " + snapshot.leader.term + ")";
  document.getElementById("observed").textContent = duration(snapshot.observedMs);
  document.getElementById("lag").textContent = snapshot.lag.reason;
  renderMembers(snapshot);
  renderLeases(snapshot);
  renderLineage(snapshot);
  renderCorrupt(snapshot);
  renderTimeline(state.timeline);
}

var pending = null;
function ask(text, body) {
  pending = body;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm").className = "open";
}
document.getElementById("confirm-no").addEventListener("click", function () { pending = null; document.getElementById("confirm").className = ""; });
document.getElementById("confirm-yes").addEventListener("click", function () {
  var body = pending; pending = null; document.getElementById("confirm").className = "";
  if (body) post(body);
});
function post(body) {
  var output = document.getElementById("action-output");
  output.hidden = false;
  output.textContent = body.action + ": running…";
  fetch("/api/actions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })
    .then(function (response) { return response.json(); })
    .then(function (result) { output.textContent = result.error ? "refused: " + result.error : body.action + " exited with " + result.code + "\\n" + result.out + result.err; })
    .catch(function (error) { output.textContent = "failed: " + error; });
}
function rewindBody(action) {
  var form = document.getElementById("rewind-form");
  var shards = form.shards.value.split(",").map(function (s) { return s.trim(); }).filter(Boolean);
  return { action: action, to: form.to.value, shards: shards, stream: form.stream.value || undefined };
}
document.getElementById("rewind-form").addEventListener("submit", function (event) { event.preventDefault(); post(rewindBody("rewind-plan")); });
document.getElementById("rewind-request").addEventListener("click", function () {
  var body = rewindBody("rewind-request"); body.confirm = true;
  ask("Rewind " + (body.shards.length ? body.shards.join(", ") : "every shard") + " to " + body.to + "? The owners apply the request while they run.", body);
});
document.getElementById("checkpoint-form").addEventListener("submit", function (event) {
  event.preventDefault();
  var form = event.target;
  ask("Set the checkpoint of " + form.lease.value + " to " + form.position.value + "? leasehold checkpoint set refuses while the group is live.",
    { action: "checkpoint-set", lease: form.lease.value, position: form.position.value, reopenFinished: form.reopen.checked, confirm: true });
});

var events = new EventSource("/events");
var TIMELINE_LIMIT = 500;
// The first message carries the whole timeline; each later one only the events its read added.
events.addEventListener("state", function (message) {
  var next = JSON.parse(message.data);
  if (!next.timeline) next.timeline = (state ? state.timeline : []).concat(next.added || []).slice(-TIMELINE_LIMIT);
  state = next;
  render();
});
events.addEventListener("error", function () { var c = document.getElementById("connection"); c.textContent = "disconnected, reconnecting…"; c.className = "error"; });
</script>
</body>
</html>
`;
