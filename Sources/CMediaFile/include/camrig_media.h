// CamRig media files: one Matroska file per camera, written crash-safely through FFmpeg's libraries.
// Every function is thread-safe for distinct objects. Error strings are written into `error` (may be NULL).
#ifndef CAMRIG_MEDIA_H
#define CAMRIG_MEDIA_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What the writer puts in the file.
typedef enum {
    CAMRIG_MEDIA_MJPEG = 1,        // packets are complete JPEG images, stored as they are (V_MJPEG)
    CAMRIG_MEDIA_H264_PACKETS = 2, // packets are H.264 Annex-B access units from the camera, stored as they are
    CAMRIG_MEDIA_FFV1 = 3,         // raw frames encoded losslessly with ffv1 (level 3, intra only, slices, slicecrc)
    CAMRIG_MEDIA_H264 = 4,         // raw frames encoded with h264_v4l2m2m if it opens, else libx264
    CAMRIG_MEDIA_RAW = 5,          // raw frames stored byte for byte as rawvideo (Bayer included)
} camrig_media_codec;

/// Camera pixel formats (V4L2 fourccs as little-endian uint32: 'Y'|'U'<<8|'Y'<<16|'V'<<24).
/// Supported for raw input: YUYV (yuyv422), RGB3 (rgb24), GREY (gray), RGGB (bayer_rggb8). MJPG for CAMRIG_MEDIA_MJPEG.

typedef struct {
    const char *path;             // file to create (O_CREAT|O_EXCL: refuse to overwrite)
    camrig_media_codec codec;
    uint32_t pixel_format;        // fourcc of the input frames
    int32_t width, height;
    int32_t bytes_per_line;       // of raw input rows (0: tightly packed)
    int32_t rate_num, rate_den;   // frame rate of the grid (e.g. 30/1); written as the stream's frame rate
    int32_t cluster_ms;           // longest cluster in ms (0: 1000)
    int32_t sync_every_ms;        // fdatasync the file at least this often, in ms of media time (0: 1000; <0: never)
    int32_t threads;              // encoder threads (0: 1)
    const char *const *metadata;  // NULL-terminated key,value,key,value,... written as Matroska global tags (may be NULL)
} camrig_media_writer_options;

typedef struct camrig_media_writer camrig_media_writer;

/// Opens a writer (creates the file, writes the header). Returns NULL and fills `error` on failure.
/// For H264_PACKETS the header is written with the first access unit that carries SPS and PPS.
camrig_media_writer *camrig_media_writer_open(const camrig_media_writer_options *options, char *error, size_t error_size);
/// Adds one frame: `data`/`size` are a JPEG (MJPEG), an Annex-B access unit (H264_PACKETS), or one raw frame
/// (`height` rows of `bytes_per_line`). `pts_ns` is the frame's time in nanoseconds; it must increase.
/// Returns 0, or a negative AVERROR and fills `error`.
int camrig_media_writer_write(camrig_media_writer *writer, const uint8_t *data, size_t size, int64_t pts_ns, char *error, size_t error_size);
/// Bytes written to the file so far (what is on disk or in the OS's cache, not in memory buffers).
int64_t camrig_media_writer_bytes(const camrig_media_writer *writer);
/// Flushes the encoder, writes cues and the trailer, fsyncs, closes and frees. Returns 0 or a negative AVERROR.
int camrig_media_writer_close(camrig_media_writer *writer, char *error, size_t error_size);

/// Rewrites a file cut short (its writer was killed) into `out_path` as a properly closed file with the same
/// stream and packets (packet copy, no re-encode): every packet that can be read. Returns the number of
/// frames kept (>= 0), or a negative AVERROR and fills `error`.
int64_t camrig_media_repair(const char *in_path, const char *out_path, char *error, size_t error_size);

/// Reading a recorded file, frame by frame in file order.
typedef struct camrig_media_reader camrig_media_reader;
typedef struct {
    int32_t width, height;
    camrig_media_codec codec;     // MJPEG, H264_PACKETS (for any h264), FFV1, RAW
    uint32_t pixel_format;        // for RAW: the fourcc it was written with; 0 otherwise
    int32_t rate_num, rate_den;
} camrig_media_info;
/// Opens a recorded file for reading and fills `info`. Returns NULL and fills `error` on failure.
camrig_media_reader *camrig_media_reader_open(const char *path, camrig_media_info *info, char *error, size_t error_size);
/// A file to read from elsewhere than a path (an object in a store, read in ranges): `read` reads up to
/// `size` bytes at `offset` into `buffer` and returns the count read, 0 at the end, or -1 on failure.
typedef struct {
    void *context;
    int64_t size;
    int (*read)(void *context, int64_t offset, uint8_t *buffer, int size);
} camrig_media_source;
/// Opens a recorded file read through `source` (`name` names it in errors), as `camrig_media_reader_open`.
camrig_media_reader *camrig_media_reader_open_source(const camrig_media_source *source, const char *name, camrig_media_info *info, char *error, size_t error_size);
/// The next frame's compressed packet: fills *data/*size (valid until the next call) and *pts_ns. Returns 1,
/// 0 at the end, or a negative AVERROR.
int camrig_media_reader_next(camrig_media_reader *reader, const uint8_t **data, size_t *size, int64_t *pts_ns, char *error, size_t error_size);
/// Decodes the packet last returned by `next` to packed RGB24 (width*3 bytes per row) into `rgb`
/// (at least width*height*3 bytes); H.264 is decoded from the last keyframe as needed. Returns 0 or a negative AVERROR.
int camrig_media_reader_decode_rgb(camrig_media_reader *reader, uint8_t *rgb, char *error, size_t error_size);
/// Closes the file and frees the reader (NULL is ignored).
void camrig_media_reader_close(camrig_media_reader *reader);

/// Writes frames `first`…`last` (0-based frame indexes in file order, inclusive) of `in_path` into a new
/// Matroska file `out_path`. Intra-only codecs (MJPEG, FFV1, RAW) are copied packet for packet; H.264 is
/// decoded and re-encoded with libx264 so the first frame is a keyframe. Timestamps are kept. Returns frames
/// written or a negative AVERROR.
int64_t camrig_media_copy_range(const char *in_path, const char *out_path, int64_t first, int64_t last, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
