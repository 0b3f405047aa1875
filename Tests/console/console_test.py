#!/usr/bin/env python3
"""The coordinator service as its users meet it: the HTTPS API with tokens and client certificates,
Prometheus metrics, the OpenAPI document, and the web console in headless Chromium.

Usage: console_test.py URL TOKEN TLS_DIR SCREENSHOT_DIR [CAMRIG [CAPTURES]]
  URL     the service (https://127.0.0.1:PORT/), started with `camrig serve --loopback 2`
  TOKEN   an operator token; TLS_DIR holds the rig's CA (ca-key.pem) and agent-1.pem; viewer-1 is issued if missing
Prints one line per check; exits 1 at the first failed one.
"""
import base64
import json
import os
import sqlite3
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

URL, TOKEN, TLS_DIR, SHOTS = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3], sys.argv[4]
# The service's captures folder (its catalog.sqlite), when given: a second rig's capture is listed there.
CAPTURES = sys.argv[6] if len(sys.argv) > 6 else None
os.makedirs(SHOTS, exist_ok=True)


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def context(cert=None):
    ctx = ssl.create_default_context(cafile=os.path.join(TLS_DIR, "ca.pem"))
    ctx.check_hostname = False  # the coordinator's certificate names the coordinator, not 127.0.0.1
    if cert:
        ctx.load_cert_chain(os.path.join(TLS_DIR, cert + ".pem"), os.path.join(TLS_DIR, cert + "-key.pem"))
    return ctx


def request(path, method="GET", body=None, token=None, cert=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=context(cert), timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def raw_request(path, method="GET", body=b"", headers=None):
    """A request exactly as given (no JSON content type, no credentials unless in headers)."""
    req = urllib.request.Request(URL + path, data=body if method != "GET" else None, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, context=context(), timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def problem(status, headers, body):
    return headers.get("Content-Type", "").startswith("application/problem+json") and json.loads(body)["status"] == status


CAMRIG = sys.argv[5] if len(sys.argv) > 5 else os.environ.get("CAMRIG", "camrig")
if not os.path.exists(os.path.join(TLS_DIR, "viewer-1.pem")):
    subprocess.run([CAMRIG, "certs", "issue", "--dir", TLS_DIR, "--name", "viewer-1", "--role", "viewer"], capture_output=True, check=True)

# --- Access -------------------------------------------------------------------------------------------
status, headers, body = request("/api/v1/rig")
check(status == 401 and problem(401, headers, body) and "camrig certs token" in json.loads(body)["detail"],
      "without a certificate or token the API answers 401 with a problem document saying how to get access")
status, headers, body = request("/api/v1/rig", token="camrig1.e30.AAAA")
check(status == 401 and "not issued by this rig" in json.loads(body)["detail"], "a forged token is refused, saying so")
status, _, body = request("/api/v1/whoami", token=TOKEN)
check(status == 200 and json.loads(body)["role"] == "operator", "the operator token signs in as operator")
status, _, body = request("/api/v1/whoami", cert="viewer-1")
check(status == 200 and json.loads(body) == {"name": "viewer-1", "role": "viewer", "method": "certificate"},
      "a viewer certificate signs in as viewer")
status, headers, body = request("/api/v1/captures/photo", method="POST", body={}, cert="viewer-1")
check(status == 403 and problem(403, headers, body) and "viewer role" in json.loads(body)["detail"],
      "a viewer may not capture: 403 saying the viewer role is read-only")
try:
    request("/api/v1/whoami", cert="agent-1")
    refused = False
except (ssl.SSLError, urllib.error.URLError, ConnectionError) as error:
    refused = True
check(refused, "an agent's certificate is refused at the TLS handshake")
viewer_token = subprocess.run(
    [CAMRIG, "certs", "token", "--dir", TLS_DIR, "--name", "wall-screen", "--role", "viewer"],
    capture_output=True, text=True, check=True).stdout.strip()
status, _, body = request("/api/v1/whoami", token=viewer_token)
check(status == 200 and json.loads(body)["role"] == "viewer" and json.loads(body)["name"] == "wall-screen",
      "`camrig certs token --role viewer` issues a token the service accepts as viewer")

check(raw_request("/api/v1/captures/photo", "POST", b"{}", {"Authorization": "Bearer " + TOKEN, "Content-Type": "text/plain"})[0] == 415,
      "a POST that is not JSON (what a form on another site could send) is refused")
status, body = raw_request("/api/v1/captures/photo", "POST", b"{}",
                           {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json", "Origin": "https://evil.example"})
check(status == 403 and "evil.example" in json.loads(body)["detail"], "a change requested from another site's page is refused")
subprocess.run([CAMRIG, "certs", "issue", "--dir", TLS_DIR, "--name", "viewer-2", "--role", "viewer"], capture_output=True, check=True)
check(request("/api/v1/whoami", cert="viewer-2")[0] == 200, "a newly issued viewer certificate is accepted")
subprocess.run([CAMRIG, "certs", "revoke", "--dir", TLS_DIR, "--name", "viewer-2"], capture_output=True, check=True)
time.sleep(1.1)  # the list's modification time is what the service watches
try:
    subprocess.run(["true"])
    revoked_refused = request("/api/v1/whoami", cert="viewer-2")[0] != 200
except (ssl.SSLError, urllib.error.URLError, ConnectionError, FileNotFoundError):
    revoked_refused = True
check(revoked_refused, "a certificate revoked while the service runs is refused from its next connection on")

revocable = subprocess.run([CAMRIG, "certs", "token", "--dir", TLS_DIR, "--name", "lost-tablet", "--role", "operator"],
                           capture_output=True, text=True, check=True).stdout.strip()
check(request("/api/v1/whoami", token=revocable)[0] == 200, "a new operator token is accepted")
subprocess.run([CAMRIG, "certs", "revoke-token", "--dir", TLS_DIR, revocable], capture_output=True, check=True)
status, _, body = request("/api/v1/whoami", token=revocable)
check(status == 401 and "revoked" in json.loads(body)["detail"], "`camrig certs revoke-token` makes the service refuse that token at once")

# --- The rig ------------------------------------------------------------------------------------------
deadline = time.time() + 60
while True:
    rig = json.loads(request("/api/v1/rig", token=TOKEN)[2])
    if rig["session"].get("id") and len(rig["cameras"]) == 2:
        break
    check(time.time() < deadline, f"the service commits a session over both cameras within 60 s (now: {rig['session']})")
    time.sleep(0.5)
check(all(agent["status"] == "connected" and agent["offset_us"] is not None for agent in rig["agents"]),
      "both agents are connected with a clock estimate")
cameras = [camera["device"]["name"] for camera in rig["cameras"]]
first = cameras[0]
status, headers, body = request(f"/api/v1/devices/{first}/preview.jpg", token=viewer_token)
check(status == 200 and headers["Content-Type"] == "image/jpeg" and body[:2] == b"\xff\xd8", "a viewer gets a JPEG preview of a camera")
status, headers, body = request("/api/v1/devices/agent-9/none/preview.jpg", token=TOKEN)
check(status == 404 and json.loads(body)["device"] == "agent-9/none", "an unknown camera is a 404 naming it")
status, _, body = request(f"/api/v1/devices/{first}/settings", method="PUT", body={"settings": {"shutter": "fast"}}, token=TOKEN)
check(status == 400 and json.loads(body)["device"] == first and "unknown setting 'shutter'" in json.loads(body)["detail"],
      "an unknown setting is a 400 naming the camera and the setting")
sync = json.loads(request("/api/v1/sync", token=TOKEN)[2])
check(len(sync["agents"]) == 2 and all(a["history"] for a in sync["agents"]), "sync health has every agent with its clock history")

# --- Metrics ------------------------------------------------------------------------------------------
status, _, body = request("/metrics", token=viewer_token)
families = {family.name: family for family in text_string_to_metric_families(body.decode())}
offsets = [s for s in families["camrig_agent_clock_offset_seconds"].samples]
check(status == 200 and len(offsets) == 2 and {s.labels["agent"] for s in offsets} == {"agent-1", "agent-2"},
      "/metrics parses as Prometheus text with each agent's clock offset")
check(all(s.value == 1 for s in families["camrig_agent_connected"].samples) and len(families["camrig_camera_fps"].samples) == 2,
      "/metrics has each agent's connection state and each camera's frame rate")

spools = [s for s in families["camrig_agent_spool_capacity_bytes"].samples]
check(len(spools) == 2 and all(s.value > 0 for s in spools) and "camrig_agent_spool_used_bytes" in families,
      "/metrics has each agent's result spool use and size (GetSpoolStatus)")
check(all(a["spool"]["capacity_bytes"] > 0 for a in sync["agents"]), "sync health shows each agent's spool")

# --- OpenAPI ------------------------------------------------------------------------------------------
status, _, body = request("/openapi.yaml")
document = yaml.safe_load(body)
validate(document)
check(status == 200 and "/api/v1/devices/{agent}/{device}/settings" in document["paths"], "the OpenAPI document is served and valid (openapi-spec-validator)")

# --- The console in Chromium --------------------------------------------------------------------------
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

options = webdriver.ChromeOptions()
for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000", "--disable-dev-shm-usage"]:
    options.add_argument(argument)
options.accept_insecure_certs = True  # the service's certificate is signed by the rig's own CA
options.binary_location = "/usr/bin/chromium"
browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
wait = WebDriverWait(browser, 30)
try:
    browser.get(URL + "/")
    wait.until(lambda b: b.find_element(By.ID, "signin").is_displayed())
    check(True, "the console without a token asks to sign in")
    browser.get(URL + "/login?token=" + TOKEN)
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#grid .tile")) == 2)
    check(True, "the console shows one tile per camera")

    def picture(index):
        return browser.execute_script("""
            const img = document.querySelectorAll('#grid .tile img')[arguments[0]];
            if (!img.complete || img.naturalWidth === 0) return null;
            const canvas = document.createElement('canvas');
            canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
            canvas.getContext('2d').drawImage(img, 0, 0);
            return canvas.toDataURL('image/png');""", index)

    wait.until(lambda b: picture(0) is not None and picture(1) is not None)
    before = picture(0)
    browser.save_screenshot(os.path.join(SHOTS, "console-grid.png"))
    wait.until(lambda b: picture(0) != before)
    check(True, "each tile shows a live preview that changes")

    tile = browser.find_elements(By.CSS_SELECTOR, "#grid .tile")[0]
    name = tile.get_attribute("data-camera")
    tile.click()
    wait.until(lambda b: b.find_element(By.ID, "panel").is_displayed() and b.find_elements(By.CSS_SELECTOR, "#panel-settings tr"))
    field = browser.find_element(By.CSS_SELECTOR, "#settings-form input[name='exposure-duration']")
    field.send_keys("1/250")
    browser.find_element(By.ID, "settings-apply").click()
    wait.until(lambda b: b.find_element(By.ID, "settings-result").text in ("applied",) or "error" in b.find_element(By.ID, "settings-result").get_attribute("class"))
    check(browser.find_element(By.ID, "settings-result").text == "applied", "changing a camera's exposure in its panel is applied")
    detail = json.loads(request(f"/api/v1/devices/{name}", token=TOKEN)[2])
    check(detail["settings"]["exposure"] == "custom" and detail["settings"].get("exposure-duration") in ("1/250", "4/1000"),
          f"the camera's exposure is now custom 1/250 s (agent reports {detail['settings'].get('exposure')}, {detail['settings'].get('exposure-duration')})")
    rows = {r.find_elements(By.TAG_NAME, "td")[0].text: r.find_elements(By.TAG_NAME, "td")[1].text
            for r in browser.find_elements(By.CSS_SELECTOR, "#panel-settings tr") if r.find_elements(By.TAG_NAME, "td")}
    check(rows.get("exposure") == "custom", "the panel shows the applied exposure")
    browser.save_screenshot(os.path.join(SHOTS, "console-camera-panel.png"))
    browser.find_element(By.ID, "panel-close").click()

    browser.find_element(By.ID, "photo-button").click()
    wait.until(lambda b: b.execute_script(
        "const s = document.getElementById('contact-sheet'); return !document.getElementById('result').hidden && s.complete && s.naturalWidth > 0"))
    title = browser.find_element(By.ID, "result-title").text
    check("photo" in title and "skew max" in title, f"a photo from the console shows the set's contact sheet ({title})")
    skew = float(title.split("skew max")[1].split("µs")[0])
    check(skew <= 100, f"the photo taken while the cameras are previewed is still synchronized (skew {skew} µs)")
    result_rows = browser.find_elements(By.CSS_SELECTOR, "#result-table tr")
    check(len(result_rows) == 3, "the result lists both cameras with their offsets")
    browser.save_screenshot(os.path.join(SHOTS, "console-photo.png"))
    capture_id = title.split()[1].rstrip(":")
    status, _, body = request(f"/api/v1/captures/{capture_id}/files/contact-sheet.png", token=viewer_token)
    check(status == 200 and body[:8] == b"\x89PNG\r\n\x1a\n", "a viewer downloads the capture's contact sheet")
    for sneaky in [f"/api/v1/captures/{capture_id}/files/contact-sheet.png", f"//api/v1/captures/{capture_id}/files/contact-sheet.png",
                   f"/api/v1//captures/{capture_id}/files/contact-sheet.png", "//api/v1/rig"]:
        check(raw_request(sneaky)[0] == 401, f"{sneaky} without credentials is refused")
    for outside in ["..%2Fcatalog.sqlite", "%2E%2E%2Fcatalog.sqlite", ".manifest.json", "frames%2F..%2F..%2Fcatalog.sqlite"]:
        check(request(f"/api/v1/captures/{capture_id}/files/{outside}", token=TOKEN)[0] == 400, f"files/{outside} is refused")

    # A recording at another size and rate while the previews are watched: the cameras change format
    # (previews pause for it) and the result replaces the photo's. Long and slow enough for synthetic
    # cameras that draw 720p frames slowly on a loaded machine (the first one after a change of format
    # most slowly) to record some.
    duration = browser.find_element(By.ID, "record-duration")
    duration.clear()
    duration.send_keys("3")
    browser.find_element(By.ID, "record-fps").send_keys("15")
    browser.find_element(By.ID, "record-size").send_keys("1280x720")
    browser.find_element(By.ID, "record-button").click()
    wait.until(lambda b: "recording" in b.find_element(By.ID, "result-title").text or "failed" in b.find_element(By.ID, "progress-text").text)
    title = browser.find_element(By.ID, "result-title").text
    check("recording" in title, f"a recording from the console at another size finishes ({title}; {browser.find_element(By.ID, 'progress-text').text})")
    rig = json.loads(request("/api/v1/rig", token=TOKEN)[2])
    check(all(c["device"]["active_format"].endswith("1280x720") for c in rig["cameras"]), "every camera now streams 1280x720")
    wait.until(lambda b: picture(0) is not None and picture(0) != before)
    check(True, "previews come back after the change of format")

    browser.find_element(By.CSS_SELECTOR, "nav button[data-view='sync']").click()
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#sync-agents tr")) == 3)
    check(len(browser.find_elements(By.CSS_SELECTOR, "#sync-agents polyline")) >= 2, "sync health plots each agent's offset history")
    browser.save_screenshot(os.path.join(SHOTS, "console-sync.png"))

    # A catalog several rigs share: a capture of another rig, as its coordinator would have listed it.
    if CAPTURES:
        catalog = sqlite3.connect(os.path.join(CAPTURES, "catalog.sqlite"), timeout=10)
        columns = [row[1] for row in catalog.execute("PRAGMA table_info(capture)")]
        row = dict(zip(columns, catalog.execute("SELECT * FROM capture ORDER BY created LIMIT 1").fetchone()))
        row.update(id=row["id"] + "-south", rig="south-stage", store="/srv/south/captures")
        catalog.execute(f"INSERT INTO capture ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})", [row[c] for c in columns])
        catalog.commit()
        catalog.close()
    browser.find_element(By.CSS_SELECTOR, "nav button[data-view='captures']").click()
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#captures tr")) >= 2)
    check(True, "the capture browser lists the catalog")
    if CAPTURES:
        header = [th.text.lower() for th in browser.find_elements(By.CSS_SELECTOR, "#captures th")]
        rigs = {r.find_elements(By.TAG_NAME, "td")[1].text for r in browser.find_elements(By.CSS_SELECTOR, "#captures tr") if r.find_elements(By.TAG_NAME, "td")}
        check(header[:2] == ["capture", "rig"] and "south-stage" in rigs and len(rigs) == 2, f"the capture browser says each capture's rig ({header}, {rigs})")
        check(browser.find_element(By.ID, "captures-rig-filter").is_displayed(), "with two rigs in the catalog, the capture browser offers a rig filter")
        Select(browser.find_element(By.ID, "captures-rig")).select_by_value("south-stage")
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#captures tr")) == 2)
        only = browser.find_elements(By.CSS_SELECTOR, "#captures tr td:nth-child(2)")
        check([td.text for td in only] == ["south-stage"], "the rig filter lists that rig's captures only")
        Select(browser.find_element(By.ID, "captures-rig")).select_by_value("")
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#captures tr")) >= 3)
    events = browser.find_elements(By.CSS_SELECTOR, "#event-list li")
    check(any("photo" in e.text for e in events), "the events list shows the capture's progress from the WebSocket")

    # The recording was made on the hosts: its per-camera files, and one set's frames side by side.
    recording_link = [a for a in browser.find_elements(By.CSS_SELECTOR, "#captures a") if a.text.endswith("-recording")][0]
    recording_link.click()
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#capture-detail table tr")) == 3)
    cells = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#capture-detail table tr")]
    check(all(any(codec in c for codec in ("copy", "mjpeg", "ffv1")) and "complete" in c and ".mkv" in c for c in cells[1:]), f"the capture browser lists each camera's video file ({cells})")
    check("every file is offloaded" in browser.find_element(By.ID, "capture-offload").text, "the capture browser says every file is offloaded")
    # A set both cameras have a frame in (a loaded machine may leave gaps in a recording).
    recording_id = recording_link.text
    sets = json.loads(request(f"/api/v1/captures/{recording_id}/manifest", token=TOKEN)[2])["sets"]
    both = [i for i, s in enumerate(sets) if len({f["camera"] for f in s["frames"] if f.get("file")}) == 2]
    check(len(both) > 0, f"the recording has a set with a frame of each camera ({len(sets)} sets)")
    chosen = both[min(7, len(both) - 1)]
    picker = browser.find_element(By.ID, "set-picker")
    picker.clear()
    picker.send_keys(str(chosen))
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", picker)
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#set-frames img")) == 2 and all(
        b.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) for img in b.find_elements(By.CSS_SELECTOR, "#set-frames img")))
    widths = [browser.execute_script("return arguments[0].naturalWidth", img) for img in browser.find_elements(By.CSS_SELECTOR, "#set-frames img")]
    check(widths == [1280, 1280], f"set {chosen}'s frames of both cameras play side by side, decoded from the videos ({widths})")
    browser.save_screenshot(os.path.join(SHOTS, "console-recording.png"))
finally:
    browser.quit()

# Previews stop once nobody watches.
deadline = time.time() + 10
while True:
    watched = [c["preview_watchers"] for c in json.loads(request("/api/v1/devices", token=TOKEN)[2])]
    if watched == [0, 0]:
        break
    check(time.time() < deadline, f"previews close when the console closes (watchers now {watched})")
    time.sleep(0.5)
check(True, "previews close when the console closes")
print("all checks passed")
