/// Where an agent listens: `HOST[:PORT]`, with IPv6 literals in brackets (`[::1]:7450`).
public struct AgentEndpoint: Hashable, Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int = WireProtocol.defaultPort) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST`, `HOST:PORT`, `[IPV6]` or `[IPV6]:PORT`; `nil` if malformed. Port 0 (any free
    /// port) is accepted only for an address to listen on.
    public init?(_ text: String, forListening: Bool = false) {
        var hostPart = Substring(text)
        var portPart: Substring?
        if hostPart.hasPrefix("[") {
            guard let close = hostPart.firstIndex(of: "]") else { return nil }
            let rest = hostPart[hostPart.index(after: close)...]
            hostPart = hostPart[hostPart.index(after: hostPart.startIndex)..<close]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { return nil }
                portPart = rest.dropFirst()
            }
        } else if let colon = hostPart.lastIndex(of: ":") {
            guard hostPart.firstIndex(of: ":") == colon else { return nil }  // bare IPv6 needs brackets
            portPart = hostPart[hostPart.index(after: colon)...]
            hostPart = hostPart[..<colon]
        }
        guard !hostPart.isEmpty else { return nil }
        var port = WireProtocol.defaultPort
        if let portPart {
            guard let value = Int(portPart), ((forListening ? 0 : 1)...65535).contains(value) else { return nil }
            port = value
        }
        self.init(host: String(hostPart), port: port)
    }

    public var description: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
