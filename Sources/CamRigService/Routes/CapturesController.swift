import CamRigCapture
import CamRigObjectStore
import CamRigStorage
import CamRigViews
import Foundation
import Hummingbird
import NIOCore

/// Captures: started as jobs, followed, and read back from the catalog and the store: a captures
/// folder's files read on `BlockingWork`'s threads, never on the request's; an object store's fetched
/// from it; the catalog answers asynchronously (GRDB's queue, or PostgreSQL).
struct CapturesController {
    let service: RigService

    var routes: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        let service = self.service
        let store = service.store
        routes.post("captures/photo") { request, context in
            let body = try await ServiceRoutes.decode(PhotoRequest.self, request, context, emptyAs: PhotoRequest())
            let job = try await service.startPhoto(body, by: context.access)
            return try ServiceRoutes.json(job, status: .accepted, location: "/api/v1/jobs/\(job.id)")
        }
        routes.post("captures/recording") { request, context in
            let body = try await ServiceRoutes.decode(RecordRequest.self, request, context)
            let job = try await service.startRecording(body, by: context.access)
            return try ServiceRoutes.json(job, status: .accepted, location: "/api/v1/jobs/\(job.id)")
        }
        routes.get("jobs") { _, _ in try ServiceRoutes.json(await service.jobList.reversed()) }
        routes.get("jobs/:job") { _, context in
            let id = try context.parameters.require("job")
            guard let job = await service.job(id) else { throw ServiceError(.notFound, "no capture job '\(id)' (jobs are kept while the service runs)") }
            return try ServiceRoutes.json(job)
        }
        routes.get("captures") { request, _ in
            // Every rig's captures (a catalog several rigs share), or `?rig=NAME`'s.
            let rig = request.uri.queryParameters.get("rig")
            if let rig, (try? CaptureNaming.checkRig(rig, from: "rig")) == nil {
                throw ServiceError(.badRequest, "rig '\(rig)' is not a rig's name: 1 to 64 letters, digits, '.', '_' or '-'")
            }
            return try ServiceRoutes.json(try await store.catalog.list(CaptureCatalog.Query(rig: rig)))
        }
        routes.get("captures/:capture") { _, context in
            let entry = try await Self.entry(store, try context.parameters.require("capture"))
            let manifest = try await Self.manifest(of: entry, in: store)
            return try ServiceRoutes.json(CaptureOutput(manifest, directory: try store.handle(of: entry).location.captureLocation))
        }
        routes.get("captures/:capture/manifest") { _, context in
            let entry = try await Self.entry(store, try context.parameters.require("capture"))
            guard let local = store as? CaptureStore else {
                // The bytes the store holds, as a folder's manifest.json is served.
                let bytes = try await Self.read("manifest.json", of: entry, in: store)
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
            }
            let url = try await Self.file("manifest.json", of: entry, in: local)
            guard let data = try await BlockingWork.run({ FileManager.default.contents(atPath: url.path) }) else {
                throw ServiceError(.notFound, "capture \(entry.id) has no manifest.json")
            }
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: data)))
        }
        routes.get("captures/:capture/files/:file") { _, context in
            let entry = try await Self.entry(store, try context.parameters.require("capture"))
            // A path inside the capture, percent-encoded as one segment (frames/cam0/000001.png as
            // frames%2Fcam0%2F000001.png); no part may be empty or begin with a dot.
            let encoded = try context.parameters.require("file")
            let name = encoded.removingPercentEncoding ?? encoded
            if let objects = store as? ObjectCaptureStore {
                guard CaptureFileNames.isValid(name) else { throw Self.notAFile(name, of: entry) }
                return try await Self.stream(name, of: entry, from: objects)
            }
            guard let local = store as? CaptureStore else {
                guard CaptureFileNames.isValid(name) else { throw Self.notAFile(name, of: entry) }
                let bytes = try await Self.read(name, of: entry, in: store)
                return Response(status: .ok, headers: [.contentType: Self.contentType(of: name)], body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
            }
            let url = try await Self.file(name, of: entry, in: local)
            // Streamed from disk in chunks: a recording's files may be large.
            return Response(
                status: .ok, headers: [.contentType: Self.contentType(of: url.lastPathComponent)], body: try await FileIO().loadFile(path: url.path, context: context))
        }
        routes.get("captures/:capture/sets/:set/cameras/:camera") { _, context in
            let entry = try await Self.entry(store, try context.parameters.require("capture"))
            guard let set = Int(try context.parameters.require("set")), let camera = Int(try context.parameters.require("camera")) else {
                throw ServiceError(.badRequest, "set and camera are numbers: the manifest's set index and camera index")
            }
            let manifest = try await Self.manifest(of: entry, in: store)
            guard manifest.hostRecording != nil else {
                throw ServiceError(.notFound, "capture \(entry.id) is not a recording made on the hosts: its frames are files (GET …/files/NAME)")
            }
            guard manifest.hostRecording?.isOffloaded == true else {
                throw ServiceError(.conflict, "capture \(entry.id) still has files on its hosts; its sets are built once they are offloaded")
            }
            let image: [UInt8]?
            if let local = store as? CaptureStore {
                let directory = local.root.appendingPathComponent(entry.directory)
                image = try await BlockingWork.run { try RecordingExport.setImage(of: manifest, in: directory, set: set, camera: camera) }
            } else if let objects = store as? ObjectCaptureStore {
                // Read from the video in the store in ranged reads, up to the frame.
                let capture = try objects.handle(of: entry)
                do {
                    image = try await BlockingWork.run { try RecordingExport.setImage(of: manifest, in: capture, of: objects, set: set, camera: camera) }
                } catch let error as ObjectStoreError {
                    throw Self.problem(error, RecordingExport.frame(of: manifest, set: set, camera: camera)?.file ?? "camera \(camera)'s video", of: entry, in: store)
                }
            } else {
                throw ServiceError(.conflict, "capture \(entry.id) is in \(store.storeURL), whose videos this service cannot read")
            }
            guard let image else { throw ServiceError(.notFound, "capture \(entry.id) has no frame of camera \(camera) in set \(set)") }
            return Response(status: .ok, headers: [.contentType: "image/jpeg"], body: .init(byteBuffer: ByteBuffer(bytes: image)))
        }
        return routes
    }

    /// The catalog's entry for `id`, of a capture whose files this service has.
    static func entry(_ store: any CaptureStorage, _ id: String) async throws -> CaptureCatalog.Entry {
        guard let entry = try await store.catalog.entry(id) else {
            throw ServiceError(.notFound, "no capture '\(id)' in the catalog (GET /api/v1/captures lists them)")
        }
        guard store.holds(entry) else {
            throw ServiceError(
                .notFound, "capture \(entry.id) is rig \(entry.rig)'s, stored in \(entry.store): its files are not here; ask that rig's service")
        }
        return entry
    }

    /// The capture's manifest: a folder's read on `BlockingWork`'s threads, an object store's fetched.
    static func manifest(of entry: CaptureCatalog.Entry, in store: any CaptureStorage) async throws -> CaptureManifest {
        if let local = store as? CaptureStore { return try await BlockingWork.run { try local.manifest(of: entry) } }
        do {
            return try await store.manifest(of: entry)
        } catch let error as ObjectStoreError {
            throw Self.problem(error, "manifest.json", of: entry, in: store)
        }
    }

    /// The bytes of file `name` of a capture in an object store (or any store but a folder).
    static func read(_ name: String, of entry: CaptureCatalog.Entry, in store: any CaptureStorage) async throws -> [UInt8] {
        do {
            return try await store.readFile(name, in: try store.handle(of: entry))
        } catch let error as ObjectStoreError {
            throw Self.problem(error, name, of: entry, in: store)
        }
    }

    /// File `name` of the capture streamed from the object store, a ranged read at a time: its size is
    /// asked first (a missing object is a 404, the store down a 503); a failure once the answer has begun
    /// ends the connection (the client sees a short body).
    static func stream(_ name: String, of entry: CaptureCatalog.Entry, from store: ObjectCaptureStore) async throws -> Response {
        let capture = try store.handle(of: entry)
        let size: UInt64
        do {
            size = try await store.fileSize(name, in: capture)
        } catch let error as ObjectStoreError {
            throw Self.problem(error, name, of: entry, in: store)
        }
        return Response(
            status: .ok, headers: [.contentType: Self.contentType(of: name)],
            body: ResponseBody(contentLength: Int(size)) { writer in
                try await store.readPieces(name, in: capture, size: size) { try await writer.write($0) }
                try await writer.finish(nil)
            })
    }

    /// A store's failure to give file `name` as the API answers it: a missing object is a 404 naming the
    /// capture and the file, any other failure (the store down, the credentials refused) a 503 saying
    /// what the store said.
    static func problem(_ error: ObjectStoreError, _ name: String, of entry: CaptureCatalog.Entry, in store: any CaptureStorage) -> ServiceError {
        guard error.kind == .notFound else {
            return ServiceError(.unavailable, "cannot read \(name) of capture \(entry.id) from \(store.storeURL): \(error.description)")
        }
        return ServiceError(.notFound, "capture \(entry.id) has no file \(name) in \(store.storeURL) (its manifest lists its files)")
    }

    static func notAFile(_ relative: String, of entry: CaptureCatalog.Entry) -> ServiceError {
        ServiceError(.badRequest, "'\(relative)' is not a file of capture \(entry.id): give a path inside it, e.g. contact-sheet.png")
    }

    /// The content type of a capture's file, by its extension.
    static func contentType(of name: String) -> String {
        let fileExtension = URL(fileURLWithPath: name).pathExtension.lowercased()
        // A recording's videos are Matroska, which Hummingbird's table does not list.
        if fileExtension == "mkv" { return "video/x-matroska" }
        return MediaType.getMediaType(forExtension: fileExtension)?.description ?? "application/octet-stream"
    }

    /// The regular file `relative` of a capture, its symbolic links resolved: one that leads out of the
    /// captures directory is refused as if it were not there.
    static func file(_ relative: String, of entry: CaptureCatalog.Entry, in store: CaptureStore) async throws -> URL {
        let directory = store.root.appendingPathComponent(entry.directory)
        let url: URL
        do {
            url = try CaptureStore.file(relative, in: directory)
        } catch {
            throw Self.notAFile(relative, of: entry)
        }
        let root = store.root
        let resolved = try await BlockingWork.run { () -> URL? in
            let resolved = url.resolvingSymlinksInPath()
            let inside = root.resolvingSymlinksInPath().path + "/"
            var isDirectory: ObjCBool = false
            guard resolved.path.hasPrefix(inside), FileManager.default.fileExists(atPath: resolved.path, isDirectory: &isDirectory), !isDirectory.boolValue
            else { return nil }
            return resolved
        }
        guard let resolved else {
            throw ServiceError(.notFound, "capture \(entry.id) has no file \(relative) (its manifest lists its files)")
        }
        return resolved
    }
}
