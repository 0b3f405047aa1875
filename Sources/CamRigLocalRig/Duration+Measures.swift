extension Duration {
    /// The duration in seconds, as a floating-point number (for rates, tables and timeouts of APIs
    /// that take seconds).
    public var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }

    /// The duration in microseconds, as a floating-point number.
    public var microseconds: Double { Double(components.seconds) * 1e6 + Double(components.attoseconds) / 1e12 }
}
