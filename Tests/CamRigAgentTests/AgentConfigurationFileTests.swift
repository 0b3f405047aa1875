import CamRigAgent
import Testing

@Suite("Agent configuration file", .timeLimit(.minutes(1)))
struct AgentConfigurationFileTests {
    @Test("every section parses; absent keys stay unset so flags and defaults apply")
    func parse() throws {
        let file = try AgentConfigurationFile(yaml: """
            listen: 10.0.0.21:7450
            tls_dir: /etc/camrig/tls
            spool:
              dir: /var/lib/camrig/spool
              size_mb: 512
            devices:
              v4l2: ["/dev/video0", "/dev/video2"]
            limits:
              max_connections: 8
            """)
        #expect(file.listen == "10.0.0.21:7450")
        #expect(file.tlsDir == "/etc/camrig/tls")
        #expect(file.spool?.sizeMB == 512)
        #expect(file.devices?.v4l2 == ["/dev/video0", "/dev/video2"])
        #expect(file.limits?.maxConnections == 8)
        #expect(file.identity == nil)
        #expect(file.limits?.idleTimeoutSeconds == nil)
        #expect(try AgentConfigurationFile(yaml: "") == AgentConfigurationFile())
    }

    @Test("a misspelt key is an error that names it and the known keys")
    func unknownKey() {
        let top = #expect(throws: ConfigurationError.self) { try AgentConfigurationFile(yaml: "listn: 1.2.3.4:7450", source: "agent.yaml") }
        #expect(top?.message.contains("agent.yaml: unknown key 'listn'") == true)
        let nested = #expect(throws: ConfigurationError.self) { try AgentConfigurationFile(yaml: "spool:\n  size: 5") }
        #expect(nested?.message.contains("'spool.size'") == true)
        #expect(nested?.message.contains("spool.size_mb") == true)
        #expect(throws: ConfigurationError.self) { try AgentConfigurationFile(yaml: "spool:\n  size_mb: lots") }
    }
}
