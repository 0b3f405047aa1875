// swift-tools-version:6.0
// libFuzzer targets for CamRig's decoders and the server connection state machine. Built apart from
// the main package, with the fuzzer and address sanitizers: see README.md.
import Foundation
import PackageDescription

/// The CamRig package is this one's parent directory; a path dependency is known by its directory's name,
/// whatever the clone is called.
let camRig = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let fuzzTarget = { (name: String) -> Target in
    .executableTarget(
        name: name,
        dependencies: [.product(name: "CamRigWire", package: camRig), .product(name: "NIOCore", package: "swift-nio"), .product(name: "Crypto", package: "swift-crypto")],
        swiftSettings: [.unsafeFlags(["-parse-as-library"])]
    )
}

let package = Package(
    name: "CamRigFuzz",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
    ],
    targets: ["FuzzFrameDecoder", "FuzzEnvelope", "FuzzServerConnection", "FuzzClockPacket"].map(fuzzTarget)
)
