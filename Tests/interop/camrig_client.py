#!/usr/bin/python3
"""Interoperability client for the CamRig wire protocol, version 1.

Written only from proto/PROTOCOL.md and proto/camrig.proto (never from the agent's source), to check
that the specification is enough to implement a client. It connects to a camrig-agent over TLS 1.3
with a client certificate, does the Hello/Welcome handshake, sends N pings, checks each Pong, sends a
Goodbye and closes. Any failure (TLS refusal, protocol violation, an Error from the agent) ends it
with a message on stderr and a non-zero exit status.

Needs Python 3 with google.protobuf (Debian: python3-protobuf, so run it with /usr/bin/python3) and
protoc on PATH: the camrig_pb2 module is generated at run time from ../../proto/camrig.proto
(relative to this file), so the script works from any checkout.

    /usr/bin/python3 Tests/interop/camrig_client.py --agent 127.0.0.1:7450 --tls-dir PKI \
        [--identity coordinator] [--count 3] [--json]

TLS-DIR holds ca.pem, IDENTITY.pem and IDENTITY-key.pem (as `camrig certs init/issue` write them).
"""
import argparse, importlib, json, os, secrets, shutil, socket, ssl, struct, subprocess, sys, tempfile, time

PROTO_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto"))
PROTOCOL_VERSION = 1                 # PROTOCOL.md describes version 1 only
DEFAULT_MAX_FRAME = 67_108_864       # §3.1: max_frame_length 0 means 64 MiB
MIN_MAX_FRAME = 1_048_580            # §3.1: smaller announced maxima count as this
MAX_ENVELOPE = 1_048_576             # §3: envelope_length limit
PAYLOAD_BODIES = {"video_frame", "photo_result", "file_chunk"}   # §3: the only messages that carry a payload


class ClientError(Exception):
    """Any failure; the message is what main() prints."""


def load_schema(proto_dir=PROTO_DIR):
    """Compile camrig.proto with protoc into a temporary directory and import camrig_pb2."""
    out = tempfile.mkdtemp(prefix="camrig-pb2-")
    try:
        run = subprocess.run(["protoc", f"--python_out={out}", f"--proto_path={proto_dir}", "camrig.proto"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise ClientError(f"protoc failed on {proto_dir}/camrig.proto: {run.stderr.strip()}")
        sys.path.insert(0, out)
        try:
            return importlib.import_module("camrig_pb2")
        finally:
            sys.path.remove(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def enum_name(enum, value):
    """ERROR_CODE_X / PEER_ROLE_X for a known value, else the number (unknown codes are allowed, §6)."""
    try:
        return enum.Name(value)
    except ValueError:
        return value


def effective_max(announced):
    """§3.1: 0 means the default; values below the minimum are treated as the minimum."""
    return DEFAULT_MAX_FRAME if announced == 0 else max(announced, MIN_MAX_FRAME)


class Connection:
    """One framed connection (§3) over a connected (TLS) socket."""

    def __init__(self, sock, pb, max_in=DEFAULT_MAX_FRAME):
        self.sock, self.pb = sock, pb
        self.max_in = max_in                # the largest frame we accept (announced in Hello)
        self.max_out = DEFAULT_MAX_FRAME    # the peer's maximum; the default until Welcome says (§3.1)

    def send(self, env, payload=b""):
        data = env.SerializeToString()
        length = 4 + len(data) + len(payload)
        if len(data) > MAX_ENVELOPE or length > self.max_out:
            raise ClientError(f"refusing to send a {length}-byte frame (peer maximum {self.max_out})")
        self.sock.sendall(struct.pack(">II", length, len(data)) + data + payload)

    def recv_exact(self, n, frame_start=False):
        """Exactly n bytes; recv may return less (partial reads), so loop. Grows with what arrives."""
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 65536))
            if not chunk:
                where = "between frames" if frame_start and not buf else "inside a frame"
                raise ClientError(f"the agent closed the connection ({where})")
            buf += chunk
        return bytes(buf)

    def violation(self, code, text):
        """A protocol violation by the agent: tell it with a fatal Error (best effort), then fail."""
        try:
            self.send(self.pb.Envelope(error=self.pb.Error(code=code, message=text, fatal=True)))
        except (OSError, ClientError):
            pass
        raise ClientError(f"protocol violation by the agent ({enum_name(self.pb.ErrorCode, code)}): {text}")

    def recv(self):
        """Read one frame; return (envelope, body field name, payload). Applies every §3 receiver rule."""
        pb = self.pb
        (length,) = struct.unpack(">I", self.recv_exact(4, frame_start=True))
        if length < 4:
            self.violation(pb.ERROR_CODE_MALFORMED_FRAME, f"frame length {length} is below 4")
        if length > self.max_in:    # checked before reading any further (§3)
            self.violation(pb.ERROR_CODE_FRAME_TOO_LARGE, f"frame length {length} exceeds {self.max_in}")
        (env_len,) = struct.unpack(">I", self.recv_exact(4))
        if env_len > MAX_ENVELOPE or env_len > length - 4:
            self.violation(pb.ERROR_CODE_MALFORMED_FRAME, f"envelope length {env_len} in a {length}-byte frame")
        env_bytes = self.recv_exact(env_len)
        payload = self.recv_exact(length - 4 - env_len)
        env = pb.Envelope()
        try:
            env.ParseFromString(env_bytes)
        except Exception as e:  # google.protobuf.message.DecodeError and friends
            self.violation(pb.ERROR_CODE_UNDECODABLE_MESSAGE, f"envelope does not parse: {e}")
        body = env.WhichOneof("body")
        if body is None:
            self.violation(pb.ERROR_CODE_UNKNOWN_MESSAGE, "envelope holds no known message")
        if payload and body not in PAYLOAD_BODIES:
            self.violation(pb.ERROR_CODE_MALFORMED_FRAME, f"{len(payload)}-byte payload on {body}")
        return env, body, payload

    def agent_error(self, err):
        """Turn an Error from the agent into a ClientError naming its code."""
        fatal = "fatal" if err.fatal else "non-fatal"
        return ClientError(f"agent error {enum_name(self.pb.ErrorCode, err.code)} (code {err.code}, {fatal}): "
                           f"{err.message}")


def tls_connect(host, port, tls_dir, identity, timeout):
    """TCP + TLS 1.3 with our certificate, trusting only ca.pem, no host-name check (§1, §2, §7)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ca, cert, key = (os.path.join(tls_dir, f) for f in ("ca.pem", f"{identity}.pem", f"{identity}-key.pem"))
    for path in (ca, cert, key):
        if not os.path.isfile(path):
            raise ClientError(f"missing {path} (see `camrig certs init/issue`)")
    ctx.load_verify_locations(cafile=ca)
    ctx.load_cert_chain(cert, key)
    raw = socket.create_connection((host, port), timeout=timeout)
    sock = ctx.wrap_socket(raw, server_hostname=None)   # no SNI; on failure the process exits anyway
    # §2 rule 5: a client accepts only a peer whose certificate role (OU) is exactly "agent".
    subject = sock.getpeercert().get("subject", ())
    units = [v for rdn in subject for (k, v) in rdn if k == "organizationalUnitName"]
    if units != ["agent"]:
        sock.close()
        raise ClientError(f"the peer's certificate role (OU) is {units}, not ['agent']")
    return sock


def handshake(conn, versions=(PROTOCOL_VERSION, PROTOCOL_VERSION)):
    """Send Hello (request_id 1), wait for the Welcome (§4.1-3); returns it."""
    pb = conn.pb
    hello = pb.Hello(min_protocol_version=versions[0], max_protocol_version=versions[1],
                     client_software="camrig_client.py (interop)", max_frame_length=conn.max_in)
    conn.send(pb.Envelope(request_id=1, hello=hello))
    env, body, _ = conn.recv()
    if body == "error":
        raise conn.agent_error(env.error)
    if body == "goodbye":   # §4.6: after a Goodbye we send nothing more
        raise ClientError(f"agent said goodbye during the handshake: {env.goodbye.reason!r}")
    if body != "welcome" or env.request_id != 1:
        conn.violation(pb.ERROR_CODE_UNEXPECTED_MESSAGE, f"expected welcome for request 1, got {body} "
                                                         f"(request_id {env.request_id})")
    welcome = env.welcome
    if not versions[0] <= welcome.protocol_version <= versions[1]:   # §4.2: MUST close
        conn.send(pb.Envelope(goodbye=pb.Goodbye(reason="unsupported protocol version")))
        raise ClientError(f"agent chose protocol version {welcome.protocol_version}, outside {versions}")
    conn.max_out = effective_max(welcome.max_frame_length)
    return welcome


def ping(conn, request_id):
    """One Ping/Pong round trip; returns the round-trip time in microseconds."""
    pb = conn.pb
    nonce = secrets.randbits(64)
    start = time.perf_counter_ns()
    conn.send(pb.Envelope(request_id=request_id, ping=pb.Ping(nonce=nonce)))
    while True:
        env, body, _ = conn.recv()
        # Request ids are chosen per sender, so an agent-initiated Ping may carry any id, even ours:
        # dispatch on the message type first, then on request_id.
        if body == "ping":      # §5: clients MUST answer the agent's Ping
            conn.send(pb.Envelope(request_id=env.request_id, pong=pb.Pong(nonce=env.ping.nonce)))
        elif body == "goodbye":
            raise ClientError(f"agent said goodbye: {env.goodbye.reason!r}")
        elif body == "error" and env.request_id in (0, request_id):
            raise conn.agent_error(env.error)
        elif body == "pong" and env.request_id == request_id:
            if env.pong.nonce != nonce:
                raise ClientError(f"pong for request {request_id} has nonce {env.pong.nonce}, sent {nonce}")
            return (time.perf_counter_ns() - start) // 1000
        else:
            conn.violation(pb.ERROR_CODE_UNEXPECTED_MESSAGE,
                           f"unexpected {body} with request_id {env.request_id} while waiting for pong")


def main(argv=None):
    p = argparse.ArgumentParser(description="CamRig interoperability client (hello, pings, goodbye).")
    p.add_argument("--agent", required=True, help="HOST:PORT of the camrig-agent")
    p.add_argument("--tls-dir", required=True, help="directory with ca.pem, NAME.pem, NAME-key.pem")
    p.add_argument("--identity", default="coordinator", help="certificate NAME (default: coordinator)")
    p.add_argument("--count", type=int, default=3, help="number of pings (default: 3)")
    p.add_argument("--timeout", type=float, default=15.0, help="socket timeout in seconds (default: 15)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    host, sep, port = args.agent.rpartition(":")
    if not sep or not port.isdigit():
        p.error("--agent must be HOST:PORT")
    host = host.strip("[]")   # allow [::1]:7450
    try:
        pb = load_schema()
        sock = tls_connect(host, int(port), args.tls_dir, args.identity, args.timeout)
        with sock:
            conn = Connection(sock, pb)
            welcome = handshake(conn)
            rtts = [ping(conn, 2 + i) for i in range(args.count)]
            conn.send(pb.Envelope(goodbye=pb.Goodbye(reason="done")))   # request_id 0, §7.5
            try:
                sock.unwrap()   # TLS close_notify (not required by the spec; the agent logs its absence)
            except (ssl.SSLError, OSError):
                pass
    except ClientError as e:
        sys.exit(f"camrig_client: {e}")
    except ssl.SSLError as e:   # our verification failed, or the agent's alert refusing our certificate (§2)
        sys.exit(f"camrig_client: TLS failure: {e}")
    except socket.timeout:
        sys.exit("camrig_client: timed out waiting for the agent")
    except OSError as e:
        sys.exit(f"camrig_client: connection failure: {e}")
    role = enum_name(pb.PeerRole, welcome.client_role)
    if args.json:
        print(json.dumps({"agent_id": welcome.agent_id, "protocol_version": welcome.protocol_version,
                          "client_role": role, "rtt_us": rtts}))
    else:
        print(f"agent {welcome.agent_id!r} ({welcome.agent_software}), protocol {welcome.protocol_version}, "
              f"capabilities {list(welcome.capabilities)}, you are {welcome.client_name!r} ({role})")
        for i, rtt in enumerate(rtts, 1):
            print(f"ping {i}: {rtt} us")


if __name__ == "__main__":
    main()
