#!/usr/bin/env bash
# Writes the seed corpus: valid envelopes and frames for the protocol's common messages (encoded by
# protoc from proto/camrig.proto), and valid clock datagrams. Run from anywhere; needs protoc and python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto="$here/../proto"
encode() { protoc --proto_path="$proto" --encode=camrig.v1.Envelope camrig.proto; }
frame() { python3 -c 'import sys,struct; e=sys.stdin.buffer.read(); p=bytes(int(sys.argv[1])); sys.stdout.buffer.write(struct.pack(">II", 4+len(e)+len(p), len(e))+e+p)' "${1:-0}"; }
declare -A messages=(
  [hello]='request_id: 1 hello { min_protocol_version: 1 max_protocol_version: 1 client_software: "fuzz" max_frame_length: 1048580 }'
  [ping]='request_id: 2 ping { nonce: 7 }'
  [probe]='request_id: 3 clock_probe { client_transmit_ns: 123456789 }'
  [lock]='request_id: 4 lock { device_id: "synthetic:SYN0001" duration_ms: 5000 }'
  [start]='request_id: 5 start_stream { device_id: "synthetic:SYN0001" max_queued_frames: 4 }'
  [goodbye]='goodbye { reason: "done" }'
)
for name in "${!messages[@]}"; do
  echo "${messages[$name]}" | encode >"$here/Corpus/FuzzEnvelope/$name"
  # The frame decoder's first input byte says where the rest is cut in two.
  { printf '\x05'; echo "${messages[$name]}" | encode | frame; } >"$here/Corpus/FuzzFrameDecoder/$name"
done
{ printf '\x09'; echo "${messages[ping]}" | encode | frame 32; } >"$here/Corpus/FuzzFrameDecoder/ping-with-payload"
# A whole client conversation: hello, then requests, then goodbye.
for name in hello ping probe lock start goodbye; do echo "${messages[$name]}" | encode | frame; done >"$here/Corpus/FuzzServerConnection/conversation"
for name in ping hello; do echo "${messages[$name]}" | encode | frame; done >"$here/Corpus/FuzzServerConnection/request-before-hello"
for name in hello hello; do echo "${messages[$name]}" | encode | frame; done >"$here/Corpus/FuzzServerConnection/second-hello"
# Clock datagrams: a probe and a reply under the fuzz target's key (32 bytes of 7), made with HMAC-SHA256.
python3 - "$here/Corpus/FuzzClockPacket" <<'PY'
import hashlib, hmac, struct, sys
key = bytes([7]) * 32
def packet(kind, key_id, sequence, t1, t2=0, t3=0):
    head = b"CRCK" + bytes([1, kind]) + bytes(2) + struct.pack(">I", key_id) + bytes(4) + struct.pack(">Qq", sequence, t1)
    if kind == 2: head += struct.pack(">qq", t2, t3)
    return head + hmac.new(key, head, hashlib.sha256).digest()[:16]
open(sys.argv[1] + "/probe", "wb").write(packet(1, 42, 1, 123456789))
open(sys.argv[1] + "/reply", "wb").write(packet(2, 42, 1, 123456789, 223456789, 223457000))
PY
