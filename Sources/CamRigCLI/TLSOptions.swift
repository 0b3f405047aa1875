import ArgumentParser

/// How this program authenticates to its peers: a TLS directory and the certificate to present, or
/// no TLS at all. Nothing here is particular to one side of a connection.
public struct TLSOptions: ParsableArguments {
    public init() {}

    @Option(name: .long, help: ArgumentHelp("Directory with ca.pem and this program's certificate and key (see `camrig certs`).", valueName: "dir"))
    public var tlsDir: String?

    @Option(
        name: .long,
        help: ArgumentHelp("Certificate name to present (default: the only certificate in --tls-dir for this program's role).", valueName: "name")
    )
    public var identity: String?

    @Flag(name: .long, help: "Without TLS: plaintext, nothing encrypted or authenticated, for peers started with --insecure. Development only.")
    public var insecure = false

    public func validate() throws {
        if insecure && tlsDir != nil { throw ValidationError("--insecure and --tls-dir exclude each other") }
    }

    /// The TLS directory to use: `--tls-dir`, else `fallback`; nil without TLS (`--insecure`, or
    /// `fallbackInsecure`). `fallback` and `fallbackInsecure` come from `source`, such as "the rig
    /// file's tls_dir". Throws when neither TLS nor plaintext was chosen, or both were.
    public func directory(fallback: String? = nil, fallbackInsecure: Bool = false, from source: String? = nil) throws -> String? {
        let directory = tlsDir ?? fallback
        if insecure || fallbackInsecure {
            guard directory == nil else { throw ValidationError("--insecure and \(source ?? "--tls-dir") exclude each other") }
            return nil
        }
        guard let directory else {
            let elsewhere = source.map { " or give \($0)" } ?? ""
            throw ValidationError("TLS is required: pass --tls-dir DIR (see `camrig certs init`)\(elsewhere), or --insecure for peers started with --insecure")
        }
        return directory
    }
}
