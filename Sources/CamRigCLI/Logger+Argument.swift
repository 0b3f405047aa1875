import ArgumentParser
import Logging

/// `--log-level trace|debug|info|notice|warning|error|critical` in every executable.
extension Logger.Level: @retroactive ExpressibleByArgument {}
