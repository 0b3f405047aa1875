import CamRigTestSupport
import Foundation
import Testing

/// The package's layers, read from Package.swift itself: they point one way, the coordinator links no
/// device backend or image code, nothing is declared and unused, and no product needs unsafe flags.
@Suite("Package layers", .timeLimit(.minutes(1)))
struct PackageLayerTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    struct Target {
        var name: String
        var kind: String
        /// Targets of this package it depends on.
        var local: [String]
        /// Products of other packages it depends on.
        var products: [String]
    }

    /// Every target of Package.swift, by name.
    static let targets: [String: Target] = {
        let manifest = (try? String(contentsOf: root.appendingPathComponent("Package.swift"), encoding: .utf8)) ?? ""
        var found: [String: Target] = [:]
        let starts = manifest.ranges(of: /\.(target|executableTarget|testTarget|systemLibrary)\(\s*name: "([^"]+)"/)
        for (index, range) in starts.enumerated() {
            let end = index + 1 < starts.count ? starts[index + 1].lowerBound : manifest.endIndex
            let body = manifest[range.lowerBound..<end]
            guard let head = body.firstMatch(of: /\.(\w+)\(\s*name: "([^"]+)"/) else { continue }
            var local: [String] = []
            var products: [String] = []
            if let list = body.firstMatch(of: /dependencies: \[([^\]]*)\]/) {
                let text = String(list.1)
                products = text.matches(of: /\.product\(name: "([^"]+)"/).map { String($0.1) }
                let withoutProducts = text.replacing(/\.product\([^)]*\)/, with: "")
                local = withoutProducts.matches(of: /"([^"]+)"/).map { String($0.1) }
            }
            found[String(head.2)] = Target(name: String(head.2), kind: String(head.1), local: local, products: products)
        }
        return found
    }()

    /// The layers in the order Package.swift's header lists them, top (depended on) first.
    static let layers: [String] = {
        let manifest = (try? String(contentsOf: root.appendingPathComponent("Package.swift"), encoding: .utf8)) ?? ""
        // Lines `//   NAME[, NAME]   what it is`; continuation lines are indented further.
        return manifest.split(separator: "\n").prefix { !$0.hasPrefix("import") }.flatMap { line -> [String] in
            guard line.hasPrefix("//   "), let first = line.dropFirst(5).first, first.isLetter else { return [] }
            let names = line.dropFirst(5).prefix { $0 != " " || true }.components(separatedBy: "  ").first ?? ""
            return names.split(separator: ", ").map { $0.trimmingCharacters(in: .whitespaces) }
        }
    }()

    @Test("Package.swift lists its layers, and each target depends only on layers listed before it")
    func layersPointOneWay() {
        #expect(Self.targets.count > 20 && Self.layers.count > 15, "could not read Package.swift: \(Self.layers)")
        for layer in Self.layers {
            #expect(Self.targets[layer] != nil, "the header lists \(layer), which is no target")
        }
        for (name, target) in Self.targets where target.kind != "testTarget" {
            guard let position = Self.layers.firstIndex(of: name) else { continue }
            for dependency in target.local {
                guard let below = Self.layers.firstIndex(of: dependency) else { continue }
                #expect(below < position, "\(name) depends on \(dependency), a layer listed after it")
            }
        }
    }

    @Test("the coordinator links the device model, and no device backend, JPEG or image-kernel code")
    func coordinatorLinksNoBackend() {
        let closure = Self.closure(of: "CamRigCoordinator").targets
        #expect(closure.contains("CamRigDeviceModel"))
        for forbidden in ["CamRigDevices", "CLibV4L2", "CTurboJPEG", "CImageKernels", "CZlib", "CamRigStorage"] {
            #expect(!closure.contains(forbidden), "CamRigCoordinator links \(forbidden) through \(closure.sorted())")
        }
    }

    @Test("every target of the package is in the header's layers, so none escapes the one-way check")
    func everyTargetHasALayer() {
        // Every Swift target; the C modules below them are named in the header where they are the layer.
        for (name, target) in Self.targets where target.kind != "testTarget" && name.lowercased().hasPrefix("camrig") {
            #expect(Self.layers.contains(name), "\(name) is not listed in Package.swift's header of layers")
        }
    }

    @Test("the coordinator's programs and the layers they link (storage, the service, the command line) link no camera backend")
    func coordinatorProgramsLinkNoBackend() {
        // Read right: the command line reaches the coordinator and the stores.
        #expect(Self.closure(of: "camrig").targets.isSuperset(of: ["CamRigCoordinator", "CamRigStorage", "CamRigImage", "CamRigWire"]))
        for program in ["camrig", "camrig-service", "CamRigStorage", "CamRigService", "CamRigViews", "CamRigServiceClient"] {
            let closure = Self.closure(of: program).targets
            for backend in ["CamRigDevices", "CamRigAgent", "CLibV4L2", "CLibcamera", "CLibcameraSystem"] {
                #expect(!closure.contains(backend), "\(program) links \(backend), a camera host's backend, through \(closure.sorted())")
            }
        }
    }

    @Test("image and video codecs come in only through the image and media targets")
    func codecsThroughTheirTargets() {
        let owners = ["CTurboJPEG": "CamRigImage", "CZlib": "CamRigImage", "CMediaFile": "CamRigMedia"]
        for (name, target) in Self.targets where target.kind != "testTarget" {
            for dependency in target.local {
                guard let owner = owners[dependency] else { continue }
                #expect(name == owner, "\(name) depends on \(dependency), which only \(owner) wraps")
            }
        }
    }

    @Test("the built coordinator programs load no camera backend's library; the agent loads libv4l2 (ldd)")
    func builtProgramsLinkNoBackend() async throws {
        func libraries(_ program: String) async throws -> String {
            let run = try await Executables.runTool("/usr/bin/ldd", [Executables.url(program).path], timeout: 30)
            #expect(run.status == 0, "ldd \(program): \(run.stderr)")
            return run.stdout
        }
        for program in ["camrig", "camrig-service"] {
            let loaded = try await libraries(program)
            for backend in ["libv4l2", "libv4lconvert", "libcamera"] {
                #expect(!loaded.contains(backend), "\(program) loads \(backend):\n\(loaded)")
            }
            #expect(loaded.contains("libturbojpeg"), "\(program) reads and writes JPEG through CamRigImage:\n\(loaded)")
        }
        #expect(try await libraries("camrig-agent").contains("libv4l2"), "the agent serves V4L2 cameras through libv4l2")
    }

    @Test("the object store is a generic S3 client: it links no capture, device or wire code")
    func objectStoreStandsAlone() {
        let closure = Self.closure(of: "CamRigObjectStore").targets
        #expect(closure.isSubset(of: ["CamRigObjectStore", "CamRigFiles", "CamRigHTTP"]), "CamRigObjectStore links \(closure.sorted())")
    }

    @Test("one HTTP client: the object store, the agent's enrollment and the command line's client of the service go through CamRigHTTP, and no target links another HTTP client")
    func oneHTTPClient() {
        #expect(Self.closure(of: "CamRigHTTP").targets == ["CamRigHTTP"], "CamRigHTTP is SwiftNIO's codec alone")
        for user in ["CamRigObjectStore", "CamRigAgent", "CamRigServiceClient"] {
            #expect(Self.closure(of: user).targets.contains("CamRigHTTP"), "\(user) does not use CamRigHTTP")
        }
        for (name, target) in Self.targets where !name.hasSuffix("Tests") {
            #expect(!target.products.contains("AsyncHTTPClient"), "\(name) links AsyncHTTPClient beside CamRigHTTP")
        }
    }

    /// The targets `name` links, directly or through others, and the products of other packages they bring.
    static func closure(of name: String) -> (targets: Set<String>, products: Set<String>) {
        var targets: Set<String> = [name]
        var queue = [name]
        while let next = queue.popLast() {
            for dependency in Self.targets[next]?.local ?? [] where targets.insert(dependency).inserted { queue.append(dependency) }
        }
        return (targets, Set(targets.flatMap { Self.targets[$0]?.products ?? [] }))
    }

    @Test("the command line links no HTTP server or metrics exporter, and the service does not depend on the command line")
    func commandLineLinksNoServer() {
        let camrig = Self.closure(of: "camrig")
        #expect(camrig.targets.contains("CamRigViews") && camrig.targets.contains("CamRigServiceClient"))
        for server in ["Hummingbird", "HummingbirdCore", "HummingbirdTLS", "HummingbirdWebSocket", "Prometheus"] {
            #expect(!camrig.products.contains(server), "camrig links \(server)")
        }
        #expect(!camrig.targets.contains("CamRigService"), "camrig links the service")
        #expect(!Self.closure(of: "CamRigService").targets.contains("CamRigCLI"), "the service depends on the command line's target")
    }

    @Test("every declared dependency of a target is imported by it, and no target needs unsafe flags")
    func noUnusedDependencies() throws {
        let manifest = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        #expect(!manifest.contains("unsafeFlags"), "unsafe flags keep a product from being used by other packages")
        for (name, target) in Self.targets where target.kind == "target" || target.kind == "executableTarget" || target.kind == "testTarget" {
            let folder = Self.root.appendingPathComponent(target.kind == "testTarget" ? "Tests" : "Sources").appendingPathComponent(name)
            var imported: Set<String> = []
            var hasC = false
            for case let file as URL in FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil) ?? .init() {
                if ["c", "h"].contains(file.pathExtension) { hasC = true }
                guard file.pathExtension == "swift", let text = try? String(contentsOf: file, encoding: .utf8) else { continue }
                for match in text.matches(of: /(?m)^(?:@_exported |@testable )?import (\w+)/) { imported.insert(String(match.1)) }
            }
            if hasC && imported.isEmpty { continue }  // a C target: its headers say what it uses
            for dependency in target.products + target.local
            where Self.targets[dependency]?.kind != "executableTarget" && !dependency.hasPrefix("camrig") {
                #expect(imported.contains(dependency), "\(name) declares \(dependency) and imports it nowhere")
            }
        }
    }
}
