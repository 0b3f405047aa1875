#!/usr/bin/env bash
# Regenerates the Swift code for proto/camrig.proto into Sources/CamRigWire/Generated/.
#
# Tools:
#   protoc            Debian: apt-get install -y protobuf-compiler   (3.21 or newer)
#   protoc-gen-swift  built here from apple/swift-protobuf at the version Package.swift depends on,
#                     unless one is already on PATH or named by $PROTOC_GEN_SWIFT.
#
# The generated file is committed: builds never need protoc.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
swift_protobuf_version=1.39.0
out="$root/Sources/CamRigWire/Generated"

command -v protoc >/dev/null || { echo "protoc not found: apt-get install -y protobuf-compiler" >&2; exit 1; }

plugin=${PROTOC_GEN_SWIFT:-$(command -v protoc-gen-swift || true)}
if [ -z "$plugin" ]; then
    cache="${XDG_CACHE_HOME:-$HOME/.cache}/camrig/swift-protobuf-$swift_protobuf_version"
    if [ ! -x "$cache/.build/debug/protoc-gen-swift" ]; then
        echo "building protoc-gen-swift $swift_protobuf_version in $cache (about a minute)" >&2
        rm -rf "$cache"
        git -c advice.detachedHead=false clone -q --depth 1 --branch "$swift_protobuf_version" https://github.com/apple/swift-protobuf "$cache"
        swift build -q --package-path "$cache" --product protoc-gen-swift
    fi
    plugin="$cache/.build/debug/protoc-gen-swift"
fi

mkdir -p "$out"
protoc --plugin=protoc-gen-swift="$plugin" \
    --swift_opt=Visibility=Public \
    --swift_out="$out" \
    --proto_path="$here" \
    "$here/camrig.proto"
echo "generated $out/camrig.pb.swift"
