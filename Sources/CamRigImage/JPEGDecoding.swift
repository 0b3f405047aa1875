import CTurboJPEG

/// JPEG pictures decoded to RGB (libjpeg-turbo): for contact-sheet tiles and previews of MJPEG cameras.
public enum JPEGDecoding {
    /// The RGB pixels of a JPEG image, or nil when it cannot be decoded or is over 64 megapixels.
    public static func rgb(_ bytes: UnsafeRawBufferPointer) -> (width: Int, height: Int, rgb: [UInt8])? {
        guard let handle = tjInitDecompress(), let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
        defer { tjDestroy(handle) }
        var width: Int32 = 0
        var height: Int32 = 0
        var subsampling: Int32 = 0
        var colourspace: Int32 = 0
        guard tjDecompressHeader3(handle, base, UInt(bytes.count), &width, &height, &subsampling, &colourspace) == 0, width > 0, height > 0,
            Int(width) * Int(height) <= 64_000_000
        else { return nil }
        var rgb = [UInt8](repeating: 0, count: Int(width) * Int(height) * 3)
        let status = rgb.withUnsafeMutableBufferPointer {
            tjDecompress2(handle, base, UInt(bytes.count), $0.baseAddress, width, 0, height, Int32(TJPF_RGB.rawValue), 0)
        }
        return status == 0 ? (Int(width), Int(height), rgb) : nil
    }
}
