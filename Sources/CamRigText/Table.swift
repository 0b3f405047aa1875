import Foundation

/// Microseconds with one decimal, for tables.
public func micros(_ nanoseconds: Double) -> String { String(format: "%.1f", nanoseconds / 1000) }
/// Microseconds with one decimal, for tables.
public func micros(_ nanoseconds: Int64) -> String { micros(Double(nanoseconds)) }

/// Pads columns for a plain-text table.
public func table(_ header: [String], _ rows: [[String]]) -> String {
    let all = [header] + rows
    let widths = header.indices.map { column in all.map { $0.indices.contains(column) ? $0[column].count : 0 }.max() ?? 0 }
    return all.map { row in
        row.enumerated().map { index, cell in cell.padding(toLength: widths[index], withPad: " ", startingAt: 0) }.joined(separator: "  ")
            .trimmingCharacters(in: .whitespaces)
    }.joined(separator: "\n")
}
