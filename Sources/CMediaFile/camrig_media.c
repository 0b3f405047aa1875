// CamRig media files: crash-safe Matroska writing, repair, reading and range copies through FFmpeg 5.1.
#define _GNU_SOURCE
#include "camrig_media.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavcodec/bsf.h>
#include <libavformat/avformat.h>
#include <libavutil/dict.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

#define FOURCC(a, b, c, d) ((uint32_t)(a) | ((uint32_t)(b) << 8) | ((uint32_t)(c) << 16) | ((uint32_t)(d) << 24))
#define FCC_YUYV FOURCC('Y', 'U', 'Y', 'V')
#define FCC_RGB3 FOURCC('R', 'G', 'B', '3')
#define FCC_GREY FOURCC('G', 'R', 'E', 'Y')
#define FCC_RGGB FOURCC('R', 'G', 'G', 'B')
#define FCC_MJPG FOURCC('M', 'J', 'P', 'G')
#define FCC_JPEG FOURCC('J', 'P', 'E', 'G')
#define FCC_H264 FOURCC('H', '2', '6', '4')

static const AVRational MS = {1, 1000};
static const AVRational NS = {1, 1000000000};

static void quiet(void) { av_log_set_level(AV_LOG_QUIET); }

static void set_error(char *error, size_t size, const char *format, ...) {
    if (!error || size == 0) return;
    va_list args;
    va_start(args, format);
    vsnprintf(error, size, format, args);
    va_end(args);
}

static const char *err_str(int code, char *buf, size_t size) {
    if (av_strerror(code, buf, size) < 0) snprintf(buf, size, "error %d", code);
    return buf;
}
#define ERRSTR(code) err_str((code), (char[AV_ERROR_MAX_STRING_SIZE]){0}, AV_ERROR_MAX_STRING_SIZE)

static void fourcc_text(uint32_t f, char out[16]) {
    int printable = 1;
    for (int i = 0; i < 4; i++) {
        unsigned c = (f >> (8 * i)) & 0xff;
        if (c < 32 || c > 126) printable = 0;
    }
    if (printable)
        snprintf(out, 16, "%c%c%c%c", f & 0xff, (f >> 8) & 0xff, (f >> 16) & 0xff, (f >> 24) & 0xff);
    else
        snprintf(out, 16, "0x%08x", f);
}

static enum AVPixelFormat fourcc_pix(uint32_t f) {
    switch (f) {
    case FCC_YUYV: return AV_PIX_FMT_YUYV422;
    case FCC_RGB3: return AV_PIX_FMT_RGB24;
    case FCC_GREY: return AV_PIX_FMT_GRAY8;
    case FCC_RGGB: return AV_PIX_FMT_BAYER_RGGB8;
    default: return AV_PIX_FMT_NONE;
    }
}

static uint32_t pix_fourcc(enum AVPixelFormat p) {
    switch (p) {
    case AV_PIX_FMT_YUYV422: return FCC_YUYV;
    case AV_PIX_FMT_RGB24: return FCC_RGB3;
    case AV_PIX_FMT_GRAY8: return FCC_GREY;
    case AV_PIX_FMT_BAYER_RGGB8: return FCC_RGGB;
    default: return 0;
    }
}

static int packed_row_bytes(enum AVPixelFormat p, int width) {
    switch (p) {
    case AV_PIX_FMT_YUYV422: return 2 * width;
    case AV_PIX_FMT_RGB24: return 3 * width;
    default: return width;
    }
}

static const char *codec_text(camrig_media_codec c) {
    switch (c) {
    case CAMRIG_MEDIA_MJPEG: return "mjpeg";
    case CAMRIG_MEDIA_H264_PACKETS: return "h264 packets";
    case CAMRIG_MEDIA_FFV1: return "ffv1";
    case CAMRIG_MEDIA_H264: return "h264";
    case CAMRIG_MEDIA_RAW: return "raw";
    default: return "unknown codec";
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Output through our own file descriptor.

typedef struct {
    int fd;
    AVIOContext *pb;
    AVFormatContext *oc;
    int64_t pos, size;
    int io_error;
    int header_written;
    char *path;
} out_file;

/* FFmpeg 7 (libavformat 61) passes the bytes to write as const. */
#if LIBAVFORMAT_VERSION_MAJOR >= 61
#define CAMRIG_AVIO_WRITE_BYTES const uint8_t
#else
#define CAMRIG_AVIO_WRITE_BYTES uint8_t
#endif
static int out_write_cb(void *opaque, CAMRIG_AVIO_WRITE_BYTES *buf, int n) {
    out_file *o = opaque;
    int done = 0;
    while (done < n) {
        ssize_t w = write(o->fd, buf + done, (size_t)(n - done));
        if (w < 0) {
            if (errno == EINTR) continue;
            o->io_error = AVERROR(errno);
            return o->io_error;
        }
        done += (int)w;
    }
    o->pos += n;
    if (o->pos > o->size) o->size = o->pos;
    return n;
}

static int64_t out_seek_cb(void *opaque, int64_t offset, int whence) {
    out_file *o = opaque;
    if (whence & AVSEEK_SIZE) return o->size;
    whence &= ~AVSEEK_FORCE;
    off_t r = lseek(o->fd, (off_t)offset, whence);
    if (r < 0) return AVERROR(errno);
    o->pos = r;
    return r;
}

static int out_open(out_file *o, const char *path, char *error, size_t error_size) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    if (!path || !*path) {
        set_error(error, error_size, "no output path");
        return AVERROR(EINVAL);
    }
    o->path = av_strdup(path);
    if (!o->path) {
        set_error(error, error_size, "out of memory");
        return AVERROR(ENOMEM);
    }
    o->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        int e = errno;
        set_error(error, error_size, "cannot create %s: %s", path, strerror(e));
        return AVERROR(e);
    }
    int ret = avformat_alloc_output_context2(&o->oc, NULL, "matroska", path);
    if (ret < 0 || !o->oc) {
        set_error(error, error_size, "cannot create matroska muxer: %s", ERRSTR(ret));
        return ret < 0 ? ret : AVERROR(ENOMEM);
    }
    const int buffer_size = 1 << 18;
    uint8_t *buffer = av_malloc(buffer_size);
    if (buffer) o->pb = avio_alloc_context(buffer, buffer_size, 1, o, NULL, out_write_cb, out_seek_cb);
    if (!o->pb) {
        av_free(buffer);
        set_error(error, error_size, "out of memory");
        return AVERROR(ENOMEM);
    }
    o->pb->seekable = AVIO_SEEKABLE_NORMAL;
    o->oc->pb = o->pb;
    o->oc->flags |= AVFMT_FLAG_CUSTOM_IO;
    return 0;
}

// Closes; writes the trailer if `finish` and the header was written. Removes the file if `remove_file`.
static int out_close(out_file *o, int finish, int remove_file, char *error, size_t error_size) {
    int ret = 0;
    if (finish && o->oc && o->header_written) {
        ret = av_write_trailer(o->oc);
        if (ret < 0) set_error(error, error_size, "cannot finish %s: %s", o->path, ERRSTR(ret));
    }
    if (o->pb) {
        avio_flush(o->pb);
        if (ret == 0 && o->io_error < 0) {
            ret = o->io_error;
            set_error(error, error_size, "cannot write %s: %s", o->path, ERRSTR(ret));
        }
        av_freep(&o->pb->buffer);
        avio_context_free(&o->pb);
    }
    if (o->oc) {
        o->oc->pb = NULL;
        avformat_free_context(o->oc);
        o->oc = NULL;
    }
    if (o->fd >= 0) {
        if (!remove_file && fdatasync(o->fd) < 0 && ret == 0) {
            ret = AVERROR(errno);
            set_error(error, error_size, "cannot sync %s: %s", o->path, strerror(errno));
        }
        if (close(o->fd) < 0 && ret == 0) {
            ret = AVERROR(errno);
            set_error(error, error_size, "cannot close %s: %s", o->path, strerror(errno));
        }
        o->fd = -1;
        if (remove_file) unlink(o->path);
    }
    av_freep(&o->path);
    return ret;
}

static int out_write_header(out_file *o, int64_t cluster_ms, char *error, size_t error_size) {
    AVDictionary *opts = NULL;
    av_dict_set_int(&opts, "cluster_time_limit", cluster_ms, 0);
    av_dict_set_int(&opts, "cluster_size_limit", 8 << 20, 0);
    int ret = avformat_write_header(o->oc, &opts);
    av_dict_free(&opts);
    if (ret < 0) {
        set_error(error, error_size, "cannot write the header of %s: %s", o->path, ERRSTR(ret));
        return ret;
    }
    o->header_written = 1;
    avio_flush(o->pb);
    if (o->io_error < 0) {
        set_error(error, error_size, "cannot write %s: %s", o->path, ERRSTR(o->io_error));
        return o->io_error;
    }
    return 0;
}

static int out_write_packet(out_file *o, AVPacket *pkt, char *error, size_t error_size) {
    int ret = av_write_frame(o->oc, pkt);
    if (ret >= 0) avio_flush(o->pb);
    if (ret >= 0 && o->io_error < 0) ret = o->io_error;
    if (ret < 0) set_error(error, error_size, "cannot write a frame to %s: %s", o->path, ERRSTR(ret));
    return ret;
}

// ---------------------------------------------------------------------------------------------------------------
// Encoders.

static int has_video_device(void) {
    DIR *d = opendir("/dev");
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "video", 5) == 0) { found = 1; break; }
    }
    closedir(d);
    return found;
}

static int gop_for_rate(AVRational rate) {
    int g = (int)(av_q2d(rate) + 0.5);
    return g < 1 ? 1 : g;
}

static AVCodecContext *open_h264_encoder(int width, int height, AVRational rate, int threads, int global_header,
                                         int allow_m2m, char *error, size_t error_size) {
    if (allow_m2m && has_video_device()) {
        const AVCodec *m2m = avcodec_find_encoder_by_name("h264_v4l2m2m");
        if (m2m) {
            AVCodecContext *c = avcodec_alloc_context3(m2m);
            if (c) {
                c->width = width;
                c->height = height;
                c->time_base = MS;
                c->framerate = rate;
                c->gop_size = gop_for_rate(rate);
                c->max_b_frames = 0;
                c->pix_fmt = AV_PIX_FMT_YUV420P;
#if LIBAVCODEC_VERSION_INT >= AV_VERSION_INT(61, 13, 100)
                /* FFmpeg 7.1 lists an encoder's formats through avcodec_get_supported_config. */
                const void *formats = NULL;
                if (avcodec_get_supported_config(c, m2m, AV_CODEC_CONFIG_PIX_FORMAT, 0, &formats, NULL) >= 0 && formats)
                    c->pix_fmt = ((const enum AVPixelFormat *)formats)[0];
#else
                if (m2m->pix_fmts) c->pix_fmt = m2m->pix_fmts[0];
#endif
                if (global_header) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
                if (avcodec_open2(c, m2m, NULL) >= 0) return c;
                avcodec_free_context(&c);
            }
        }
    }
    const AVCodec *x264 = avcodec_find_encoder_by_name("libx264");
    if (!x264) {
        set_error(error, error_size, "no h264 encoder: libx264 is not available");
        return NULL;
    }
    AVCodecContext *c = avcodec_alloc_context3(x264);
    if (!c) {
        set_error(error, error_size, "out of memory");
        return NULL;
    }
    c->width = width;
    c->height = height;
    c->time_base = MS;
    c->framerate = rate;
    c->gop_size = gop_for_rate(rate);
    c->keyint_min = 1;
    c->max_b_frames = 0;
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->thread_count = threads;
    if (global_header) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    av_opt_set(c->priv_data, "preset", "veryfast", 0);
    av_opt_set(c->priv_data, "tune", "zerolatency", 0);
    int ret = avcodec_open2(c, x264, NULL);
    if (ret < 0) {
        set_error(error, error_size, "cannot open libx264 for %dx%d: %s", width, height, ERRSTR(ret));
        avcodec_free_context(&c);
        return NULL;
    }
    return c;
}

static AVCodecContext *open_ffv1_encoder(int width, int height, AVRational rate, enum AVPixelFormat fmt, int threads,
                                         int global_header, char *error, size_t error_size) {
    const AVCodec *ffv1 = avcodec_find_encoder(AV_CODEC_ID_FFV1);
    if (!ffv1) {
        set_error(error, error_size, "no ffv1 encoder");
        return NULL;
    }
    AVCodecContext *c = avcodec_alloc_context3(ffv1);
    if (!c) {
        set_error(error, error_size, "out of memory");
        return NULL;
    }
    static const int slice_counts[] = {4, 6, 9, 12, 16, 24};
    int slices = 4;
    for (size_t i = 0; i < sizeof slice_counts / sizeof slice_counts[0]; i++) {
        slices = slice_counts[i];
        if (slices >= threads) break;
    }
    c->width = width;
    c->height = height;
    c->time_base = MS;
    c->framerate = rate;
    c->gop_size = 1;
    c->level = 3;
    c->slices = slices;
    c->pix_fmt = fmt;
    c->thread_count = threads;
    c->thread_type = FF_THREAD_SLICE;
    if (global_header) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    av_opt_set_int(c->priv_data, "slicecrc", 1, 0);
    int ret = avcodec_open2(c, ffv1, NULL);
    if (ret < 0) {
        set_error(error, error_size, "cannot open ffv1 for %dx%d %s: %s", width, height, av_get_pix_fmt_name(fmt),
                  ERRSTR(ret));
        avcodec_free_context(&c);
        return NULL;
    }
    return c;
}

// ---------------------------------------------------------------------------------------------------------------
// Writer.

struct camrig_media_writer {
    out_file out;
    AVStream *st;
    camrig_media_codec codec;
    int width, height, bytes_per_line, packed_row;
    enum AVPixelFormat in_fmt;
    AVRational rate;
    int64_t cluster_ms, sync_ms;
    int64_t frame_ms;         // duration of one frame in ms (for packet durations)
    int64_t last_pts;         // ms, valid if frames > 0
    int64_t last_sync;        // ms of the last fdatasync
    int64_t frames;
    AVCodecContext *enc;
    struct SwsContext *sws;
    AVFrame *frame;
    AVPacket *pkt;
    uint8_t *scratch;         // packed raw rows
    AVCodecParserContext *parser; // H264_PACKETS: FFmpeg's H.264 parser, for each access unit's keyframe flag
    AVCodecContext *parser_ctx;
    uint8_t *parse_buf;           // the access unit with FFmpeg's input padding, for the parser
    unsigned int parse_buf_size;
};

static void writer_free(camrig_media_writer *w, int remove_file) {
    out_close(&w->out, 0, remove_file, NULL, 0);
    avcodec_free_context(&w->enc);
    sws_freeContext(w->sws);
    av_frame_free(&w->frame);
    av_packet_free(&w->pkt);
    av_free(w->scratch);
    av_parser_close(w->parser);
    avcodec_free_context(&w->parser_ctx);
    av_free(w->parse_buf);
    free(w);
}

static void set_stream_tags(AVStream *st, uint32_t fourcc, AVRational rate) {
    char text[32];
    if (fourcc) {
        fourcc_text(fourcc, text);
        av_dict_set(&st->metadata, "CAMRIG_FOURCC", text, 0);
    }
    snprintf(text, sizeof text, "%d/%d", rate.num, rate.den);
    av_dict_set(&st->metadata, "CAMRIG_RATE", text, 0);
}

camrig_media_writer *camrig_media_writer_open(const camrig_media_writer_options *options, char *error,
                                              size_t error_size) {
    quiet();
    set_error(error, error_size, "%s", "");
    if (!options) {
        set_error(error, error_size, "no options");
        return NULL;
    }
    const camrig_media_writer_options *o = options;
    char fcc[16];
    fourcc_text(o->pixel_format, fcc);
    if (o->width <= 0 || o->height <= 0 || o->width > 32768 || o->height > 32768) {
        set_error(error, error_size, "invalid frame size %dx%d", o->width, o->height);
        return NULL;
    }
    if (o->rate_num <= 0 || o->rate_den <= 0) {
        set_error(error, error_size, "invalid frame rate %d/%d", o->rate_num, o->rate_den);
        return NULL;
    }
    enum AVPixelFormat in_fmt = AV_PIX_FMT_NONE, enc_fmt = AV_PIX_FMT_NONE;
    switch (o->codec) {
    case CAMRIG_MEDIA_MJPEG:
        if (o->pixel_format && o->pixel_format != FCC_MJPG && o->pixel_format != FCC_JPEG) {
            set_error(error, error_size, "pixel format '%s' is not supported for mjpeg (expects MJPG)", fcc);
            return NULL;
        }
        break;
    case CAMRIG_MEDIA_H264_PACKETS:
        if (o->pixel_format && o->pixel_format != FCC_H264) {
            set_error(error, error_size, "pixel format '%s' is not supported for h264 packets (expects H264)", fcc);
            return NULL;
        }
        break;
    case CAMRIG_MEDIA_FFV1:
    case CAMRIG_MEDIA_H264:
    case CAMRIG_MEDIA_RAW:
        in_fmt = fourcc_pix(o->pixel_format);
        if (in_fmt == AV_PIX_FMT_NONE) {
            set_error(error, error_size, "pixel format '%s' is not supported for %s", fcc, codec_text(o->codec));
            return NULL;
        }
        if (o->codec == CAMRIG_MEDIA_FFV1) {
            switch (in_fmt) {
            case AV_PIX_FMT_YUYV422: enc_fmt = AV_PIX_FMT_YUV422P; break;
            case AV_PIX_FMT_RGB24: enc_fmt = AV_PIX_FMT_0RGB32; break;
            default: enc_fmt = AV_PIX_FMT_GRAY8; break; // GREY, and the RGGB mosaic stored as gray
            }
        }
        if (in_fmt == AV_PIX_FMT_YUYV422 && (o->width & 1)) {
            set_error(error, error_size, "YUYV needs an even width, not %d", o->width);
            return NULL;
        }
        break;
    default:
        set_error(error, error_size, "unknown codec %d", (int)o->codec);
        return NULL;
    }
    int packed_row = in_fmt != AV_PIX_FMT_NONE ? packed_row_bytes(in_fmt, o->width) : 0;
    int bpl = o->bytes_per_line ? o->bytes_per_line : packed_row;
    if (in_fmt != AV_PIX_FMT_NONE && bpl < packed_row) {
        set_error(error, error_size, "bytes_per_line %d is less than a row (%d bytes)", o->bytes_per_line,
                  packed_row);
        return NULL;
    }

    camrig_media_writer *w = calloc(1, sizeof *w);
    if (!w) {
        set_error(error, error_size, "out of memory");
        return NULL;
    }
    w->out.fd = -1;
    w->codec = o->codec;
    w->width = o->width;
    w->height = o->height;
    w->bytes_per_line = bpl;
    w->packed_row = packed_row;
    w->in_fmt = in_fmt;
    w->rate = (AVRational){o->rate_num, o->rate_den};
    av_reduce(&w->rate.num, &w->rate.den, w->rate.num, w->rate.den, INT32_MAX);
    w->cluster_ms = o->cluster_ms > 0 ? o->cluster_ms : 1000;
    w->sync_ms = o->sync_every_ms == 0 ? 1000 : o->sync_every_ms;
    w->frame_ms = av_rescale_q(1, av_inv_q(w->rate), MS);
    if (w->frame_ms < 1) w->frame_ms = 1;
    int threads = o->threads > 0 ? o->threads : 1;

    int ret = out_open(&w->out, o->path, error, error_size);
    if (ret < 0) {
        int created = w->out.fd >= 0;
        writer_free(w, created);
        return NULL;
    }
    AVFormatContext *oc = w->out.oc;
    int global_header = (oc->oformat->flags & AVFMT_GLOBALHEADER) != 0;
    if (o->metadata) {
        for (const char *const *m = o->metadata; m[0] && m[1]; m += 2) av_dict_set(&oc->metadata, m[0], m[1], 0);
    }
    w->pkt = av_packet_alloc();
    w->st = avformat_new_stream(oc, NULL);
    if (!w->pkt || !w->st) {
        set_error(error, error_size, "out of memory");
        goto fail;
    }
    AVStream *st = w->st;
    AVCodecParameters *par = st->codecpar;
    st->time_base = MS;
    st->avg_frame_rate = w->rate;
    st->r_frame_rate = w->rate;
    par->codec_type = AVMEDIA_TYPE_VIDEO;
    par->width = o->width;
    par->height = o->height;
    set_stream_tags(st, o->pixel_format, w->rate);

    if (o->codec == CAMRIG_MEDIA_FFV1 || o->codec == CAMRIG_MEDIA_H264) {
        w->enc = o->codec == CAMRIG_MEDIA_FFV1
                     ? open_ffv1_encoder(o->width, o->height, w->rate, enc_fmt, threads, global_header, error,
                                         error_size)
                     : open_h264_encoder(o->width, o->height, w->rate, threads, global_header, 1, error,
                                         error_size);
        if (!w->enc) goto fail;
        ret = avcodec_parameters_from_context(par, w->enc);
        if (ret < 0) {
            set_error(error, error_size, "cannot set the stream's parameters: %s", ERRSTR(ret));
            goto fail;
        }
        w->frame = av_frame_alloc();
        if (!w->frame) {
            set_error(error, error_size, "out of memory");
            goto fail;
        }
        w->frame->format = w->enc->pix_fmt;
        w->frame->width = o->width;
        w->frame->height = o->height;
        ret = av_frame_get_buffer(w->frame, 0);
        if (ret < 0) {
            set_error(error, error_size, "cannot allocate a frame: %s", ERRSTR(ret));
            goto fail;
        }
        int direct = w->enc->pix_fmt == in_fmt ||
                     (w->enc->pix_fmt == AV_PIX_FMT_GRAY8 && in_fmt == AV_PIX_FMT_BAYER_RGGB8);
        if (!direct) {
            w->sws = sws_getContext(o->width, o->height, in_fmt, o->width, o->height, w->enc->pix_fmt,
                                    SWS_BILINEAR | SWS_ACCURATE_RND | SWS_BITEXACT, NULL, NULL, NULL);
            if (!w->sws) {
                set_error(error, error_size, "cannot convert %s to %s", av_get_pix_fmt_name(in_fmt),
                          av_get_pix_fmt_name(w->enc->pix_fmt));
                goto fail;
            }
        }
    } else if (o->codec == CAMRIG_MEDIA_RAW) {
        par->codec_id = AV_CODEC_ID_RAWVIDEO;
        par->format = in_fmt;
        par->codec_tag = avcodec_pix_fmt_to_codec_tag(in_fmt);
        oc->strict_std_compliance = FF_COMPLIANCE_UNOFFICIAL;
        if (bpl != packed_row) {
            w->scratch = av_malloc((size_t)packed_row * (size_t)o->height);
            if (!w->scratch) {
                set_error(error, error_size, "out of memory");
                goto fail;
            }
        }
    } else if (o->codec == CAMRIG_MEDIA_MJPEG) {
        par->codec_id = AV_CODEC_ID_MJPEG;
    } else {
        par->codec_id = AV_CODEC_ID_H264;
    }

    if (o->codec != CAMRIG_MEDIA_H264_PACKETS) {
        ret = out_write_header(&w->out, w->cluster_ms, error, error_size);
        if (ret < 0) goto fail;
    }
    return w;

fail:
    writer_free(w, 1);
    return NULL;
}

// Whether an H.264 access unit (Annex-B, one whole unit per call) is a keyframe, by FFmpeg's H.264 parser
// (an IDR picture, or a recovery point). The parser reads past the end of its input, so the unit is copied
// into a buffer with FFmpeg's padding first.
static int h264_is_keyframe(camrig_media_writer *w, const uint8_t *data, size_t size) {
    if (!w->parser) {
        AVCodecParserContext *parser = av_parser_init(AV_CODEC_ID_H264);
        AVCodecContext *context = avcodec_alloc_context3(NULL);
        if (!parser || !context) {
            av_parser_close(parser);
            avcodec_free_context(&context);
            return 0;
        }
        context->codec_type = AVMEDIA_TYPE_VIDEO;
        context->codec_id = AV_CODEC_ID_H264;
        parser->flags |= PARSER_FLAG_COMPLETE_FRAMES;
        w->parser = parser;
        w->parser_ctx = context;
    }
    if (size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE) return 0;
    av_fast_padded_malloc(&w->parse_buf, &w->parse_buf_size, size);
    if (!w->parse_buf) return 0;
    memcpy(w->parse_buf, data, size);
    uint8_t *out = NULL;
    int out_size = 0;
    av_parser_parse2(w->parser, w->parser_ctx, &out, &out_size, w->parse_buf, (int)size, AV_NOPTS_VALUE, AV_NOPTS_VALUE, 0);
    return w->parser->key_frame == 1;
}

// The SPS and PPS of an H.264 access unit as Annex-B extradata, by FFmpeg's extract_extradata bitstream
// filter; NULL when the unit carries none. The caller owns the result (av_free).
static uint8_t *h264_extradata(const uint8_t *data, size_t size, int *extradata_size) {
    *extradata_size = 0;
    const AVBitStreamFilter *filter = av_bsf_get_by_name("extract_extradata");
    AVBSFContext *bsf = NULL;
    AVPacket *pkt = av_packet_alloc();
    uint8_t *extradata = NULL;
    if (!filter || !pkt || size > INT_MAX || av_bsf_alloc(filter, &bsf) < 0) goto done;
    bsf->par_in->codec_id = AV_CODEC_ID_H264;
    if (av_bsf_init(bsf) < 0 || av_new_packet(pkt, (int)size) < 0) goto done;
    memcpy(pkt->data, data, size);
    if (av_bsf_send_packet(bsf, pkt) < 0 || av_bsf_receive_packet(bsf, pkt) < 0) goto done;
    size_t side_size = 0;
    const uint8_t *side = av_packet_get_side_data(pkt, AV_PKT_DATA_NEW_EXTRADATA, &side_size);
    if (!side || side_size == 0 || side_size > INT_MAX) goto done;
    extradata = av_mallocz(side_size + AV_INPUT_BUFFER_PADDING_SIZE);
    if (!extradata) goto done;
    memcpy(extradata, side, side_size);
    *extradata_size = (int)side_size;
done:
    av_packet_free(&pkt);
    av_bsf_free(&bsf);
    return extradata;
}

static int writer_mux(camrig_media_writer *w, AVPacket *pkt, char *error, size_t error_size) {
    pkt->stream_index = w->st->index;
    av_packet_rescale_ts(pkt, MS, w->st->time_base);
    return out_write_packet(&w->out, pkt, error, error_size);
}

static int writer_drain(camrig_media_writer *w, char *error, size_t error_size) {
    for (;;) {
        int ret = avcodec_receive_packet(w->enc, w->pkt);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return 0;
        if (ret < 0) {
            set_error(error, error_size, "encoder failed: %s", ERRSTR(ret));
            return ret;
        }
        w->pkt->duration = w->frame_ms;
        ret = writer_mux(w, w->pkt, error, error_size);
        av_packet_unref(w->pkt);
        if (ret < 0) return ret;
    }
}

int camrig_media_writer_write(camrig_media_writer *w, const uint8_t *data, size_t size, int64_t pts_ns,
                              char *error, size_t error_size) {
    if (!w || (!data && size)) {
        set_error(error, error_size, "no writer or no data");
        return AVERROR(EINVAL);
    }
    int64_t pts = av_rescale_q_rnd(pts_ns, NS, MS, AV_ROUND_NEAR_INF | AV_ROUND_PASS_MINMAX);
    if (w->frames > 0 && pts <= w->last_pts) {
        set_error(error, error_size, "timestamp %lld ns (%lld ms) does not increase after the last frame's %lld ms",
                  (long long)pts_ns, (long long)pts, (long long)w->last_pts);
        return AVERROR(EINVAL);
    }
    if (size == 0) {
        set_error(error, error_size, "empty frame");
        return AVERROR(EINVAL);
    }
    int ret = 0;
    AVPacket *pkt = w->pkt;
    if (w->in_fmt != AV_PIX_FMT_NONE) {
        size_t needed = (size_t)w->bytes_per_line * (size_t)(w->height - 1) + (size_t)w->packed_row;
        if (size < needed) {
            set_error(error, error_size, "raw frame of %zu bytes is shorter than %dx%d at %d bytes per line (%zu)",
                      size, w->width, w->height, w->bytes_per_line, needed);
            return AVERROR(EINVAL);
        }
    }
    switch (w->codec) {
    case CAMRIG_MEDIA_MJPEG:
    case CAMRIG_MEDIA_H264_PACKETS:
    case CAMRIG_MEDIA_RAW: {
        int key = 1;
        if (w->codec == CAMRIG_MEDIA_H264_PACKETS) {
            key = h264_is_keyframe(w, data, size);
            if (!w->out.header_written) {
                int ex_size = 0;
                uint8_t *ex = key ? h264_extradata(data, size, &ex_size) : NULL;
                if (!ex) {
                    set_error(error, error_size,
                              "the first H.264 access unit must be a keyframe with SPS and PPS; frame dropped");
                    return AVERROR_INVALIDDATA;
                }
                AVCodecParameters *par = w->st->codecpar;
                par->extradata = ex;
                par->extradata_size = ex_size;
                ret = out_write_header(&w->out, w->cluster_ms, error, error_size);
                if (ret < 0) return ret;
            }
        }
        if (size > INT_MAX) {
            set_error(error, error_size, "frame of %zu bytes is too large", size);
            return AVERROR(EINVAL);
        }
        av_packet_unref(pkt);
        const uint8_t *payload = data;
        int payload_size = (int)size;
        if (w->codec == CAMRIG_MEDIA_RAW) {
            payload_size = w->packed_row * w->height;
            if (w->scratch) {
                av_image_copy_plane(w->scratch, w->packed_row, data, w->bytes_per_line, w->packed_row, w->height);
                payload = w->scratch;
            }
        }
        pkt->data = (uint8_t *)payload; // not reference-counted: av_write_frame does not keep it
        pkt->size = payload_size;
        pkt->pts = pkt->dts = pts;
        pkt->duration = w->frame_ms;
        pkt->flags = key ? AV_PKT_FLAG_KEY : 0;
        ret = writer_mux(w, pkt, error, error_size);
        pkt->data = NULL;
        pkt->size = 0;
        av_packet_unref(pkt);
        if (ret < 0) return ret;
        break;
    }
    case CAMRIG_MEDIA_FFV1:
    case CAMRIG_MEDIA_H264: {
        AVFrame *f = w->frame;
        ret = av_frame_make_writable(f);
        if (ret < 0) {
            set_error(error, error_size, "cannot allocate a frame: %s", ERRSTR(ret));
            return ret;
        }
        if (w->sws) {
            const uint8_t *src[4] = {data, NULL, NULL, NULL};
            int src_stride[4] = {w->bytes_per_line, 0, 0, 0};
            sws_scale(w->sws, src, src_stride, 0, w->height, f->data, f->linesize);
        } else {
            av_image_copy_plane(f->data[0], f->linesize[0], data, w->bytes_per_line, w->packed_row, w->height);
        }
        f->pts = pts;
        f->pict_type = AV_PICTURE_TYPE_NONE;
        ret = avcodec_send_frame(w->enc, f);
        if (ret < 0) {
            set_error(error, error_size, "encoder refused the frame: %s", ERRSTR(ret));
            return ret;
        }
        ret = writer_drain(w, error, error_size);
        if (ret < 0) return ret;
        break;
    }
    }
    if (w->frames == 0) w->last_sync = pts;
    w->frames++;
    w->last_pts = pts;
    if (w->sync_ms >= 0 && pts - w->last_sync >= w->sync_ms) {
        if (fdatasync(w->out.fd) < 0) {
            int e = errno;
            set_error(error, error_size, "cannot sync the file: %s", strerror(e));
            return AVERROR(e);
        }
        w->last_sync = pts;
    }
    return 0;
}

int64_t camrig_media_writer_bytes(const camrig_media_writer *w) { return w ? w->out.size : 0; }

int camrig_media_writer_close(camrig_media_writer *w, char *error, size_t error_size) {
    if (!w) return 0;
    int ret = 0;
    if (w->enc) {
        ret = avcodec_send_frame(w->enc, NULL);
        if (ret >= 0) ret = writer_drain(w, error, error_size);
        else set_error(error, error_size, "cannot flush the encoder: %s", ERRSTR(ret));
    }
    if (!w->out.header_written && ret == 0) {
        // H264_PACKETS with no frame: an empty file, no header could be written.
        set_error(error, error_size, "no frame was written, the file is empty");
        ret = AVERROR_INVALIDDATA;
    }
    int r = out_close(&w->out, 1, 0, ret < 0 ? NULL : error, error_size);
    if (ret == 0) ret = r;
    writer_free(w, 0);
    return ret;
}

// ---------------------------------------------------------------------------------------------------------------
// Reader.

struct camrig_media_reader {
    AVFormatContext *ic;
    AVStream *st;
    camrig_media_info info;
    AVPacket *pkt;
    int64_t index;       // of the packet in pkt; -1 before the first
    AVPacket **gop;      // packets from the last keyframe to pkt (h264), or pkt alone
    int gop_n, gop_cap;
    AVCodecContext *dec;
    AVFrame *frame, *picture;
    struct SwsContext *sws;
    int64_t dec_next;    // index of the packet the decoder expects next (-1: must restart)
    enum AVPixelFormat force_fmt; // interpret decoded gray as Bayer (ffv1 of an RGGB camera)
    AVIOContext *io;     // a caller's source read through FFmpeg (NULL for a file opened by path)
    camrig_media_source source;
    int64_t position;    // where the next read of `source` begins
};

static void gop_clear(camrig_media_reader *r) {
    for (int i = 0; i < r->gop_n; i++) av_packet_free(&r->gop[i]);
    r->gop_n = 0;
}

void camrig_media_reader_close(camrig_media_reader *r) {
    if (!r) return;
    gop_clear(r);
    av_free(r->gop);
    avcodec_free_context(&r->dec);
    av_frame_free(&r->frame);
    av_frame_free(&r->picture);
    sws_freeContext(r->sws);
    av_packet_free(&r->pkt);
    avformat_close_input(&r->ic);
    if (r->io) {
        av_freep(&r->io->buffer);
        avio_context_free(&r->io);
    }
    free(r);
}

static uint32_t parse_fourcc_tag(const char *s) {
    if (!s || strlen(s) != 4) return 0;
    return FOURCC(s[0], s[1], s[2], s[3]);
}

static camrig_media_reader *reader_new(char *error, size_t error_size) {
    quiet();
    set_error(error, error_size, "%s", "");
    camrig_media_reader *r = calloc(1, sizeof *r);
    if (!r) {
        set_error(error, error_size, "out of memory");
        return NULL;
    }
    r->index = -1;
    r->dec_next = -1;
    r->force_fmt = AV_PIX_FMT_NONE;
    return r;
}

static camrig_media_reader *reader_start(camrig_media_reader *r, const char *path, camrig_media_info *info, char *error,
                                         size_t error_size);

camrig_media_reader *camrig_media_reader_open(const char *path, camrig_media_info *info, char *error,
                                              size_t error_size) {
    camrig_media_reader *r = reader_new(error, error_size);
    return r ? reader_start(r, path, info, error, error_size) : NULL;
}

static int source_read(void *opaque, uint8_t *buffer, int size) {
    camrig_media_reader *r = opaque;
    int n = r->source.read(r->source.context, r->position, buffer, size);
    if (n < 0) return AVERROR(EIO);
    if (n == 0) return AVERROR_EOF;
    r->position += n;
    return n;
}

static int64_t source_seek(void *opaque, int64_t offset, int whence) {
    camrig_media_reader *r = opaque;
    int64_t to;
    switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE: return r->source.size;
    case SEEK_SET: to = offset; break;
    case SEEK_CUR: to = r->position + offset; break;
    case SEEK_END: to = r->source.size + offset; break;
    default: return AVERROR(EINVAL);
    }
    if (to < 0) return AVERROR(EINVAL);
    r->position = to;
    return to;
}

camrig_media_reader *camrig_media_reader_open_source(const camrig_media_source *source, const char *name,
                                                     camrig_media_info *info, char *error, size_t error_size) {
    if (!source || !source->read || source->size < 0) {
        set_error(error, error_size, "no source to read %s from", name ? name : "(null)");
        return NULL;
    }
    camrig_media_reader *r = reader_new(error, error_size);
    if (!r) return NULL;
    r->source = *source;
    enum { IO_BUFFER = 1 << 16 };
    uint8_t *buffer = av_malloc(IO_BUFFER);
    r->io = buffer ? avio_alloc_context(buffer, IO_BUFFER, 0, r, source_read, NULL, source_seek) : NULL;
    r->ic = r->io ? avformat_alloc_context() : NULL;
    if (!r->ic) {
        if (!r->io) av_free(buffer);
        set_error(error, error_size, "out of memory");
        camrig_media_reader_close(r);
        return NULL;
    }
    r->ic->pb = r->io;
    r->ic->flags |= AVFMT_FLAG_CUSTOM_IO;
    return reader_start(r, name, info, error, error_size);
}

/// Opens the input (`path`, or the custom I/O set on r->ic) and reads its video stream's parameters;
/// frees `r` and returns NULL on failure.
static camrig_media_reader *reader_start(camrig_media_reader *r, const char *path, camrig_media_info *info, char *error,
                                         size_t error_size) {
    const AVInputFormat *mkv = av_find_input_format("matroska");
    int ret = avformat_open_input(&r->ic, path, mkv, NULL);
    if (ret < 0) {
        // avformat_open_input frees the context on failure (not the custom I/O, which close frees).
        set_error(error, error_size, "cannot open %s: %s", path ? path : "(null)", ERRSTR(ret));
        camrig_media_reader_close(r);
        return NULL;
    }
    for (unsigned i = 0; i < r->ic->nb_streams; i++) {
        if (r->ic->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) {
            r->st = r->ic->streams[i];
            break;
        }
    }
    if (!r->st) {
        set_error(error, error_size, "%s has no video stream", path);
        camrig_media_reader_close(r);
        return NULL;
    }
    AVCodecParameters *par = r->st->codecpar;
    camrig_media_info *in = &r->info;
    in->width = par->width;
    in->height = par->height;
    uint32_t tag_fourcc = parse_fourcc_tag(av_dict_get(r->st->metadata, "CAMRIG_FOURCC", NULL, 0)
                                               ? av_dict_get(r->st->metadata, "CAMRIG_FOURCC", NULL, 0)->value
                                               : NULL);
    switch (par->codec_id) {
    case AV_CODEC_ID_MJPEG: in->codec = CAMRIG_MEDIA_MJPEG; break;
    case AV_CODEC_ID_H264: in->codec = CAMRIG_MEDIA_H264_PACKETS; break;
    case AV_CODEC_ID_FFV1:
        in->codec = CAMRIG_MEDIA_FFV1;
        if (tag_fourcc == FCC_RGGB) r->force_fmt = AV_PIX_FMT_BAYER_RGGB8;
        break;
    case AV_CODEC_ID_RAWVIDEO: {
        in->codec = CAMRIG_MEDIA_RAW;
        uint32_t f = 0;
        if (fourcc_pix(tag_fourcc) != AV_PIX_FMT_NONE) f = tag_fourcc;
        if (!f && par->format >= 0) f = pix_fourcc((enum AVPixelFormat)par->format);
        static const uint32_t known[] = {FCC_YUYV, FCC_RGB3, FCC_GREY, FCC_RGGB};
        for (size_t i = 0; !f && i < 4; i++) {
            if (par->codec_tag && avcodec_pix_fmt_to_codec_tag(fourcc_pix(known[i])) == par->codec_tag) f = known[i];
        }
        if (!f) {
            set_error(error, error_size, "%s: raw video of an unknown pixel format", path);
            camrig_media_reader_close(r);
            return NULL;
        }
        in->pixel_format = f;
        if (par->format < 0) par->format = fourcc_pix(f);
        break;
    }
    default:
        set_error(error, error_size, "%s: codec '%s' is not one CamRig writes", path, avcodec_get_name(par->codec_id));
        camrig_media_reader_close(r);
        return NULL;
    }
    AVRational rate = {0, 1};
    AVDictionaryEntry *rt = av_dict_get(r->st->metadata, "CAMRIG_RATE", NULL, 0);
    if (rt) {
        int n = 0, d = 0;
        if (sscanf(rt->value, "%d/%d", &n, &d) == 2 && n > 0 && d > 0) rate = (AVRational){n, d};
    }
    if (rate.num <= 0) rate = r->st->avg_frame_rate;
    if (rate.num <= 0 || rate.den <= 0) rate = r->st->r_frame_rate;
    if (rate.num <= 0 || rate.den <= 0) rate = (AVRational){0, 1};
    in->rate_num = rate.num;
    in->rate_den = rate.den;
    r->pkt = av_packet_alloc();
    if (!r->pkt) {
        set_error(error, error_size, "out of memory");
        camrig_media_reader_close(r);
        return NULL;
    }
    if (info) *info = *in;
    return r;
}

int camrig_media_reader_next(camrig_media_reader *r, const uint8_t **data, size_t *size, int64_t *pts_ns,
                             char *error, size_t error_size) {
    if (!r) return AVERROR(EINVAL);
    for (;;) {
        av_packet_unref(r->pkt);
        int ret = av_read_frame(r->ic, r->pkt);
        if (ret == AVERROR_EOF) return 0;
        if (ret < 0) {
            set_error(error, error_size, "cannot read frame %lld: %s", (long long)(r->index + 1), ERRSTR(ret));
            return ret;
        }
        if (r->pkt->stream_index != r->st->index) continue;
        break;
    }
    r->index++;
    int key = (r->pkt->flags & AV_PKT_FLAG_KEY) || r->info.codec != CAMRIG_MEDIA_H264_PACKETS;
    if (key) gop_clear(r);
    if (r->gop_n == r->gop_cap) {
        int cap = r->gop_cap ? 2 * r->gop_cap : 16;
        AVPacket **g = av_realloc_array(r->gop, (size_t)cap, sizeof *g);
        if (!g) {
            set_error(error, error_size, "out of memory");
            return AVERROR(ENOMEM);
        }
        r->gop = g;
        r->gop_cap = cap;
    }
    r->gop[r->gop_n] = av_packet_clone(r->pkt);
    if (!r->gop[r->gop_n]) {
        set_error(error, error_size, "out of memory");
        return AVERROR(ENOMEM);
    }
    r->gop_n++;
    int64_t pts = r->pkt->pts != AV_NOPTS_VALUE ? r->pkt->pts : r->pkt->dts;
    if (data) *data = r->pkt->data;
    if (size) *size = (size_t)r->pkt->size;
    if (pts_ns) *pts_ns = pts == AV_NOPTS_VALUE ? 0 : av_rescale_q(pts, r->st->time_base, NS);
    return 1;
}

static int reader_open_decoder(camrig_media_reader *r, char *error, size_t error_size) {
    if (r->dec) return 0;
    AVCodecParameters *par = r->st->codecpar;
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec) {
        set_error(error, error_size, "no decoder for %s", avcodec_get_name(par->codec_id));
        return AVERROR_DECODER_NOT_FOUND;
    }
    r->dec = avcodec_alloc_context3(codec);
    r->frame = av_frame_alloc();
    r->picture = av_frame_alloc();
    if (!r->dec || !r->frame || !r->picture) {
        set_error(error, error_size, "out of memory");
        return AVERROR(ENOMEM);
    }
    int ret = avcodec_parameters_to_context(r->dec, par);
    if (ret >= 0) {
        r->dec->pkt_timebase = r->st->time_base;
        if (par->codec_id == AV_CODEC_ID_RAWVIDEO) r->dec->pix_fmt = fourcc_pix(r->info.pixel_format);
        ret = avcodec_open2(r->dec, codec, NULL);
    }
    if (ret < 0) {
        set_error(error, error_size, "cannot open the %s decoder: %s", codec->name, ERRSTR(ret));
        avcodec_free_context(&r->dec);
        return ret;
    }
    return 0;
}

// Receives every frame the decoder has; keeps the one with pts `want` (or the last if none has a pts).
static int receive_matching(camrig_media_reader *r, int64_t want, int *found) {
    for (;;) {
        int ret = avcodec_receive_frame(r->dec, r->frame);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return 0;
        if (ret < 0) return ret;
        if (want == AV_NOPTS_VALUE || r->frame->pts == want || r->frame->pts == AV_NOPTS_VALUE) {
            av_frame_unref(r->picture);
            av_frame_move_ref(r->picture, r->frame);
            *found = 1;
        } else {
            av_frame_unref(r->frame);
        }
    }
}

int camrig_media_reader_decode_rgb(camrig_media_reader *r, uint8_t *rgb, char *error, size_t error_size) {
    if (!r || !rgb) return AVERROR(EINVAL);
    if (r->index < 0 || r->gop_n == 0) {
        set_error(error, error_size, "no frame to decode: call next first");
        return AVERROR(EINVAL);
    }
    int ret = reader_open_decoder(r, error, error_size);
    if (ret < 0) return ret;
    int found = 0;
    AVPacket *cur = r->gop[r->gop_n - 1];
    int64_t want = cur->pts;
    if (r->dec_next != r->index) {
        avcodec_flush_buffers(r->dec);
        for (int i = 0; i < r->gop_n - 1; i++) {
            ret = avcodec_send_packet(r->dec, r->gop[i]);
            if (ret >= 0) ret = receive_matching(r, INT64_MIN, &found);
            if (ret < 0) break;
        }
        found = 0;
    }
    if (ret >= 0) ret = avcodec_send_packet(r->dec, cur);
    if (ret >= 0) ret = receive_matching(r, want, &found);
    r->dec_next = r->index + 1;
    if (ret >= 0 && !found) {
        // The decoder holds the picture back (reordering): drain it, then restart next time.
        avcodec_send_packet(r->dec, NULL);
        ret = receive_matching(r, want, &found);
        avcodec_flush_buffers(r->dec);
        r->dec_next = -1;
    }
    if (ret < 0) {
        r->dec_next = -1;
        set_error(error, error_size, "cannot decode frame %lld: %s", (long long)r->index, ERRSTR(ret));
        return ret;
    }
    if (!found) {
        set_error(error, error_size, "frame %lld gave no picture", (long long)r->index);
        return AVERROR_INVALIDDATA;
    }
    AVFrame *p = r->picture;
    enum AVPixelFormat fmt = (enum AVPixelFormat)p->format;
    if (r->force_fmt != AV_PIX_FMT_NONE && fmt == AV_PIX_FMT_GRAY8) fmt = r->force_fmt;
    int w = r->info.width, h = r->info.height;
    r->sws = sws_getCachedContext(r->sws, p->width, p->height, fmt, w, h, AV_PIX_FMT_RGB24,
                                  SWS_BILINEAR | SWS_ACCURATE_RND, NULL, NULL, NULL);
    if (!r->sws) {
        set_error(error, error_size, "cannot convert %s to rgb24", av_get_pix_fmt_name(fmt));
        return AVERROR(EINVAL);
    }
    uint8_t *dst[4] = {rgb, NULL, NULL, NULL};
    int dst_stride[4] = {w * 3, 0, 0, 0};
    sws_scale(r->sws, (const uint8_t *const *)p->data, p->linesize, 0, p->height, dst, dst_stride);
    return 0;
}

// ---------------------------------------------------------------------------------------------------------------
// Repair and range copies.

// Adds the output stream for `in`, a copy of its parameters (with the tag Matroska needs for raw video).
static AVStream *add_copy_stream(out_file *o, camrig_media_reader *in, const AVCodecParameters *par,
                                 char *error, size_t error_size) {
    AVStream *st = avformat_new_stream(o->oc, NULL);
    if (!st) {
        set_error(error, error_size, "out of memory");
        return NULL;
    }
    int ret = avcodec_parameters_copy(st->codecpar, par);
    if (ret < 0) {
        set_error(error, error_size, "cannot copy the stream's parameters: %s", ERRSTR(ret));
        return NULL;
    }
    if (st->codecpar->codec_id == AV_CODEC_ID_RAWVIDEO) {
        enum AVPixelFormat f = fourcc_pix(in->info.pixel_format);
        st->codecpar->format = f;
        st->codecpar->codec_tag = avcodec_pix_fmt_to_codec_tag(f);
        o->oc->strict_std_compliance = FF_COMPLIANCE_UNOFFICIAL;
    } else {
        st->codecpar->codec_tag = 0;
    }
    st->time_base = MS;
    if (in->info.rate_num > 0) {
        st->avg_frame_rate = (AVRational){in->info.rate_num, in->info.rate_den};
        st->r_frame_rate = st->avg_frame_rate;
    }
    av_dict_copy(&st->metadata, in->st->metadata, 0);
    av_dict_set(&st->metadata, "DURATION", NULL, 0);
    av_dict_copy(&o->oc->metadata, in->ic->metadata, 0);
    av_dict_set(&o->oc->metadata, "ENCODER", NULL, 0);
    av_dict_set(&o->oc->metadata, "encoder", NULL, 0);
    return st;
}

static int64_t frame_duration_ms(const camrig_media_info *info) {
    if (info->rate_num <= 0 || info->rate_den <= 0) return 0;
    int64_t d = av_rescale_q(1, (AVRational){info->rate_den, info->rate_num}, MS);
    return d < 1 ? 1 : d;
}

static int copy_packet(out_file *o, AVStream *ost, camrig_media_reader *in, int64_t dur, char *error,
                       size_t error_size) {
    AVPacket *p = av_packet_clone(in->pkt);
    if (!p) {
        set_error(error, error_size, "out of memory");
        return AVERROR(ENOMEM);
    }
    p->stream_index = ost->index;
    p->pos = -1;
    av_packet_rescale_ts(p, in->st->time_base, ost->time_base);
    if (p->duration <= 0) p->duration = av_rescale_q(dur, MS, ost->time_base);
    if (in->info.codec != CAMRIG_MEDIA_H264_PACKETS) p->flags |= AV_PKT_FLAG_KEY;
    int ret = out_write_packet(o, p, error, error_size);
    av_packet_free(&p);
    return ret;
}

int64_t camrig_media_repair(const char *in_path, const char *out_path, char *error, size_t error_size) {
    camrig_media_reader *r = camrig_media_reader_open(in_path, NULL, error, error_size);
    if (!r) return AVERROR_INVALIDDATA;
    out_file o;
    int ret = out_open(&o, out_path, error, error_size);
    int64_t frames = 0;
    AVStream *ost = NULL;
    if (ret >= 0) {
        ost = add_copy_stream(&o, r, r->st->codecpar, error, error_size);
        if (!ost) ret = AVERROR(EINVAL);
    }
    if (ret >= 0) ret = out_write_header(&o, 1000, error, error_size);
    int64_t dur = frame_duration_ms(&r->info);
    char read_error[256];
    while (ret >= 0) {
        int n = camrig_media_reader_next(r, NULL, NULL, NULL, read_error, sizeof read_error);
        if (n <= 0) break; // the end, or where the file was cut: keep what was read
        ret = copy_packet(&o, ost, r, dur, error, error_size);
        if (ret >= 0) frames++;
    }
    int created = o.fd >= 0;
    int r2 = out_close(&o, ret >= 0, ret < 0 && created, ret < 0 ? NULL : error, error_size);
    if (ret >= 0) ret = r2;
    camrig_media_reader_close(r);
    return ret < 0 ? ret : frames;
}

int64_t camrig_media_copy_range(const char *in_path, const char *out_path, int64_t first, int64_t last,
                                char *error, size_t error_size) {
    if (first < 0 || last < first) {
        set_error(error, error_size, "invalid frame range %lld…%lld", (long long)first, (long long)last);
        return AVERROR(EINVAL);
    }
    camrig_media_reader *r = camrig_media_reader_open(in_path, NULL, error, error_size);
    if (!r) return AVERROR_INVALIDDATA;
    out_file o;
    int64_t frames = 0;
    int ret = out_open(&o, out_path, error, error_size);
    AVStream *ost = NULL;
    AVCodecContext *enc = NULL;
    AVFrame *conv = NULL;
    struct SwsContext *sws = NULL;
    AVPacket *epkt = NULL;
    int64_t dur = frame_duration_ms(&r->info);
    int h264 = r->info.codec == CAMRIG_MEDIA_H264_PACKETS;
    if (ret >= 0 && h264) {
        AVRational rate = r->info.rate_num > 0 ? (AVRational){r->info.rate_num, r->info.rate_den} : (AVRational){30, 1};
        enc = open_h264_encoder(r->info.width, r->info.height, rate, 0, 1, 0, error, error_size);
        epkt = av_packet_alloc();
        conv = av_frame_alloc();
        if (!enc || !epkt || !conv) ret = enc ? AVERROR(ENOMEM) : AVERROR_ENCODER_NOT_FOUND;
        if (ret >= 0) ret = reader_open_decoder(r, error, error_size);
        if (ret >= 0) {
            AVCodecParameters *par = avcodec_parameters_alloc();
            if (!par) ret = AVERROR(ENOMEM);
            else {
                avcodec_parameters_from_context(par, enc);
                ost = add_copy_stream(&o, r, par, error, error_size);
                avcodec_parameters_free(&par);
                if (!ost) ret = AVERROR(EINVAL);
            }
        }
    } else if (ret >= 0) {
        ost = add_copy_stream(&o, r, r->st->codecpar, error, error_size);
        if (!ost) ret = AVERROR(EINVAL);
    }
    if (ret >= 0) ret = out_write_header(&o, 1000, error, error_size);

    int64_t index = -1, decoded = 0;
    int at_end = 0;
    while (ret >= 0 && !at_end) {
        int n = camrig_media_reader_next(r, NULL, NULL, NULL, error, error_size);
        if (n < 0) { ret = n; break; }
        if (n == 0) at_end = 1;
        else index++;
        if (!h264) {
            if (at_end) break;
            if (index > last) break;
            if (index < first) continue;
            ret = copy_packet(&o, ost, r, dur, error, error_size);
            if (ret >= 0) frames++;
            continue;
        }
        // H.264: decode in order; re-encode the pictures whose display index is in range.
        ret = avcodec_send_packet(r->dec, at_end ? NULL : r->pkt);
        if (ret < 0) {
            set_error(error, error_size, "cannot decode frame %lld: %s", (long long)index, ERRSTR(ret));
            break;
        }
        for (;;) {
            int d = avcodec_receive_frame(r->dec, r->frame);
            if (d == AVERROR(EAGAIN) || d == AVERROR_EOF) break;
            if (d < 0) {
                ret = d;
                set_error(error, error_size, "cannot decode frame %lld: %s", (long long)index, ERRSTR(d));
                break;
            }
            int64_t k = decoded++;
            if (k >= first && k <= last) {
                AVFrame *src = r->frame;
                if (src->format != AV_PIX_FMT_YUV420P || src->width != enc->width || src->height != enc->height) {
                    if (!conv->data[0]) {
                        conv->format = AV_PIX_FMT_YUV420P;
                        conv->width = enc->width;
                        conv->height = enc->height;
                        ret = av_frame_get_buffer(conv, 0);
                    }
                    sws = sws_getCachedContext(sws, src->width, src->height, src->format, enc->width, enc->height,
                                               AV_PIX_FMT_YUV420P, SWS_BILINEAR, NULL, NULL, NULL);
                    if (ret >= 0) ret = sws ? av_frame_make_writable(conv) : AVERROR(EINVAL);
                    if (ret >= 0)
                        sws_scale(sws, (const uint8_t *const *)src->data, src->linesize, 0, src->height, conv->data,
                                  conv->linesize);
                    conv->pts = src->pts;
                    src = conv;
                }
                int64_t pts = src->pts != AV_NOPTS_VALUE ? src->pts : r->frame->best_effort_timestamp;
                src->pts = av_rescale_q(pts, r->st->time_base, MS);
                src->pict_type = k == first ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE;
                if (ret >= 0) ret = avcodec_send_frame(enc, src);
                src->pict_type = AV_PICTURE_TYPE_NONE;
                if (ret < 0) set_error(error, error_size, "cannot encode frame %lld: %s", (long long)k, ERRSTR(ret));
            }
            av_frame_unref(r->frame);
            if (k >= last && ret >= 0) {
                at_end = 1;
                ret = avcodec_send_frame(enc, NULL);
            }
            while (ret >= 0) {
                int e = avcodec_receive_packet(enc, epkt);
                if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) break;
                if (e < 0) { ret = e; set_error(error, error_size, "encoder failed: %s", ERRSTR(e)); break; }
                epkt->stream_index = ost->index;
                epkt->duration = dur;
                av_packet_rescale_ts(epkt, MS, ost->time_base);
                ret = out_write_packet(&o, epkt, error, error_size);
                av_packet_unref(epkt);
                if (ret >= 0) frames++;
            }
            if (ret < 0 || at_end) break;
        }
        if (at_end && ret >= 0 && decoded <= last) {
            // The input ended before `last`: flush what was encoded.
            ret = avcodec_send_frame(enc, NULL);
            while (ret >= 0) {
                int e = avcodec_receive_packet(enc, epkt);
                if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) break;
                if (e < 0) { ret = e; break; }
                epkt->stream_index = ost->index;
                epkt->duration = dur;
                av_packet_rescale_ts(epkt, MS, ost->time_base);
                ret = out_write_packet(&o, epkt, error, error_size);
                av_packet_unref(epkt);
                if (ret >= 0) frames++;
            }
        }
    }
    int created = o.fd >= 0;
    int r2 = out_close(&o, ret >= 0, ret < 0 && created, ret < 0 ? NULL : error, error_size);
    if (ret >= 0) ret = r2;
    avcodec_free_context(&enc);
    av_frame_free(&conv);
    av_packet_free(&epkt);
    sws_freeContext(sws);
    camrig_media_reader_close(r);
    return ret < 0 ? ret : frames;
}
