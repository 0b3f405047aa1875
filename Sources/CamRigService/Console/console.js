// The CamRig console: everything it shows comes from the service's API (/api/v1) and events
// WebSocket; nothing is fetched from anywhere else.
"use strict";

const state = { rig: null, access: null, panel: null, job: null, observer: null };
const $ = (id) => document.getElementById(id);

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: "same-origin", ...options,
    headers: { "Content-Type": "application/json", ...(options.headers || {}) } });
  const text = await response.text();
  const body = text && (response.headers.get("content-type") || "").includes("json") ? JSON.parse(text) : text;
  if (!response.ok) {
    const error = new Error(body && body.detail ? body.detail : `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

function text(value, digits = 1) {
  return value === null || value === undefined ? "–" : typeof value === "number" ? value.toFixed(digits) : String(value);
}

function row(cells, header = false) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement(header ? "th" : "td");
    if (cell instanceof Node) td.appendChild(cell); else td.textContent = cell;
    tr.appendChild(td);
  }
  return tr;
}

function fillTable(table, header, rows) {
  table.replaceChildren(row(header, true), ...rows.map((cells) => row(cells)));
}

// MARK: Sign-in and role

function showSignIn(reason) {
  $("signin").hidden = false;
  $("signin-reason").textContent = reason || "";
}

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  window.location = "/login?token=" + encodeURIComponent($("signin-token").value.trim());
});

function applyRole() {
  const operator = state.access && state.access.role === "operator";
  for (const element of document.querySelectorAll(".operator")) {
    element.disabled = !operator;
    element.title = operator ? "" : "the viewer role is read-only";
  }
  for (const element of document.querySelectorAll(".operator-only")) element.disabled = !operator;
  $("who").textContent = state.access ? `${state.access.name} (${state.access.role}, ${state.access.method})` : "";
}

// MARK: Cameras

// A camera's name AGENT/DEVICE as a URL path: each part encoded.
function cameraPath(name) {
  const slash = name.indexOf("/");
  return encodeURIComponent(name.slice(0, slash)) + "/" + encodeURIComponent(name.slice(slash + 1));
}

function tileID(name) { return "tile-" + name; }

function renderGrid() {
  const grid = $("grid");
  const cameras = state.rig ? state.rig.cameras : [];
  const wanted = new Set(cameras.map((camera) => tileID(camera.device.name)));
  for (const tile of [...grid.children]) {
    if (!wanted.has(tile.id)) { state.observer.unobserve(tile); previews.visible.delete(tile.dataset.camera); tile.remove(); sendWatchList(); }
  }
  for (const camera of cameras) {
    const device = camera.device;
    let tile = document.getElementById(tileID(device.name));
    if (!tile) {
      tile = document.createElement("div");
      tile.className = "tile";
      tile.id = tileID(device.name);
      tile.dataset.camera = device.name;
      tile.innerHTML = '<img alt=""><div class="meta"><div class="name"></div><div class="info"></div><div class="lock"></div></div>';
      tile.querySelector("img").alt = "live preview of " + device.name;
      tile.addEventListener("click", () => openPanel(device.name));
      grid.appendChild(tile);
      state.observer.observe(tile);
    }
    tile.querySelector(".name").textContent = device.name;
    tile.querySelector(".info").textContent =
      `${device.active_format} · ${text(device.active_fps, 2)} fps · ${device.connected ? "connected" : "UNPLUGGED"} · ${camera.dropped_frames} dropped`;
    const phase = camera.phase ? camera.phase.state : (camera.in_session ? "unlocked" : "not in session");
    const lock = tile.querySelector(".lock");
    lock.textContent = `phase ${phase}` + (camera.phase ? ` (${text(camera.phase.phase_error_us)} µs)` : "") +
      ` · lease ${device.lease_holder || "none"}`;
    lock.className = "lock state-" + phase;
  }
}

// Previews only for the tiles on screen, all over one WebSocket: a tile scrolled away is dropped from
// the watch list, and its agent stops making previews when nobody else watches.
const previews = { socket: null, visible: new Set(), urls: new Map() };

function sendWatchList() {
  if (previews.socket && previews.socket.readyState === WebSocket.OPEN) {
    previews.socket.send(JSON.stringify({ watch: [...previews.visible] }));
  }
}

function connectPreviews() {
  const socket = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/previews`);
  socket.binaryType = "arraybuffer";
  socket.onopen = sendWatchList;
  socket.onmessage = (message) => {
    const view = new DataView(message.data);
    const length = view.getUint16(0);
    const name = new TextDecoder().decode(new Uint8Array(message.data, 2, length));
    const jpeg = new Blob([new Uint8Array(message.data, 2 + length)], { type: "image/jpeg" });
    const tile = document.getElementById(tileID(name));
    if (!tile) return;
    // Each tile holds one object URL at a time: the one it shows; the one it replaces is freed once
    // the new picture is shown (or failed), so nothing accumulates over a long session.
    const url = URL.createObjectURL(jpeg);
    const image = tile.querySelector("img");
    const held = previews.urls.get(name) || [];
    held.push(url);
    previews.urls.set(name, held);
    const release = () => {
      const urls = previews.urls.get(name) || [];
      for (const old of urls) if (old !== url) URL.revokeObjectURL(old);
      previews.urls.set(name, urls.includes(url) ? [url] : []);
    };
    image.onload = release;
    image.onerror = release;
    image.src = url;
  };
  socket.onclose = () => { previews.socket = null; setTimeout(connectPreviews, 2000); };
  previews.socket = socket;
}

function watchVisibleTiles() {
  state.observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const name = entry.target.dataset.camera;
      if (entry.isIntersecting) previews.visible.add(name); else previews.visible.delete(name);
    }
    sendWatchList();
  });
  connectPreviews();
}

// MARK: Camera panel

async function openPanel(name) {
  state.panel = name;
  $("panel").hidden = false;
  $("panel-title").textContent = name;
  $("settings-result").textContent = "";
  await refreshPanel();
}

async function refreshPanel() {
  if (!state.panel) return;
  const detail = await api(`/api/v1/devices/${cameraPath(state.panel)}`);
  const device = detail.camera.device;
  $("panel-state").textContent = `${device.localized_name} (${device.model}) · ${device.active_format} at ${text(device.active_fps, 2)} fps`;
  const select = $("panel-format");
  select.replaceChildren(new Option("—", ""), ...detail.format_ids.map((id) => new Option(id, id)));
  fillTable($("panel-settings"), ["setting", "value"], Object.entries(detail.settings).sort());
  fillTable($("panel-controls"), ["id", "name", "value", "min", "max", "default"],
    detail.controls.map((c) => ["0x" + c.id.toString(16), c.name, c.value, c.minimum, c.maximum, c.default_value]));
}

$("panel-close").addEventListener("click", () => { $("panel").hidden = true; state.panel = null; });

$("settings-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const settings = {};
  for (const [key, value] of new FormData(event.target).entries()) {
    if (!String(value).trim()) continue;
    if (key === "raw") {
      // "0xID=value", several separated by spaces: raw V4L2 controls.
      for (const pair of String(value).trim().split(/\s+/)) {
        const [id, raw] = pair.split("=");
        if (id && raw !== undefined) settings[id] = raw;
      }
    } else {
      settings[key] = String(value).trim();
    }
  }
  const result = $("settings-result");
  if (!Object.keys(settings).length) { result.textContent = "nothing to apply"; return; }
  result.textContent = "applying…";
  result.className = "";
  try {
    await api(`/api/v1/devices/${cameraPath(state.panel)}/settings`, { method: "PUT", body: JSON.stringify({ settings }) });
    result.textContent = "applied";
    event.target.reset();
    await refreshPanel();
  } catch (error) {
    result.textContent = error.message;
    result.className = "error";
  }
});

// MARK: Captures

async function startCapture(path, body) {
  try {
    const job = await api(path, { method: "POST", body: JSON.stringify(body) });
    state.job = job.id;
    showProgress(job);
    pollJob(job.id);
  } catch (error) {
    $("capture-progress").hidden = false;
    $("progress-text").textContent = error.message;
    $("progress-text").className = "error";
  }
}

$("photo-button").addEventListener("click", () =>
  startCapture("/api/v1/captures/photo", { quality: $("photo-quality").value, output: $("photo-output").value }));

$("record-button").addEventListener("click", () => {
  const body = { duration: Number($("record-duration").value) };
  if ($("record-fps").value) body.fps = Number($("record-fps").value);
  if ($("record-size").value) body.size = $("record-size").value;
  startCapture("/api/v1/captures/recording", body);
});

function showProgress(job) {
  $("capture-progress").hidden = false;
  $("progress").value = job.progress;
  $("progress-text").className = job.state === "failed" ? "error" : "";
  $("progress-text").textContent = `${job.kind} ${job.state}: ${job.error || job.message}`;
}

async function pollJob(id) {
  while (state.job === id) {
    const job = await api(`/api/v1/jobs/${id}`);
    showProgress(job);
    if (job.state !== "running") { if (job.state === "finished") showResult(job); state.job = null; return; }
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

function showResult(job) {
  const summary = job.summary;
  $("result").hidden = false;
  $("result-title").textContent = `${summary.kind} ${summary.id}: ${summary.sets} set(s), skew max ${text(summary.max_skew_us)} µs`;
  const sheet = $("contact-sheet");
  if (job.contact_sheet) { sheet.hidden = false; sheet.src = `/api/v1/captures/${summary.id}/files/${job.contact_sheet}`; }
  else sheet.hidden = true;
  fillTable($("result-table"), ["camera", "frames", "dropped", "offset µs", "± µs", "phase"],
    summary.cameras.map((c) => [c.camera, c.frames_delivered, c.dropped_frames, text(c.offset_us), text(c.error_bound_us), c.phase_lock || "–"]));
  loadCaptures();
}

async function loadCaptures() {
  // A catalog several rigs share lists them all: a RIG column, and a filter once there is more than one rig.
  const picker = $("captures-rig");
  const rig = picker.value;
  const captures = await api(rig ? `/api/v1/captures?rig=${encodeURIComponent(rig)}` : "/api/v1/captures");
  const known = new Set([...picker.options].map((o) => o.value).filter((v) => v));
  for (const c of captures) {
    if (c.rig && !known.has(c.rig)) { known.add(c.rig); picker.add(new Option(c.rig, c.rig)); }
  }
  $("captures-rig-filter").hidden = known.size < 2;
  const rows = captures.map((c) => {
    const link = document.createElement("a");
    link.href = "#";
    link.textContent = c.id;
    link.addEventListener("click", (event) => { event.preventDefault(); showCapture(c.id); });
    return [link, c.rig || "–", c.kind, c.state, c.created, c.cameras, c.sets, c.dropped_frames, text(c.skew_max_ns / 1000)];
  });
  fillTable($("captures"), ["capture", "rig", "kind", "state", "created", "cameras", "sets", "dropped", "skew max µs"], rows);
}

async function showCapture(id) {
  const summary = await api(`/api/v1/captures/${id}`);
  const detail = $("capture-detail");
  detail.replaceChildren();
  const title = document.createElement("h3");
  title.textContent = `${summary.kind} ${summary.id} (${summary.state}): skew p50 ${text(summary.skew_p50_us)} µs, max ${text(summary.max_skew_us)} µs`;
  detail.appendChild(title);
  const manifest = document.createElement("a");
  manifest.href = `/api/v1/captures/${id}/manifest`;
  manifest.textContent = "manifest.json";
  detail.appendChild(manifest);
  if (summary.recording) {
    // An on-host recording: each camera's files, gaps and offload, and one set's frames side by side.
    const files = document.createElement("table");
    detail.appendChild(files);
    fillTable(files, ["camera", "codec", "state", "frames", "gaps", "MB", "files"],
      summary.recording.map((t) => [t.camera, t.codec, t.state, t.frames, t.gaps, text(t.bytes / 1e6), t.videos.join(" ")]));
    const note = document.createElement("p");
    note.id = "capture-offload";
    note.textContent = summary.files_on_hosts > 0
      ? `${summary.files_on_hosts} file(s) still on their hosts (camrig captures offload ${summary.id})`
      : "every file is offloaded";
    detail.appendChild(note);
    if (summary.files_on_hosts === 0 && summary.sets > 0) {
      const label = document.createElement("label");
      label.textContent = "set ";
      const picker = document.createElement("input");
      picker.type = "number"; picker.min = "0"; picker.max = String(summary.sets - 1); picker.value = "0"; picker.id = "set-picker";
      label.appendChild(picker);
      detail.appendChild(label);
      const strip = document.createElement("div");
      strip.id = "set-frames";
      detail.appendChild(strip);
      const show = () => {
        strip.replaceChildren(...summary.recording.map((t, camera) => {
          const img = document.createElement("img");
          img.src = `/api/v1/captures/${id}/sets/${picker.value}/cameras/${camera}`;
          img.alt = `${t.camera}, set ${picker.value}`;
          img.title = img.alt;
          img.style.width = `${Math.floor(96 / summary.recording.length)}%`;
          return img;
        }));
      };
      picker.addEventListener("change", show);
      show();
    }
  }
  if (summary.kind === "photo") {
    const sheet = document.createElement("img");
    sheet.src = `/api/v1/captures/${id}/files/contact-sheet.png`;
    sheet.alt = "contact sheet";
    sheet.style.maxWidth = "100%";
    detail.appendChild(document.createElement("br"));
    detail.appendChild(sheet);
  }
}

// MARK: Sync health

function sparkline(values) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", "160");
  svg.setAttribute("height", "28");
  const points = values.filter((v) => v !== null && v !== undefined);
  if (points.length > 1) {
    const min = Math.min(...points), max = Math.max(...points), span = max - min || 1;
    const path = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    path.setAttribute("class", "spark");
    path.setAttribute("points", points.map((v, i) => `${(i / (points.length - 1)) * 158 + 1},${27 - ((v - min) / span) * 26}`).join(" "));
    svg.appendChild(path);
  }
  return svg;
}

async function loadSync() {
  const sync = await api("/api/v1/sync");
  fillTable($("sync-agents"), ["agent", "status", "offset µs", "± bound µs", "round trip µs", "drift ppm", "spool", "offset history", "bound history"],
    sync.agents.map((a) => [a.status.agent, a.status.status, text(a.status.offset_us), text(a.status.error_bound_us),
      text(a.status.min_round_trip_us), text(a.status.drift_ppm, 2),
      a.spool ? `${(a.spool.used_bytes / 1048576).toFixed(1)} of ${(a.spool.capacity_bytes / 1048576).toFixed(0)} MB, ${a.spool.results} results` : "–",
      sparkline(a.history.map((s) => s.offset_us)), sparkline(a.history.map((s) => s.error_bound_us))]));
  fillTable($("sync-cameras"), ["camera", "lock", "method", "phase error µs", "bound µs", "period µs", "restarts", "reason"],
    sync.cameras.map((c) => [c.camera, c.state, c.method, text(c.phase_error_us), text(c.error_bound_us), text(c.frame_period_us, 3), c.restarts, c.reason || ""]));
  const enrolled = await api("/api/v1/enrollments");
  $("enrollments-off").hidden = enrolled.enabled;
  fillTable($("enrollments"), ["time", "state", "name", "from", "connects to", "token", "certificate until", "reason"],
    enrolled.enrollments.map((e) => [e.time, e.state, e.name, e.address, e.endpoint || "–", e.token, e.not_valid_after || "–", e.reason || ""]));
}

// MARK: Rig state and events

async function loadRig() {
  try {
    state.rig = await api("/api/v1/rig");
    $("signin").hidden = true;
  } catch (error) {
    if (error.status === 401) { showSignIn(error.message); return false; }
    $("rig-summary").textContent = error.message;
    return true;
  }
  state.access = state.rig.access;
  applyRole();
  const agents = state.rig.agents;
  const up = agents.filter((a) => a.status === "connected").length;
  const session = state.rig.session;
  $("rig-summary").textContent = `${up}/${agents.length} agents · ${state.rig.cameras.length} cameras · ` +
    (session.id ? `session ${session.id} (${session.cameras} cameras${session.fps ? ", " + text(session.fps, 2) + " fps" : ""})` : `no session: ${session.error || "waiting"}`);
  renderGrid();
  return true;
}

function connectEvents() {
  const socket = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/events`);
  socket.onmessage = (message) => {
    const event = JSON.parse(message.data);
    const item = document.createElement("li");
    item.textContent = `${event.time.slice(11, 19)} ${event.message}`;
    const list = $("event-list");
    list.insertBefore(item, list.firstChild);
    while (list.children.length > 100) list.lastChild.remove();
    if (event.kind.startsWith("device.") || event.kind.startsWith("agent.") || event.kind.startsWith("session.") || event.kind === "phase.state") loadRig();
    if (event.kind === "device.settings" && state.panel === event.device) refreshPanel();
    const enrollment = ["agent.enrolled", "agent.renewed", "agent.revoked", "enrollment.refused"].includes(event.kind);
    if (enrollment && !$("view-sync").hidden) loadSync();
  };
  socket.onclose = () => setTimeout(connectEvents, 2000);
}

for (const button of document.querySelectorAll("nav button")) {
  button.addEventListener("click", () => {
    for (const other of document.querySelectorAll("nav button")) other.classList.toggle("active", other === button);
    for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== "view-" + button.dataset.view;
    if (button.dataset.view === "sync") loadSync();
    if (button.dataset.view === "captures") loadCaptures();
  });
}

$("captures-rig").addEventListener("change", () => { $("capture-detail").replaceChildren(); loadCaptures(); });

async function main() {
  watchVisibleTiles();
  if (!(await loadRig())) return;
  connectEvents();
  setInterval(loadRig, 3000);
  setInterval(() => { if (!$("view-sync").hidden) loadSync(); }, 2000);
}

main();
