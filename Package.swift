// swift-tools-version:6.1
//
// CamRig: synchronized capture across many camera hosts.
//
// Targets follow the architecture. Each layer depends only on layers above it in this list (checked by
// PackageLayerTests):
//   CamRigClock        the one host clock (CLOCK_MONOTONIC, or a simulated host's skewed reading) and a
//                      manual clock for tests
//   CamRigFiles        DurableFile: the one durable writer (spool, captures, certificates, keys, token lists)
//   CamRigWire         wire protocol, pure: schema (generated), frame codec, connection state machines
//   CLinux             Linux calls Swift does not import (prctl, fork/exec for child processes, socket
//                      timestamping constants)
//   CamRigClockSocket  the UDP clock channel's kernel-timestamping socket (receive and transmit stamps)
//   CamRigSecurity     certificate authority, peer roles, TLS 1.3 with client certificates, access tokens
//   CamRigDeviceModel  the device model's value types: formats, durations, frames, settings, photo plans,
//                      leases, the phase grid; no backend, no image code
//   CamRigMedia        video files: Matroska written frame by frame through FFmpeg's libraries (CMediaFile),
//                      crash-safe, read back, repaired after a crash and trimmed
//   CLibcameraSystem   libcamera's flags through pkg-config, where libcamera-dev is installed (elsewhere SwiftPM
//                      warns that it is missing, and CLibcamera builds its stand-in)
//   CLibcamera         libcamera's C++ API behind a small C interface (no libcamera type leaves it)
//   CamRigImage        image files of frames: PNG (CZlib) for raw pixel formats, JPEG encoded and decoded
//                      (CTurboJPEG), DNG for raw Bayer; no device backend (the coordinator's programs link it)
//   CamRigDevices      devices and their backends (synthetic, V4L2 through CLibV4L2, libcamera through
//                      CLibcamera), the photo pipeline's pixel loops (CImageKernels)
//   CamRigHTTP         the one HTTP client (S3, enrollment, the command line's client of the service):
//                      SwiftNIO's HTTP/1.1 codec over kept-alive connections, deadlines, size limits, SNI
//   CamRigObjectStore  S3-compatible object storage: a store's address and credentials, AWS Signature V4
//                      (swift-crypto), resumable checksummed multipart uploads
//   CamRigCapture      what a capture produces: manifests, contact sheets, the sink protocol storage implements
//   CamRigWireModel    the only mapping between wire messages and the device model (and object store targets)
//   CamRigStorage      capture stores (a local folder, or S3-compatible object storage) and the catalog
//                      (SQLite through GRDB, or PostgreSQL through postgres-nio)
//   CamRigAgent        the server that runs on each camera host
//   CamRigCoordinator  the client side: agent pool, clock synchronization, rig sessions, sync sets; it
//                      links the device model, not the devices
//   CamRigLocalRig     agents on this machine: child processes that die with their parent, agent processes,
//                      a throwaway PKI, a one-call loopback rig, and a multi-host network (namespaces, and a
//                      relay for delay, jitter and loss)
//   CamRigText         plain-text tables, for the command line and the views
//   CamRigViews        what the service's API and the command line show: the JSON views of agents, cameras,
//                      captures, jobs and events, shared by both (no HTTP server in it)
//   CamRigServiceClient  the command line's HTTPS client of a running service (on CamRigHTTP)
//   CamRigService      the coordinator as a long-running service: the rig kept connected and measured,
//                      an HTTP API and WebSocket events (Hummingbird), live previews, the web console,
//                      operator/viewer access, metrics (swift-metrics, exported by Prometheus)
//   CamRigCLI          what the command-line tools share: tables and JSON output
//   camrig, camrig-agent   the command-line executables
//   camrig-service     the HTTP server of `camrig serve`, which runs it (camrig itself links no HTTP server)
//   camrig-bench       benchmarks against baselines measured in the same run (sync, throughput, latency, scale)
//   CamRigTestSupport  helpers for the tests only: raw TLS peers, embedded agent connections, log capture
import Foundation
import PackageDescription

let package = Package(
    name: "CamRig",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "camrig", targets: ["camrig"]),
        .executable(name: "camrig-agent", targets: ["camrig-agent"]),
        .executable(name: "camrig-bench", targets: ["camrig-bench"]),
        .executable(name: "camrig-service", targets: ["camrig-service"]),
        .library(name: "CamRigWire", targets: ["CamRigWire"]),
        .library(name: "CamRigCoordinator", targets: ["CamRigCoordinator"]),
        .library(name: "CamRigLocalRig", targets: ["CamRigLocalRig"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        .target(
            name: "CamRigClock",
            dependencies: [.product(name: "NIOConcurrencyHelpers", package: "swift-nio")]
        ),
        .target(name: "CamRigFiles"),
        .target(
            name: "CamRigWire",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ]
        ),
        .systemLibrary(name: "CLinux"),
        .target(
            name: "CamRigClockSocket",
            dependencies: ["CamRigClock", "CLinux", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]
        ),
        .target(
            name: "CamRigSecurity",
            dependencies: [
                "CamRigFiles",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]
        ),
        .target(
            name: "CamRigHTTP",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .target(
            name: "CamRigObjectStore",
            dependencies: [
                "CamRigFiles", "CamRigHTTP",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .systemLibrary(
            name: "CLibV4L2",
            pkgConfig: "libv4l2",
            providers: [.apt(["libv4l-dev"])]
        ),
        // Pixel loops of the synthetic camera and the photo pipeline (noise, frame merging, image error).
        .target(name: "CImageKernels"),
        .systemLibrary(
            name: "CTurboJPEG",
            pkgConfig: "libturbojpeg",
            providers: [.apt(["libturbojpeg0-dev"])]
        ),
        .target(
            name: "CamRigDeviceModel",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")]
        ),
        // Matroska files through FFmpeg's libraries (Debian's libavformat, libavcodec, libswscale).
        .target(
            name: "CMediaFile",
            linkerSettings: [.linkedLibrary("avformat"), .linkedLibrary("avcodec"), .linkedLibrary("swscale"), .linkedLibrary("avutil")]
        ),
        .target(name: "CamRigMedia", dependencies: ["CMediaFile"]),
        // libcamera's C++ API behind a C interface (Raspberry Pi cameras and libcamera's virtual cameras).
        .systemLibrary(name: "CLibcameraSystem", pkgConfig: "libcamera", providers: [.apt(["libcamera-dev"])]),
        .target(name: "CLibcamera", dependencies: ["CLibcameraSystem"]),
        .target(
            name: "CamRigDevices",
            dependencies: [
                "CamRigDeviceModel", "CLibV4L2", "CLibcamera", "CImageKernels", "CamRigClock",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .target(
            name: "CamRigImage",
            dependencies: ["CZlib", "CTurboJPEG", "CImageKernels", "CamRigDeviceModel", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .target(
            name: "CamRigWireModel",
            dependencies: ["CamRigWire", "CamRigDeviceModel", "CamRigSecurity", "CamRigCapture", "CamRigObjectStore"]
        ),
        .target(
            name: "CamRigCapture",
            dependencies: ["CamRigClock", "CamRigDeviceModel", "CamRigObjectStore"]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .target(
            name: "CamRigStorage",
            dependencies: [
                "CamRigImage", "CamRigCapture", "CamRigFiles", "CamRigMedia", "CamRigObjectStore", "CLinux",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .target(
            name: "CamRigAgent",
            dependencies: [
                "CamRigClock", "CamRigWire", "CamRigClockSocket", "CamRigSecurity", "CamRigDevices", "CamRigWireModel",
                "CamRigCapture", "CamRigFiles", "CamRigMedia", "CamRigImage", "CamRigObjectStore", "CamRigHTTP", "CLinux",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        .target(
            name: "CamRigCoordinator",
            dependencies: [
                "CamRigClock", "CamRigWire", "CamRigClockSocket", "CamRigSecurity", "CamRigDeviceModel", "CamRigCapture",
                "CamRigWireModel", "CamRigObjectStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "CamRigLocalRig",
            dependencies: [
                "CamRigClock", "CamRigWire", "CamRigClockSocket", "CamRigSecurity", "CamRigCoordinator", "CamRigDeviceModel", "CLinux",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "X509", package: "swift-certificates"),
            ]
        ),
        .target(name: "CamRigText"),
        .target(
            name: "CamRigViews",
            dependencies: [
                "CamRigText", "CamRigWire", "CamRigSecurity", "CamRigCoordinator", "CamRigCapture",
                "CamRigDeviceModel", "CamRigWireModel",
            ]
        ),
        .target(
            name: "CamRigServiceClient",
            dependencies: [
                "CamRigViews", "CamRigSecurity", "CamRigHTTP",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .target(
            name: "CamRigService",
            dependencies: [
                "CamRigViews", "CamRigClock", "CamRigWire", "CamRigSecurity", "CamRigCoordinator", "CamRigCapture",
                "CamRigStorage", "CamRigWireModel", "CamRigObjectStore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            resources: [.copy("Console")]
        ),
        .target(
            name: "CamRigCLI",
            dependencies: [
                "CamRigText",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "camrig",
            dependencies: [
                "CamRigCLI", "CamRigClock", "CamRigCoordinator", "CamRigSecurity", "CamRigWire", "CamRigObjectStore",
                "CamRigCapture", "CamRigStorage", "CamRigWireModel", "CamRigLocalRig", "CamRigViews", "CamRigServiceClient",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "camrig-service",
            dependencies: [
                "CamRigService", "CamRigCLI", "CamRigCoordinator", "CamRigLocalRig", "CamRigSecurity", "CamRigWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "camrig-agent",
            dependencies: [
                "CamRigAgent", "CamRigCLI", "CamRigClock", "CamRigSecurity", "CamRigWire", "CamRigDevices",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "camrig-bench",
            dependencies: [
                "CamRigCLI", "CamRigClock", "CamRigCoordinator", "CamRigLocalRig", "CamRigWire",
                "CamRigDevices", "CamRigCapture", "CamRigStorage", "CamRigWireModel", "CamRigViews", "CamRigMedia",
                "CamRigAgent", "CamRigSecurity", "CamRigServiceClient", "CamRigFiles", "CamRigObjectStore", "CamRigImage",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "CamRigTestSupport",
            dependencies: [
                "CamRigWire", "CamRigSecurity", "CamRigCoordinator", "CamRigDevices", "CamRigLocalRig", "CamRigCapture", "CamRigObjectStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .testTarget(
            name: "CamRigWireTests",
            dependencies: [
                "CamRigWire", "CamRigClock", "CamRigClockSocket", "CLinux",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "CamRigSecurityTests",
            dependencies: ["CamRigSecurity", "CamRigTestSupport", "CamRigLocalRig"]
        ),
        .testTarget(
            name: "CamRigDevicesTests",
            dependencies: ["CamRigDevices", "CamRigImage", "CamRigClock", "CamRigTestSupport", "CTurboJPEG"]
        ),
        .testTarget(
            name: "CamRigAgentTests",
            dependencies: [
                "CamRigAgent", "CamRigClock", "CamRigWire", "CamRigTestSupport", "CamRigDevices",
                "CamRigCapture", "CamRigMedia", "CamRigImage",
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "CamRigCoordinatorTests",
            dependencies: [
                "CamRigCoordinator", "CamRigClock", "CamRigCapture", "CamRigDevices", "CamRigWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "CamRigFilesTests", dependencies: ["CamRigFiles"]),
        .testTarget(name: "CamRigMediaTests", dependencies: ["CamRigMedia"]),
        .testTarget(name: "CamRigImageTests", dependencies: ["CamRigImage", "CamRigDeviceModel", "CZlib"]),
        .testTarget(name: "CamRigViewsTests", dependencies: ["CamRigViews", "CamRigWire"]),
        .testTarget(name: "CamRigCaptureTests", dependencies: ["CamRigCapture", "CamRigDeviceModel", "CamRigWire", "CamRigWireModel"]),
        .testTarget(
            name: "CamRigStorageTests",
            dependencies: [
                "CamRigStorage", "CamRigCapture", "CamRigDeviceModel", "CamRigDevices", "CamRigImage", "CamRigTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "CamRigHTTPTests",
            dependencies: [
                "CamRigHTTP",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "CamRigObjectStoreTests",
            dependencies: [
                "CamRigObjectStore",
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "CamRigServiceTests",
            dependencies: [
                "CamRigService", "CamRigViews", "CamRigCoordinator", "CamRigSecurity", "CamRigLocalRig", .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "camrig", "camrig-agent", "camrig-service", "camrig-bench", "CamRigTestSupport", "CamRigLocalRig", "CamRigCoordinator", "CamRigWire",
                "CamRigClock", "CamRigDevices", "CamRigSecurity", "CamRigCapture", "CamRigStorage", "CamRigClockSocket",
                "CamRigService", "CamRigViews", "CamRigServiceClient", "CamRigObjectStore", "CamRigImage",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
    ]
)
