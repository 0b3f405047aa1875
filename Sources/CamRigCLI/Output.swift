import CamRigText
import Foundation

/// Prints a value as pretty, key-sorted JSON on standard output.
public func printJSON(_ value: some Encodable, snakeCase: Bool = false) throws {
    let encoder = JSONEncoder()
    if snakeCase { encoder.keyEncodingStrategy = .convertToSnakeCase }
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

/// A failure the user sees as `Error: description`, with exit status 1.
public struct CommandFailure: Error, CustomStringConvertible {
    /// What failed and what to do.
    public var description: String

    /// A failure that says `description`.
    public init(_ description: String) { self.description = description }
}
