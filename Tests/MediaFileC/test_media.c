// Tests of CMediaFile: every codec, SIGKILL + repair, reading, range copies, errors; `bench` times 1080p writes.
#define _GNU_SOURCE
#include "camrig_media.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavutil/opt.h>

#define FCC(a, b, c, d) ((uint32_t)(a) | ((uint32_t)(b) << 8) | ((uint32_t)(c) << 16) | ((uint32_t)(d) << 24))
#define YUYV FCC('Y', 'U', 'Y', 'V')
#define RGB3 FCC('R', 'G', 'B', '3')
#define GREY FCC('G', 'R', 'E', 'Y')
#define RGGB FCC('R', 'G', 'G', 'B')
#define MJPG FCC('M', 'J', 'P', 'G')
#define NV12 FCC('N', 'V', '1', '2')

static const int W = 320, H = 240, N = 60;
static const int64_t T0 = 5000123456789LL;
static const int64_t STEP = 33333333LL; // 30 fps
static int failures = 0;
static char dir[256];

static void check(int ok, const char *fmt, ...) {
    va_list a;
    va_start(a, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, a);
    printf("\n");
    va_end(a);
    fflush(stdout);
    if (!ok) failures++;
}

static char *run(const char *fmt, ...) {
    char cmd[2048];
    va_list a;
    va_start(a, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, a);
    va_end(a);
    FILE *f = popen(cmd, "r");
    static char out[1 << 16];
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) pclose(f);
    return out;
}

static int bpp(uint32_t f) { return f == YUYV ? 2 : f == RGB3 ? 3 : 1; }

static void make_raw(uint32_t f, int w, int h, int bpl, int i, uint8_t *buf) {
    int row = w * bpp(f);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < bpl; x++) buf[(size_t)y * bpl + x] = x < row ? (uint8_t)((x / 3 + y + i * 4) & 0xff) : 0xEE;
}

// JPEG or Annex-B H.264 packets made with libavcodec encoders.
typedef struct { AVCodecContext *c; AVFrame *f; AVPacket *p; } enc_t;
static void enc_open(enc_t *e, const char *name, int w, int h) {
    const AVCodec *codec = avcodec_find_encoder_by_name(name);
    e->c = avcodec_alloc_context3(codec);
    e->c->width = w;
    e->c->height = h;
    e->c->time_base = (AVRational){1, 30};
    e->c->pix_fmt = strcmp(name, "mjpeg") == 0 ? AV_PIX_FMT_YUVJ420P : AV_PIX_FMT_YUV420P;
    e->c->gop_size = 30;
    e->c->max_b_frames = 0;
    if (strcmp(name, "libx264") == 0) {
        av_opt_set(e->c->priv_data, "preset", "veryfast", 0);
        av_opt_set(e->c->priv_data, "tune", "zerolatency", 0);
    }
    if (avcodec_open2(e->c, codec, NULL) < 0) { printf("cannot open %s\n", name); exit(2); }
    e->f = av_frame_alloc();
    e->f->format = e->c->pix_fmt;
    e->f->width = w;
    e->f->height = h;
    av_frame_get_buffer(e->f, 0);
    e->p = av_packet_alloc();
}
static AVPacket *enc_frame(enc_t *e, int i) {
    av_frame_make_writable(e->f);
    for (int y = 0; y < e->c->height; y++)
        for (int x = 0; x < e->c->width; x++) e->f->data[0][y * e->f->linesize[0] + x] = (uint8_t)(x + y + 3 * i);
    for (int y = 0; y < e->c->height / 2; y++)
        for (int x = 0; x < e->c->width / 2; x++) {
            e->f->data[1][y * e->f->linesize[1] + x] = (uint8_t)(128 + x / 4);
            e->f->data[2][y * e->f->linesize[2] + x] = (uint8_t)(128 - y / 4);
        }
    e->f->pts = i;
    av_packet_unref(e->p);
    if (avcodec_send_frame(e->c, e->f) < 0 || avcodec_receive_packet(e->c, e->p) < 0) { printf("encode failed\n"); exit(2); }
    return e->p;
}
static void enc_close(enc_t *e) { avcodec_free_context(&e->c); av_frame_free(&e->f); av_packet_free(&e->p); }

static const char *meta[] = {"CAMRIG_CAMERA", "cam-07", "CAMRIG_HOST", "host-a", NULL};

static camrig_media_writer *open_writer(const char *path, camrig_media_codec codec, uint32_t f, int w, int h, int bpl) {
    camrig_media_writer_options o = {.path = path, .codec = codec, .pixel_format = f, .width = w, .height = h,
                                     .bytes_per_line = bpl, .rate_num = 30, .rate_den = 1, .cluster_ms = 1000,
                                     .metadata = meta};
    char err[256];
    camrig_media_writer *wr = camrig_media_writer_open(&o, err, sizeof err);
    if (!wr) printf("open %s: %s\n", path, err);
    return wr;
}

// Writes n frames of the given kind; returns 0 on success. `kill_after` > 0: SIGKILL self after that many.
static int write_file(const char *path, camrig_media_codec codec, uint32_t f, int n, int kill_after) {
    int bpl = (codec == CAMRIG_MEDIA_MJPEG || codec == CAMRIG_MEDIA_H264_PACKETS) ? 0 : W * bpp(f) + 16;
    camrig_media_writer *wr = open_writer(path, codec, f, W, H, bpl);
    if (!wr) return -1;
    enc_t e = {0};
    if (codec == CAMRIG_MEDIA_MJPEG) enc_open(&e, "mjpeg", W, H);
    if (codec == CAMRIG_MEDIA_H264_PACKETS) enc_open(&e, "libx264", W, H);
    uint8_t *buf = malloc((size_t)(bpl ? bpl : 1) * H);
    char err[256];
    for (int i = 0; i < n; i++) {
        int r;
        if (e.c) {
            AVPacket *p = enc_frame(&e, i);
            r = camrig_media_writer_write(wr, p->data, (size_t)p->size, T0 + i * STEP, err, sizeof err);
        } else {
            make_raw(f, W, H, bpl, i, buf);
            r = camrig_media_writer_write(wr, buf, (size_t)bpl * H, T0 + i * STEP, err, sizeof err);
        }
        if (r < 0) { printf("write %s frame %d: %s\n", path, i, err); return -1; }
        if (kill_after && i + 1 == kill_after) raise(SIGKILL);
    }
    if (e.c) enc_close(&e);
    free(buf);
    int r = camrig_media_writer_close(wr, err, sizeof err);
    if (r < 0) printf("close %s: %s\n", path, err);
    return r;
}

static int count_frames(const char *path) {
    const char *o = run("ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 '%s'", path);
    return atoi(o);
}

static void probe_checks(const char *name, const char *path, int frames, const char *codec, const char *pix) {
    char *o = run("ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames,codec_name,pix_fmt,width,height,avg_frame_rate -of default=nw=1 '%s'", path);
    char want[256];
    snprintf(want, sizeof want, "codec_name=%s\n", codec);
    int ok = strstr(o, want) != NULL;
    snprintf(want, sizeof want, "pix_fmt=%s\n", pix);
    ok = ok && strstr(o, want);
    snprintf(want, sizeof want, "nb_read_frames=%d\n", frames);
    ok = ok && strstr(o, want) && strstr(o, "width=320\n") && strstr(o, "height=240\n") && strstr(o, "avg_frame_rate=30/1\n");
    char flat[512];
    snprintf(flat, sizeof flat, "%s", o);
    for (char *c = flat; *c; c++) if (*c == '\n') *c = ' ';
    check(ok, "%s: ffprobe %s", name, flat);
    o = run("ffprobe -v error -select_streams v:0 -show_entries packet=pts_time -of csv=p=0 '%s' | head -1", path);
    double t = atof(o);
    check(t > 5000.1225 && t < 5000.1235, "%s: first pts_time %.3f", name, t);
    o = run("ffprobe -v error -show_entries format_tags=CAMRIG_CAMERA -of csv=p=0 '%s'", path);
    check(strncmp(o, "cam-07", 6) == 0, "%s: global tag CAMRIG_CAMERA=%.*s", name, 6, o);
    o = run("ffmpeg -nostdin -v error -i '%s' -f null - 2>&1", path);
    check(o[0] == 0, "%s: ffmpeg decodes without error%s%.200s", name, o[0] ? ": " : "", o);
}

static void reader_checks(const char *name, const char *path, int frames, int first, camrig_media_codec codec, uint32_t f) {
    char err[256];
    camrig_media_info info;
    camrig_media_reader *r = camrig_media_reader_open(path, &info, err, sizeof err);
    check(r != NULL, "%s: reader opens%s%s", name, r ? "" : ": ", r ? "" : err);
    if (!r) return;
    check(info.width == W && info.height == H && info.codec == codec && info.pixel_format == f &&
              info.rate_num == 30 && info.rate_den == 1,
          "%s: info %dx%d codec %d fourcc 0x%08x rate %d/%d", name, info.width, info.height, info.codec,
          info.pixel_format, info.rate_num, info.rate_den);
    uint8_t *rgb = malloc((size_t)W * H * 3);
    int n = 0, pts_ok = 1, dec_ok = 1, pixels_ok = 1;
    const uint8_t *data;
    size_t size;
    int64_t pts;
    int ret;
    while ((ret = camrig_media_reader_next(r, &data, &size, &pts, err, sizeof err)) == 1) {
        int64_t want_ms = (T0 + (n + first) * STEP + 500000) / 1000000;
        if (pts != want_ms * 1000000 || size == 0) pts_ok = 0;
        if (n % 7 == 0 || n == frames - 1 || n == 1) {
            if (camrig_media_reader_decode_rgb(r, rgb, err, sizeof err) < 0) { dec_ok = 0; printf("  decode %d: %s\n", n, err); }
            else if (f == RGB3) {
                // Lossless paths: the pixel at (5, 7) must be what was written.
                uint8_t src[3];
                for (int c = 0; c < 3; c++) src[c] = (uint8_t)(((5 * 3 + c) / 3 + 7 + (n + first) * 4) & 0xff);
                if (memcmp(rgb + (7 * W + 5) * 3, src, 3) != 0) pixels_ok = 0;
            }
        }
        n++;
    }
    check(ret == 0 && n == frames, "%s: reader returns %d frames (end %d)", name, n, ret);
    check(pts_ok, "%s: reader pts are the written ns rounded to ms", name);
    check(dec_ok, "%s: decode_rgb works", name);
    if (f == RGB3) check(pixels_ok, "%s: decoded RGB is exact", name);
    camrig_media_reader_close(r);
    free(rgb);
}

static int file_has_cues(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    static uint8_t b[1 << 22];
    size_t n = fread(b, 1, sizeof b, fp);
    fclose(fp);
    static const uint8_t cues[4] = {0x1C, 0x53, 0xBB, 0x6B};
    return memmem(b, n, cues, 4) != NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void bench(void) {
    const int bw = 1920, bh = 1080, frames = 30;
    uint8_t *yuyv = malloc((size_t)bw * bh * 2);
    struct { const char *name; camrig_media_codec codec; uint32_t f; int threads; } cases[] = {
        {"FFV1 YUYV threads=1", CAMRIG_MEDIA_FFV1, YUYV, 1}, {"FFV1 YUYV threads=2", CAMRIG_MEDIA_FFV1, YUYV, 2},
        {"FFV1 GREY threads=1", CAMRIG_MEDIA_FFV1, GREY, 1},
        {"H264 libx264 YUYV threads=1", CAMRIG_MEDIA_H264, YUYV, 1}, {"H264 libx264 YUYV threads=2", CAMRIG_MEDIA_H264, YUYV, 2},
        {"RAW YUYV", CAMRIG_MEDIA_RAW, YUYV, 1}, {"RAW RGGB", CAMRIG_MEDIA_RAW, RGGB, 1},
        {"MJPEG packets", CAMRIG_MEDIA_MJPEG, MJPG, 1},
    };
    enc_t e = {0};
    enc_open(&e, "mjpeg", bw, bh);
    AVPacket *jpegs[4];
    for (int i = 0; i < 4; i++) jpegs[i] = av_packet_clone(enc_frame(&e, i));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/bench-%zu.mkv", dir, c);
        camrig_media_writer_options o = {.path = path, .codec = cases[c].codec, .pixel_format = cases[c].f,
                                         .width = bw, .height = bh, .rate_num = 30, .rate_den = 1,
                                         .threads = cases[c].threads};
        camrig_media_writer *w = camrig_media_writer_open(&o, err, sizeof err);
        if (!w) { printf("bench %s: %s\n", cases[c].name, err); failures++; continue; }
        double spent = 0;
        for (int i = 0; i < frames; i++) {
            int r;
            if (cases[c].codec == CAMRIG_MEDIA_MJPEG) {
                double s = now();
                r = camrig_media_writer_write(w, jpegs[i % 4]->data, (size_t)jpegs[i % 4]->size, T0 + i * STEP, err, sizeof err);
                spent += now() - s;
            } else {
                int bpl = bw * bpp(cases[c].f);
                for (int y = 0; y < bh; y++)
                    for (int x = 0; x < bpl; x++) yuyv[(size_t)y * bpl + x] = (uint8_t)((x ^ y) + i * 3 + (rand() & 3));
                double s = now();
                r = camrig_media_writer_write(w, yuyv, (size_t)bpl * bh, T0 + i * STEP, err, sizeof err);
                spent += now() - s;
            }
            if (r < 0) { printf("bench write: %s\n", err); failures++; break; }
        }
        double t1 = now();
        camrig_media_writer_close(w, err, sizeof err);
        double t2 = now();
        long long bytes = atoll(run("stat -c %%s '%s'", path));
        printf("bench %-30s %7.2f ms/frame, close %.1f ms, %.2f MB/frame\n", cases[c].name, spent * 1000 / frames, (t2 - t1) * 1000, bytes / 1e6 / frames);
        unlink(path);
    }
    for (int i = 0; i < 4; i++) av_packet_free(&jpegs[i]);
    enc_close(&e);
    free(yuyv);
}

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "/tmp/camrig-media-test-XXXXXX");
    if (!mkdtemp(dir)) return 2;
    if (argc > 1 && strcmp(argv[1], "bench") == 0) {
        bench();
        run("rm -rf '%s'", dir);
        return failures ? 1 : 0;
    }
    struct { const char *name; camrig_media_codec codec; uint32_t f; const char *ff_codec, *pix; } cases[] = {
        {"mjpeg", CAMRIG_MEDIA_MJPEG, MJPG, "mjpeg", "yuvj420p"},
        {"h264-packets", CAMRIG_MEDIA_H264_PACKETS, 0, "h264", "yuv420p"},
        {"ffv1-yuyv", CAMRIG_MEDIA_FFV1, YUYV, "ffv1", "yuv422p"},
        {"ffv1-rgb3", CAMRIG_MEDIA_FFV1, RGB3, "ffv1", "bgr0"},
        {"ffv1-rggb", CAMRIG_MEDIA_FFV1, RGGB, "ffv1", "gray"},
        {"h264-yuyv", CAMRIG_MEDIA_H264, YUYV, "h264", "yuv420p"},
        {"h264-rggb", CAMRIG_MEDIA_H264, RGGB, "h264", "yuv420p"},
        {"raw-yuyv", CAMRIG_MEDIA_RAW, YUYV, "rawvideo", "yuyv422"},
        {"raw-grey", CAMRIG_MEDIA_RAW, GREY, "rawvideo", "gray"},
        {"raw-rgb3", CAMRIG_MEDIA_RAW, RGB3, "rawvideo", "rgb24"},
        {"raw-rggb", CAMRIG_MEDIA_RAW, RGGB, "rawvideo", "bayer_rggb8"},
    };
    char path[512], out[512], err[256];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(path, sizeof path, "%s/%s.mkv", dir, cases[c].name);
        int r = write_file(path, cases[c].codec, cases[c].f, N, 0);
        check(r == 0, "%s: writes %d frames", cases[c].name, N);
        if (r != 0) continue;
        probe_checks(cases[c].name, path, N, cases[c].ff_codec, cases[c].pix);
        if (cases[c].codec == CAMRIG_MEDIA_H264_PACKETS) {
            // The camera's keyframes (an IDR every 30 frames here) are the file's, and only they, as stored
            // (the demuxer's own parsing, which could add flags, is off): seeking and copy_range start there.
            const char *flags = run("ffprobe -v error -fflags +noparse+nofillin -select_streams v:0 -show_entries packet=flags -of csv=p=0 '%s' | cut -c1 | tr -d '\\n'", path);
            char expected[N + 1];
            for (int i = 0; i < N; i++) expected[i] = i % 30 == 0 ? 'K' : '_';
            expected[N] = 0;
            check(strcmp(flags, expected) == 0, "%s: keyframe flags from FFmpeg's parser: %s", cases[c].name, flags);
        }
        camrig_media_codec rc = cases[c].codec == CAMRIG_MEDIA_H264 ? CAMRIG_MEDIA_H264_PACKETS : cases[c].codec;
        reader_checks(cases[c].name, path, N, 0, rc, rc == CAMRIG_MEDIA_RAW ? cases[c].f : 0);
    }

    // copy_range: intra copy and h264 re-encode.
    const char *range_sources[] = {"ffv1-rgb3", "h264-yuyv", "mjpeg", "raw-rggb"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s.mkv", dir, range_sources[i]);
        snprintf(out, sizeof out, "%s/%s-range.mkv", dir, range_sources[i]);
        int64_t n = camrig_media_copy_range(path, out, 10, 29, err, sizeof err);
        check(n == 20, "copy_range %s 10…29: %lld frames%s%s", range_sources[i], (long long)n, n < 0 ? ": " : "", n < 0 ? err : "");
        if (n != 20) continue;
        int fr = count_frames(out);
        char *o = run("ffprobe -v error -select_streams v:0 -show_entries packet=pts_time,flags -of csv=p=0 '%s' | head -1", out);
        double t = atof(o);
        double want = ((T0 + 10 * STEP + 500000) / 1000000) / 1000.0;
        check(fr == 20 && t > want - 0.0005 && t < want + 0.0005 && strstr(o, "K"),
              "copy_range %s: ffprobe %d frames, first %.3f s keyframe (%.*s)", range_sources[i], fr, t, (int)strcspn(o, "\n"), o);
        o = run("ffmpeg -nostdin -v error -i '%s' -f null - 2>&1", out);
        check(o[0] == 0, "copy_range %s: ffmpeg decodes without error", range_sources[i]);
        reader_checks(range_sources[i], out, 20, 10, i == 1 ? CAMRIG_MEDIA_H264_PACKETS : i == 0 ? CAMRIG_MEDIA_FFV1 : i == 2 ? CAMRIG_MEDIA_MJPEG : CAMRIG_MEDIA_RAW,
                      i == 3 ? RGGB : 0) ;
    }

    // SIGKILL mid-recording, then repair.
    const struct { const char *name; camrig_media_codec codec; uint32_t f; } kills[] = {
        {"ffv1", CAMRIG_MEDIA_FFV1, GREY}, {"h264", CAMRIG_MEDIA_H264, YUYV}, {"mjpeg", CAMRIG_MEDIA_MJPEG, MJPG}};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/killed-%s.mkv", dir, kills[k].name);
        snprintf(out, sizeof out, "%s/repaired-%s.mkv", dir, kills[k].name);
        pid_t pid = fork();
        if (pid == 0) {
            write_file(path, kills[k].codec, kills[k].f, 200, 95);
            _exit(3);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "killed %s: writer died of SIGKILL after 95 frames", kills[k].name);
        int fr = count_frames(path);
        // 95 frames at 30 fps from 5000.123 s: clusters of at most 1000 ms; all but the open one must survive.
        check(fr >= 60 && fr <= 95, "killed %s: ffprobe reads %d of 95 frames", kills[k].name, fr);
        int64_t n = camrig_media_repair(path, out, err, sizeof err);
        int rf = count_frames(out);
        char *o = run("ffprobe -v error -show_entries format=duration,start_time -of csv=p=0 '%s'", out);
        double st = atof(o), d = atof(strchr(o, ',') ? strchr(o, ',') + 1 : o) - st;
        check(n == fr && rf == fr, "repair %s: kept %lld frames, ffprobe reads %d%s%s", kills[k].name, (long long)n, rf, n < 0 ? ": " : "", n < 0 ? err : "");
        check(d > fr / 30.0 - 0.1 && d < fr / 30.0 + 0.1 && file_has_cues(out) && !file_has_cues(path),
              "repair %s: duration %.3f s after start, cues written (killed file had none)", kills[k].name, d);
        o = run("ffmpeg -nostdin -v error -i '%s' -f null - 2>&1", out);
        check(o[0] == 0, "repair %s: ffmpeg decodes without error", kills[k].name);
        o = run("ffprobe -v error -show_entries format_tags=CAMRIG_CAMERA -of csv=p=0 '%s'", out);
        check(strncmp(o, "cam-07", 6) == 0, "repair %s: tags kept", kills[k].name);
    }

    // Errors.
    {
        // A stream of copied H.264 joined mid-GOP: units until a keyframe carrying SPS and PPS are refused,
        // then the file starts at that keyframe and reads back whole.
        snprintf(path, sizeof path, "%s/h264-joined-late.mkv", dir);
        camrig_media_writer *hw = open_writer(path, CAMRIG_MEDIA_H264_PACKETS, 0, W, H, 0);
        enc_t e = {0};
        enc_open(&e, "libx264", W, H);
        int refused = 0, written = 0;
        for (int i = 0; i < 40; i++) {
            AVPacket *p = enc_frame(&e, i);
            if (i < 10) continue; // not seen: the stream was joined at frame 10
            err[0] = 0;
            int r = camrig_media_writer_write(hw, p->data, (size_t)p->size, T0 + i * STEP, err, sizeof err);
            if (r == AVERROR_INVALIDDATA && strstr(err, "keyframe with SPS and PPS")) refused++;
            else if (r == 0) written++;
        }
        enc_close(&e);
        camrig_media_writer_close(hw, err, sizeof err);
        check(refused == 20 && written == 10, "h264 joined mid-GOP: %d units refused until the keyframe, %d written", refused, written);
        check(count_frames(path) == 10, "h264 joined mid-GOP: ffprobe reads the 10 frames from the keyframe on");
    }
    snprintf(path, sizeof path, "%s/ffv1-yuyv.mkv", dir);
    camrig_media_writer_options o = {.path = path, .codec = CAMRIG_MEDIA_FFV1, .pixel_format = YUYV, .width = W,
                                     .height = H, .rate_num = 30, .rate_den = 1};
    err[0] = 0;
    camrig_media_writer *w = camrig_media_writer_open(&o, err, sizeof err);
    check(!w && strstr(err, "File exists"), "existing path refused: \"%s\"", err);
    snprintf(path, sizeof path, "%s/nv12.mkv", dir);
    o.pixel_format = NV12;
    err[0] = 0;
    w = camrig_media_writer_open(&o, err, sizeof err);
    check(!w && strstr(err, "NV12") && access(path, F_OK) != 0, "unsupported pixel format refused: \"%s\"", err);
    snprintf(path, sizeof path, "%s/pts.mkv", dir);
    o.pixel_format = GREY;
    o.codec = CAMRIG_MEDIA_RAW; // frames > 4 KiB, so each keyframe starts a cluster
    w = camrig_media_writer_open(&o, err, sizeof err);
    uint8_t *frame = calloc(1, (size_t)W * H);
    int r1 = camrig_media_writer_write(w, frame, (size_t)W * H, T0, err, sizeof err);
    int r2 = camrig_media_writer_write(w, frame, (size_t)W * H, T0 + 40000, err, sizeof err); // same ms after rounding
    check(r1 == 0 && r2 < 0 && strstr(err, "does not increase"), "non-increasing pts refused: \"%s\"", err);
    int r3 = camrig_media_writer_write(w, frame, (size_t)W * H - 1, T0 + STEP, err, sizeof err);
    check(r3 < 0 && strstr(err, "shorter"), "short raw frame refused: \"%s\"", err);
    int64_t bytes0 = camrig_media_writer_bytes(w);
    int r4 = camrig_media_writer_write(w, frame, (size_t)W * H, T0 + STEP, err, sizeof err); // closes cluster 1
    int64_t bytes = camrig_media_writer_bytes(w);
    int rc = camrig_media_writer_close(w, err, sizeof err);
    check(r4 == 0 && rc == 0 && bytes0 < W * H && bytes > W * H && count_frames(path) == 2,
          "writer usable after errors; bytes() counts closed clusters only (%lld, then %lld)", (long long)bytes0, (long long)bytes);
    free(frame);
    snprintf(out, sizeof out, "%s/ffv1-rgb3.mkv", dir);
    int64_t n = camrig_media_copy_range(out, path, 0, 1, err, sizeof err);
    check(n < 0 && strstr(err, "File exists"), "copy_range to an existing path refused: \"%s\"", err);

    run("rm -rf '%s'", dir);
    printf("%s (%d failures)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
