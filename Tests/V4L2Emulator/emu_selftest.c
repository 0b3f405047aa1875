/*
 * emu_selftest.c - checks the emulator's interface through libv4l2, the way a
 * V4L2 camera backend uses it.  Run by check.sh with CAMRIG_V4L2_EMULATOR_DIR
 * set to a fresh directory containing video0, video1 and video2 (one node of
 * each kind); the timing checks create nodes of their own (video10..video13).
 *
 * Every check prints "ok" or "FAIL"; the exit status is the number of
 * failures (0 = all passed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libv4l2.h>
#include <math.h>
#include <linux/videodev2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x43524D55u
/* YUYV 640x480 at 1/60 s: 4167 lines of (640 + 160) pixels at 200 MHz. */
#define LINE_640   4000
#define FRAME_60   (4167 * LINE_640)

static int failures;
static char dir[4096];
/* --raw: open with v4l2_fd_open(fd, V4L2_DISABLE_CONVERSION), so libv4l2 adds
 * no emulated formats and passes every call straight to the plugin. */
static bool raw_mode;

static void check(bool cond, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("  %-4s ", cond ? "ok" : "FAIL");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	if (!cond)
		failures++;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int xioctl(int fd, unsigned long req, void *arg)
{
	int r;

	do {
		r = v4l2_ioctl(fd, req, arg);
	} while (r < 0 && errno == EINTR);
	return r < 0 ? errno : 0;
}

static int open_path(const char *path, int flags, bool raw)
{
	if (!raw)
		return v4l2_open(path, flags);
	int fd = open(path, flags);

	if (fd < 0)
		return -1;
	if (v4l2_fd_open(fd, V4L2_DISABLE_CONVERSION) < 0) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

static int open_dev(unsigned n, int flags)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/video%u", dir, n);
	return open_path(path, flags, raw_mode);
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static int set_fmt(int fd, uint32_t fourcc, uint32_t w, uint32_t h, struct v4l2_format *out)
{
	struct v4l2_format f = { .type = V4L2_BUF_TYPE_VIDEO_CAPTURE };

	f.fmt.pix.pixelformat = fourcc;
	f.fmt.pix.width = w;
	f.fmt.pix.height = h;
	int r = xioctl(fd, VIDIOC_S_FMT, &f);

	if (out)
		*out = f;
	return r;
}

static int set_interval(int fd, uint32_t num, uint32_t den, struct v4l2_fract *out)
{
	struct v4l2_streamparm p = { .type = V4L2_BUF_TYPE_VIDEO_CAPTURE };

	p.parm.capture.timeperframe.numerator = num;
	p.parm.capture.timeperframe.denominator = den;
	int r = xioctl(fd, VIDIOC_S_PARM, &p);

	if (out)
		*out = p.parm.capture.timeperframe;
	return r;
}

/* ---- a small MMAP capture helper ---- */

struct cap {
	int fd;
	unsigned n;
	void *mem[32];
	size_t len[32];
};

static int cap_start(struct cap *c, int fd, unsigned count, bool queue, bool streamon)
{
	struct v4l2_requestbuffers rb = { .count = count, .type = V4L2_BUF_TYPE_VIDEO_CAPTURE,
					  .memory = V4L2_MEMORY_MMAP };
	int r;

	memset(c, 0, sizeof(*c));
	c->fd = fd;
	if ((r = xioctl(fd, VIDIOC_REQBUFS, &rb)))
		return r;
	c->n = rb.count;
	for (unsigned i = 0; i < c->n; i++) {
		struct v4l2_buffer b = { .index = i, .type = V4L2_BUF_TYPE_VIDEO_CAPTURE,
					 .memory = V4L2_MEMORY_MMAP };

		if ((r = xioctl(fd, VIDIOC_QUERYBUF, &b)))
			return r;
		c->len[i] = b.length;
		c->mem[i] = v4l2_mmap(NULL, b.length, PROT_READ, MAP_SHARED, fd, b.m.offset);
		if (c->mem[i] == MAP_FAILED)
			return errno;
		if (queue && (r = xioctl(fd, VIDIOC_QBUF, &b)))
			return r;
	}
	if (streamon) {
		int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;

		return xioctl(fd, VIDIOC_STREAMON, &type);
	}
	return 0;
}

static int dqbuf(int fd, struct v4l2_buffer *b)
{
	memset(b, 0, sizeof(*b));
	b->type = V4L2_BUF_TYPE_VIDEO_CAPTURE;
	b->memory = V4L2_MEMORY_MMAP;
	return xioctl(fd, VIDIOC_DQBUF, b);
}

static int qbuf(int fd, unsigned idx)
{
	struct v4l2_buffer b = { .index = idx, .type = V4L2_BUF_TYPE_VIDEO_CAPTURE,
				 .memory = V4L2_MEMORY_MMAP };

	return xioctl(fd, VIDIOC_QBUF, &b);
}

static void cap_stop(struct cap *c)
{
	int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;
	struct v4l2_requestbuffers rb = { .count = 0, .type = V4L2_BUF_TYPE_VIDEO_CAPTURE,
					  .memory = V4L2_MEMORY_MMAP };

	xioctl(c->fd, VIDIOC_STREAMOFF, &type);
	for (unsigned i = 0; i < c->n; i++)
		if (c->mem[i] && c->mem[i] != MAP_FAILED)
			v4l2_munmap(c->mem[i], c->len[i]);
	xioctl(c->fd, VIDIOC_REQBUFS, &rb);
	c->n = 0;
}

static int open_dev_path(const char *path)
{
	return open_path(path, O_RDWR, raw_mode);
}

/* ======================================================================== */

static void test_claiming(void)
{
	char path[4200];
	int fd;

	printf("claiming\n");
	fd = open_dev(0, O_RDWR);
	check(fd >= 0, "video0 in the emulator directory is claimed");
	if (fd >= 0)
		v4l2_close(fd);

	/* A regular file outside the directory: libv4l2's QUERYCAP reaches the
	 * kernel, which says ENOTTY, so v4l2_open() fails. */
	char other[] = "/tmp/camrig-emu-other-XXXXXX";

	if (mkdtemp(other)) {
		snprintf(path, sizeof(path), "%s/video0", other);
		close(open(path, O_CREAT | O_RDWR, 0644));
		errno = 0;
		fd = open_dev_path(path);
		check(fd < 0 && errno == ENOTTY, "video0 outside the directory is not claimed (errno %d)", errno);
		if (fd >= 0)
			v4l2_close(fd);
		/* A symlink inside the directory to that file is not claimed either. */
		snprintf(path, sizeof(path), "%s/video9", dir);
		char target[4200];

		snprintf(target, sizeof(target), "%s/video0", other);
		if (symlink(target, path) == 0) {
			fd = open_dev_path(path);
			check(fd < 0, "symlink in the directory to an outside file is not claimed");
			if (fd >= 0)
				v4l2_close(fd);
			unlink(path);
		}
		unlink(target);
		rmdir(other);
	}
	static const char *bad[] = { "video64", "video00", "videoX", "video0.state", "camera0" };

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, bad[i]);
		bool existed = access(path, F_OK) == 0;

		if (!existed)
			close(open(path, O_CREAT | O_RDWR, 0644));
		fd = open_dev_path(path);
		check(fd < 0, "%s is not claimed", bad[i]);
		if (fd >= 0)
			v4l2_close(fd);
		if (!existed)
			unlink(path);
	}
}

static void test_identity(void)
{
	struct v4l2_capability cap;

	printf("identity\n");
	for (unsigned n = 0; n < 2; n++) {
		int fd = open_dev(n, O_RDWR);
		char card[64], bus[64];

		memset(&cap, 0, sizeof(cap));
		check(fd >= 0 && xioctl(fd, VIDIOC_QUERYCAP, &cap) == 0, "QUERYCAP video%u", n);
		snprintf(card, sizeof(card), "CamRig Emulated Camera %u", n);
		snprintf(bus, sizeof(bus), "platform:camrig-emu-%u", n);
		check(!strcmp((char *)cap.driver, "camrig-emu") && !strcmp((char *)cap.card, card) &&
		      !strcmp((char *)cap.bus_info, bus), "driver/card/bus_info: %s / %s / %s",
		      cap.driver, cap.card, cap.bus_info);
		check((cap.device_caps & (V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_STREAMING | V4L2_CAP_EXT_PIX_FORMAT)) ==
		      (V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_STREAMING | V4L2_CAP_EXT_PIX_FORMAT) &&
		      (cap.capabilities & V4L2_CAP_DEVICE_CAPS), "capabilities 0x%08x device_caps 0x%08x",
		      cap.capabilities, cap.device_caps);
		if (fd >= 0)
			v4l2_close(fd);
	}
}

static void test_formats(void)
{
	struct v4l2_format f;
	struct v4l2_fract iv;
	int r;
	char path[4200];

	/* The plugin's own negotiation: with conversion enabled libv4l2 may
	 * instead emulate e.g. RGB3 from another source format. */
	printf("formats and intervals (libv4l2 conversion disabled)\n");
	snprintf(path, sizeof(path), "%s/video0", dir);
	int fd = open_path(path, O_RDWR, true);

	r = set_fmt(fd, V4L2_PIX_FMT_YUYV, 1000, 700, &f);
	check(r == 0 && f.fmt.pix.width == 1280 &&
	      f.fmt.pix.height == 720 && f.fmt.pix.bytesperline == 2560 &&
	      f.fmt.pix.sizeimage == 2560 * 720 && f.fmt.pix.field == V4L2_FIELD_NONE &&
	      f.fmt.pix.colorspace == V4L2_COLORSPACE_SRGB,
	      "YUYV 1000x700 -> %ux%u bpl %u size %u", f.fmt.pix.width, f.fmt.pix.height,
	      f.fmt.pix.bytesperline, f.fmt.pix.sizeimage);
	r = set_interval(fd, 1, 60, &iv);
	check(r == 0 && iv.numerator == 1 && iv.denominator == 30,
	      "YUYV 1280x720: 1/60 -> %u/%u", iv.numerator, iv.denominator);
	r = set_fmt(fd, V4L2_PIX_FMT_RGB24, 700, 500, &f);
	check(r == 0 && f.fmt.pix.width == 800 &&
	      f.fmt.pix.height == 600 && f.fmt.pix.bytesperline == 2400,
	      "video0 (discrete sizes): RGB3 700x500 -> %ux%u", f.fmt.pix.width, f.fmt.pix.height);
	r = set_interval(fd, 1, 25, &iv);
	check(r == 0 && iv.numerator * 30 == iv.denominator,
	      "RGB3: 1/25 -> %u/%u (nearest k/60)", iv.numerator, iv.denominator);
	r = set_interval(fd, 2, 1, &iv);
	check(r == 0 && iv.numerator == iv.denominator,
	      "RGB3: 2/1 -> %u/%u (max 1 s)", iv.numerator, iv.denominator);
	r = set_fmt(fd, V4L2_PIX_FMT_GREY, 5000, 5000, &f);
	check(r == 0 && f.fmt.pix.width == 1280 &&
	      f.fmt.pix.height == 1024, "GREY 5000x5000 -> %ux%u", f.fmt.pix.width, f.fmt.pix.height);
	r = set_interval(fd, 1, 500, &iv);
	check(r == 0 && iv.numerator == 1 && iv.denominator == 120,
	      "GREY: 1/500 -> %u/%u", iv.numerator, iv.denominator);
	r = set_interval(fd, 3, 100, &iv);
	check(r == 0 && iv.numerator == 3 && iv.denominator == 100,
	      "GREY: 3/100 kept");
	r = set_fmt(fd, V4L2_PIX_FMT_SRGGB8, 1920, 1080, &f);
	check(r == 0 && f.fmt.pix.width == 640 &&
	      f.fmt.pix.height == 480 && f.fmt.pix.pixelformat == V4L2_PIX_FMT_SRGGB8,
	      "RGGB -> 640x480");
	struct v4l2_streamparm p = { .type = V4L2_BUF_TYPE_VIDEO_CAPTURE };

	check(xioctl(fd, VIDIOC_G_PARM, &p) == 0 && p.parm.capture.timeperframe.numerator == 1 &&
	      p.parm.capture.timeperframe.denominator == 90 &&
	      (p.parm.capture.capability & V4L2_CAP_TIMEPERFRAME), "RGGB interval is 1/90");
	check(set_fmt(fd, V4L2_PIX_FMT_MJPEG, 640, 480, &f) == 0 &&
	      f.fmt.pix.pixelformat == V4L2_PIX_FMT_YUYV, "unsupported fourcc -> YUYV");
	r = set_fmt(fd, V4L2_PIX_FMT_YUYV, 640, 480, &f) | set_interval(fd, 1, 30, &iv);
	check(r == 0 &&
	      iv.denominator == 30, "back to YUYV 640x480 @ 1/30");

	/* One kind of frame sizes per node, the same for every format. */
	static const uint32_t fourccs[] = { V4L2_PIX_FMT_YUYV, V4L2_PIX_FMT_RGB24,
					    V4L2_PIX_FMT_GREY, V4L2_PIX_FMT_SRGGB8 };
	static const uint32_t kinds[] = { V4L2_FRMSIZE_TYPE_DISCRETE, V4L2_FRMSIZE_TYPE_STEPWISE,
					  V4L2_FRMSIZE_TYPE_CONTINUOUS };

	for (unsigned node = 0; node < 3; node++) {
		bool kind_ok = true;

		snprintf(path, sizeof(path), "%s/video%u", dir, node);
		int nfd = open_path(path, O_RDWR, true);

		for (unsigned k = 0; k < 4; k++) {
			struct v4l2_frmsizeenum fs = { .index = 0, .pixel_format = fourccs[k] };

			if (xioctl(nfd, VIDIOC_ENUM_FRAMESIZES, &fs) || fs.type != kinds[node])
				kind_ok = false;
		}
		check(kind_ok, "video%u: every format has %s frame sizes", node,
		      node == 0 ? "discrete" : node == 1 ? "stepwise" : "continuous");
		if (node == 1) {
			r = set_fmt(nfd, V4L2_PIX_FMT_RGB24, 100, 100, &f);
			check(r == 0 && f.fmt.pix.width == 96 && f.fmt.pix.height == 104 &&
			      f.fmt.pix.bytesperline == 288,
			      "video1: RGB3 100x100 -> %ux%u (step 16x8 from 64x48)",
			      f.fmt.pix.width, f.fmt.pix.height);
			r = set_interval(nfd, 1, 25, &iv);
			check(r == 0 && iv.numerator * 30 == iv.denominator,
			      "video1: RGB3 1/25 -> %u/%u (stepwise intervals there too)",
			      iv.numerator, iv.denominator);
		}
		if (node == 2) {
			r = set_fmt(nfd, V4L2_PIX_FMT_GREY, 321, 243, &f);
			check(r == 0 && f.fmt.pix.width == 321 && f.fmt.pix.height == 243 &&
			      f.fmt.pix.sizeimage == 321 * 243, "video2: GREY 321x243 kept (continuous)");
			r = set_fmt(nfd, V4L2_PIX_FMT_YUYV, 10, 5000, &f);
			check(r == 0 && f.fmt.pix.width == 32 && f.fmt.pix.height == 1024,
			      "video2: YUYV 10x5000 -> %ux%u", f.fmt.pix.width, f.fmt.pix.height);
			set_fmt(nfd, V4L2_PIX_FMT_YUYV, 640, 480, NULL);
			set_interval(nfd, 1, 30, NULL);
		}
		v4l2_close(nfd);
	}
	struct v4l2_frmivalenum fi = { .index = 0, .pixel_format = V4L2_PIX_FMT_YUYV,
				       .width = 1920, .height = 1080 };
	unsigned n = 0;

	while (xioctl(fd, VIDIOC_ENUM_FRAMEINTERVALS, &fi) == 0 && fi.type == V4L2_FRMIVAL_TYPE_DISCRETE) {
		n++;
		fi.index++;
	}
	check(n == 3, "YUYV 1920x1080 has 3 discrete intervals (%u)", n);
	v4l2_close(fd);
}

struct frame_rec {
	uint32_t seq;
	uint64_t ts;
};

static void test_capture(int fd)
{
	struct cap c;
	struct v4l2_buffer b;
	struct frame_rec rec[30];
	bool hdr_ok = true, differs = true, flags_ok = true;
	uint8_t *prev = malloc(640 * 480 * 2);

	printf("capture (YUYV 640x480 @ 1/60, 4 buffers, 30 frames)\n");
	set_fmt(fd, V4L2_PIX_FMT_YUYV, 640, 480, NULL);
	set_interval(fd, 1, 60, NULL);
	uint64_t t0 = now_ns();
	int r = cap_start(&c, fd, 4, true, true);

	check(r == 0 && c.n == 4, "REQBUFS/QUERYBUF/mmap/QBUF/STREAMON (%s)", strerror(r));
	if (r) {
		free(prev);
		return;
	}
	for (unsigned i = 0; i < 30; i++) {
		r = dqbuf(fd, &b);
		if (r) {
			check(false, "DQBUF %u: %s", i, strerror(r));
			break;
		}
		const uint8_t *p = c.mem[b.index];
		uint64_t ts = (uint64_t)b.timestamp.tv_sec * 1000000000ull + (uint64_t)b.timestamp.tv_usec * 1000;

		rec[i].seq = b.sequence;
		rec[i].ts = le64(p + 8);
		if (le32(p) != MAGIC || le32(p + 4) != b.sequence || rec[i].ts / 1000 != ts / 1000)
			hdr_ok = false;
		if ((b.flags & (V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC | V4L2_BUF_FLAG_TSTAMP_SRC_SOE)) !=
		    (V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC | V4L2_BUF_FLAG_TSTAMP_SRC_SOE) ||
		    (b.flags & (V4L2_BUF_FLAG_DONE | V4L2_BUF_FLAG_QUEUED)) ||
		    b.bytesused != 640 * 480 * 2 || b.field != V4L2_FIELD_NONE)
			flags_ok = false;
		if (i > 0 && memcmp(prev + 16, p + 16, 640 * 480 * 2 - 16) == 0)
			differs = false;
		memcpy(prev, p, 640 * 480 * 2);
		qbuf(fd, b.index);
	}
	uint64_t elapsed = now_ns() - t0;
	bool seq_ok = true, ts_ok = true;

	for (unsigned i = 1; i < 30; i++) {
		if (rec[i].seq != rec[i - 1].seq + 1)
			seq_ok = false;
		int64_t d = (int64_t)(rec[i].ts - rec[i - 1].ts);

		if (d != FRAME_60)
			ts_ok = false;
	}
	check(rec[0].seq == 0 && seq_ok, "sequence 0..29 without gaps");
	check(ts_ok, "timestamps exactly %d ns apart (1/60 s in whole lines; CLOCK_MONOTONIC)", FRAME_60);
	check(rec[0].ts >= t0 && rec[0].ts <= now_ns(), "first timestamp is the STREAMON time");
	check(hdr_ok, "16-byte header: magic, sequence, timestamp match the buffer");
	check(flags_ok, "flags TIMESTAMP_MONOTONIC|TSTAMP_SRC_SOE, no DONE/QUEUED after DQBUF, bytesused, field");
	check(differs, "consecutive frames differ");
	check(elapsed > 440000000ull && elapsed < 700000000ull, "30 frames took %.3f s (expect ~0.483)",
	      elapsed / 1e9);

	/* Non-blocking DQBUF right after a frame: nothing due yet. */
	int fl = fcntl(fd, F_GETFL);

	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	while (dqbuf(fd, &b) == 0)
		qbuf(fd, b.index);   /* drain anything already due */
	r = dqbuf(fd, &b);
	check(r == EAGAIN, "O_NONBLOCK DQBUF with no frame due -> EAGAIN (%s)", strerror(r));
	fcntl(fd, F_SETFL, fl);

	/* Drops: stop requeueing; frames keep coming due, sequence advances. */
	unsigned held[4], nheld = 0;

	while (nheld < 4 && dqbuf(fd, &b) == 0)
		held[nheld++] = b.index;
	uint32_t last = b.sequence;

	sleep_ms(200);   /* ~12 frames due with no buffer queued: all dropped */
	qbuf(fd, held[0]);
	r = dqbuf(fd, &b);
	check(r == 0 && b.sequence >= last + 12, "frames due with no buffer queued are dropped: seq %u -> %u",
	      last, b.sequence);
	for (unsigned i = 1; i < nheld; i++)
		qbuf(fd, held[i]);

	/* REQBUFS(0) while still mapped -> EBUSY (no orphaned buffers). */
	int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;

	xioctl(fd, VIDIOC_STREAMOFF, &type);
	struct v4l2_requestbuffers rb = { .count = 0, .type = V4L2_BUF_TYPE_VIDEO_CAPTURE,
					  .memory = V4L2_MEMORY_MMAP };

	check(xioctl(fd, VIDIOC_REQBUFS, &rb) == EBUSY, "REQBUFS(0) while buffers are mmap()ed -> EBUSY");
	cap_stop(&c);
	set_interval(fd, 1, 30, NULL);
	free(prev);
}

static void test_busy(int fd)
{
	struct cap c;
	int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;

	printf("busy (one owner per device, across fds and processes)\n");
	int r = cap_start(&c, fd, 2, true, true);

	check(r == 0, "first fd streams");
	int fd2 = open_dev(0, O_RDWR);
	struct v4l2_requestbuffers rb = { .count = 2, .type = V4L2_BUF_TYPE_VIDEO_CAPTURE,
					  .memory = V4L2_MEMORY_MMAP };

	check(fd2 >= 0 && xioctl(fd2, VIDIOC_REQBUFS, &rb) == EBUSY, "second fd REQBUFS -> EBUSY");
	check(xioctl(fd2, VIDIOC_STREAMON, &type) == EBUSY, "second fd STREAMON -> EBUSY");
	struct v4l2_format f = { .type = V4L2_BUF_TYPE_VIDEO_CAPTURE };

	xioctl(fd2, VIDIOC_G_FMT, &f);
	check(xioctl(fd2, VIDIOC_S_FMT, &f) == EBUSY, "second fd S_FMT while the first owns buffers -> EBUSY");
	check(set_interval(fd2, 1, 15, NULL) == EBUSY, "second fd S_PARM while the first streams -> EBUSY");

	pid_t pid = fork();

	if (pid == 0) {
		int cfd = open_dev(0, O_RDWR);
		struct v4l2_requestbuffers crb = { .count = 2, .type = V4L2_BUF_TYPE_VIDEO_CAPTURE,
						   .memory = V4L2_MEMORY_MMAP };

		_exit(cfd >= 0 && xioctl(cfd, VIDIOC_REQBUFS, &crb) == EBUSY ? 0 : 1);
	}
	int status = 1;

	waitpid(pid, &status, 0);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "another process REQBUFS -> EBUSY");

	cap_stop(&c);
	rb.count = 2;
	check(xioctl(fd2, VIDIOC_REQBUFS, &rb) == 0, "after REQBUFS(0) on the owner, the second fd can REQBUFS");
	rb.count = 0;
	xioctl(fd2, VIDIOC_REQBUFS, &rb);
	rb.count = 2;
	check(xioctl(fd2, VIDIOC_REQBUFS, &rb) == 0, "second fd owns again");
	v4l2_close(fd2);   /* close ends ownership */
	rb.count = 2;
	check(xioctl(fd, VIDIOC_REQBUFS, &rb) == 0, "after close of the owner, the first fd can REQBUFS");
	rb.count = 0;
	xioctl(fd, VIDIOC_REQBUFS, &rb);
}

struct waiter {
	int fd;
	int result;
	uint64_t returned_at;
};

static void *dq_thread(void *arg)
{
	struct waiter *w = arg;
	struct v4l2_buffer b;

	w->result = dqbuf(w->fd, &b);
	w->returned_at = now_ns();
	return NULL;
}

static void test_unplug(void)
{
	struct cap c;
	char up[4200];
	pthread_t th;
	struct waiter w;

	printf("unplug\n");
	snprintf(up, sizeof(up), "%s/video1.unplugged", dir);
	int fd = open_dev(1, O_RDWR);

	check(fd >= 0 && cap_start(&c, fd, 2, false, true) == 0, "video1 streams (no buffers queued)");
	w.fd = fd;
	w.result = -1;
	pthread_create(&th, NULL, dq_thread, &w);
	sleep_ms(100);
	uint64_t t = now_ns();

	close(open(up, O_CREAT | O_RDWR, 0644));
	pthread_join(th, NULL);
	double ms = (w.returned_at - t) / 1e6;

	check(w.result == ENODEV && ms < 50, "waiting DQBUF -> ENODEV after %.1f ms", ms);
	struct v4l2_capability cap;

	check(xioctl(fd, VIDIOC_QUERYCAP, &cap) == ENODEV, "QUERYCAP -> ENODEV");
	check(open_dev(1, O_RDWR) < 0 && errno == ENODEV, "open while unplugged fails with ENODEV");
	for (unsigned i = 0; i < c.n; i++)
		v4l2_munmap(c.mem[i], c.len[i]);
	v4l2_close(fd);
	unlink(up);
	fd = open_dev(1, O_RDWR);
	check(fd >= 0 && xioctl(fd, VIDIOC_QUERYCAP, &cap) == 0, "after removing .unplugged, open works again");
	struct v4l2_requestbuffers rb = { .count = 2, .type = V4L2_BUF_TYPE_VIDEO_CAPTURE,
					  .memory = V4L2_MEMORY_MMAP };

	check(xioctl(fd, VIDIOC_REQBUFS, &rb) == 0, "and the closed fd's ownership was released");
	rb.count = 0;
	xioctl(fd, VIDIOC_REQBUFS, &rb);
	v4l2_close(fd);
}

static void test_threads(int fd)
{
	struct cap c;
	pthread_t th;
	struct waiter w = { .fd = fd };
	int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;

	printf("threads\n");
	cap_start(&c, fd, 2, false, true);
	pthread_create(&th, NULL, dq_thread, &w);
	sleep_ms(60);
	check(qbuf(fd, 0) == 0, "QBUF from another thread while DQBUF waits");
	pthread_join(th, NULL);
	check(w.result == 0, "the waiting DQBUF gets that buffer");

	pthread_create(&th, NULL, dq_thread, &w);
	sleep_ms(60);
	uint64_t t = now_ns();

	check(xioctl(fd, VIDIOC_STREAMOFF, &type) == 0, "STREAMOFF from another thread");
	pthread_join(th, NULL);
	check(w.result == EINVAL && (w.returned_at - t) < 20000000ull,
	      "the waiting DQBUF returns EINVAL after %.1f ms", (w.returned_at - t) / 1e6);
	cap_stop(&c);

	/* close() while a DQBUF waits: the DQBUF returns, nothing crashes. */
	int fd2 = open_dev(0, O_RDWR);

	cap_start(&c, fd2, 2, false, true);
	for (unsigned i = 0; i < c.n; i++)
		v4l2_munmap(c.mem[i], c.len[i]);
	w.fd = fd2;
	pthread_create(&th, NULL, dq_thread, &w);
	sleep_ms(60);
	v4l2_close(fd2);
	pthread_join(th, NULL);
	check(w.result != 0, "close() while DQBUF waits: DQBUF returns (%s)", strerror(w.result));
}

static int g_ctrl(int fd, uint32_t id, int32_t *v)
{
	struct v4l2_control c = { .id = id };
	int r = xioctl(fd, VIDIOC_G_CTRL, &c);

	*v = c.value;
	return r;
}

static int s_ctrl(int fd, uint32_t id, int32_t v, int32_t *out)
{
	struct v4l2_control c = { .id = id, .value = v };
	int r = xioctl(fd, VIDIOC_S_CTRL, &c);

	if (out)
		*out = c.value;
	return r;
}

static void test_controls(int fd)
{
	int32_t v = 0;
	int r;

	printf("controls\n");
	r = s_ctrl(fd, V4L2_CID_BRIGHTNESS, 300, &v);
	check(r == 0 && v == 255, "S_CTRL brightness 300 clamps to %d", v);
	r = g_ctrl(fd, V4L2_CID_BRIGHTNESS, &v);
	check(r == 0 && v == 255, "G_CTRL brightness = 255");
	r = s_ctrl(fd, V4L2_CID_WHITE_BALANCE_TEMPERATURE, 4605, &v);
	check(r == 0 && (v - 2800) % 10 == 0,
	      "S_CTRL rounds to the step (4605 -> %d)", v);

	struct v4l2_ext_control xc[2] = {
		{ .id = V4L2_CID_CONTRAST, .value = 10 },
		{ .id = V4L2_CID_BRIGHTNESS, .value = 999 },
	};
	struct v4l2_ext_controls xs = { .which = V4L2_CTRL_WHICH_CUR_VAL, .count = 2, .controls = xc };

	r = xioctl(fd, VIDIOC_TRY_EXT_CTRLS, &xs);
	check(r == ERANGE && xs.error_idx == 1,
	      "TRY_EXT_CTRLS out of range -> ERANGE, error_idx 1 (%u)", xs.error_idx);
	r = xioctl(fd, VIDIOC_S_EXT_CTRLS, &xs);
	check(r == ERANGE && xs.error_idx == 2,
	      "S_EXT_CTRLS out of range -> ERANGE, error_idx = count (%u)", xs.error_idx);
	g_ctrl(fd, V4L2_CID_CONTRAST, &v);
	check(v == 128, "nothing was set by the failed S_EXT_CTRLS");
	xc[1].value = 100;
	check(xioctl(fd, VIDIOC_S_EXT_CTRLS, &xs) == 0, "S_EXT_CTRLS contrast+brightness");

	struct v4l2_queryctrl q = { .id = V4L2_CID_EXPOSURE_ABSOLUTE };

	xioctl(fd, VIDIOC_QUERYCTRL, &q);
	check(q.flags & V4L2_CTRL_FLAG_INACTIVE, "exposure_time_absolute INACTIVE while auto exposure is on");
	check(s_ctrl(fd, V4L2_CID_EXPOSURE_AUTO, V4L2_EXPOSURE_AUTO, NULL) == EINVAL,
	      "auto_exposure = AUTO (skipped menu item) -> EINVAL");
	check(s_ctrl(fd, V4L2_CID_EXPOSURE_AUTO, V4L2_EXPOSURE_MANUAL, NULL) == 0, "auto_exposure = MANUAL");
	xioctl(fd, VIDIOC_QUERYCTRL, &q);
	check(!(q.flags & V4L2_CTRL_FLAG_INACTIVE), "exposure_time_absolute active in manual mode");

	struct v4l2_querymenu m = { .id = V4L2_CID_EXPOSURE_AUTO, .index = 0 };

	check(xioctl(fd, VIDIOC_QUERYMENU, &m) == EINVAL, "QUERYMENU auto_exposure 0 -> EINVAL (like UVC)");
	m.index = 3;
	check(xioctl(fd, VIDIOC_QUERYMENU, &m) == 0 && !strcmp((char *)m.name, "Aperture Priority Mode"),
	      "QUERYMENU auto_exposure 3 = %s", m.name);
	m.id = V4L2_CID_LINK_FREQ;
	m.index = 1;
	check(xioctl(fd, VIDIOC_QUERYMENU, &m) == 0 && m.value == 384000000, "integer menu link_frequency[1]");
	check(s_ctrl(fd, V4L2_CID_LINK_FREQ, 0, NULL) == EACCES, "S_CTRL on read-only link_frequency -> EACCES");

	/* Enumerate with NEXT_CTRL: class controls included. */
	unsigned n = 0, classes = 0;
	struct v4l2_query_ext_ctrl qe = { .id = V4L2_CTRL_FLAG_NEXT_CTRL };

	while (xioctl(fd, VIDIOC_QUERY_EXT_CTRL, &qe) == 0) {
		n++;
		classes += qe.type == V4L2_CTRL_TYPE_CTRL_CLASS;
		qe.id |= V4L2_CTRL_FLAG_NEXT_CTRL;
	}
	check(n == 18 && classes == 3, "QUERY_EXT_CTRL enumeration: %u controls, %u classes", n, classes);
	check(s_ctrl(fd, V4L2_CID_VBLANK, 100, NULL) == EINVAL && g_ctrl(fd, V4L2_CID_VBLANK, &v) == EINVAL,
	      "no frame_duration_control: VBLANK -> EINVAL");
	q.id = V4L2_CID_PIXEL_RATE;
	check(xioctl(fd, VIDIOC_QUERYCTRL, &q) == EINVAL, "no frame_duration_control: no PIXEL_RATE");

	/* Shared across processes. */
	struct v4l2_format f;

	set_fmt(fd, V4L2_PIX_FMT_GREY, 1280, 1024, &f);
	s_ctrl(fd, V4L2_CID_BRIGHTNESS, 201, NULL);
	pid_t pid = fork();

	if (pid == 0) {
		int cfd = open_dev(0, O_RDWR);
		struct v4l2_format cf = { .type = V4L2_BUF_TYPE_VIDEO_CAPTURE };
		int32_t cv = 0;

		xioctl(cfd, VIDIOC_G_FMT, &cf);
		g_ctrl(cfd, V4L2_CID_BRIGHTNESS, &cv);
		_exit(cf.fmt.pix.pixelformat == V4L2_PIX_FMT_GREY && cf.fmt.pix.width == 1280 && cv == 201 ? 0 : 1);
	}
	int status = 1;

	waitpid(pid, &status, 0);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "another process sees format GREY 1280x1024 and brightness 201 (videoN.state)");

	/* Restore defaults. */
	set_fmt(fd, V4L2_PIX_FMT_YUYV, 640, 480, NULL);
	s_ctrl(fd, V4L2_CID_BRIGHTNESS, 128, NULL);
	s_ctrl(fd, V4L2_CID_CONTRAST, 128, NULL);
	s_ctrl(fd, V4L2_CID_EXPOSURE_AUTO, V4L2_EXPOSURE_APERTURE_PRIORITY, NULL);
	s_ctrl(fd, V4L2_CID_WHITE_BALANCE_TEMPERATURE, 4600, NULL);
}

static void test_events(int fd)
{
	struct v4l2_event_subscription sub = { .type = V4L2_EVENT_CTRL, .id = V4L2_CID_BRIGHTNESS,
					       .flags = V4L2_EVENT_SUB_FL_SEND_INITIAL };
	struct v4l2_event ev;

	printf("control events (DQEVENT)\n");
	int fl = fcntl(fd, F_GETFL);

	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	check(xioctl(fd, VIDIOC_SUBSCRIBE_EVENT, &sub) == 0, "SUBSCRIBE_EVENT brightness, SEND_INITIAL");
	sub.id = V4L2_CID_EXPOSURE_ABSOLUTE;
	sub.flags = 0;
	xioctl(fd, VIDIOC_SUBSCRIBE_EVENT, &sub);
	check(xioctl(fd, VIDIOC_DQEVENT, &ev) == 0 && ev.id == V4L2_CID_BRIGHTNESS &&
	      (ev.u.ctrl.changes & V4L2_EVENT_CTRL_CH_VALUE), "initial event");
	check(xioctl(fd, VIDIOC_DQEVENT, &ev) == ENOENT, "then no event pending (ENOENT)");
	s_ctrl(fd, V4L2_CID_BRIGHTNESS, 90, NULL);
	check(xioctl(fd, VIDIOC_DQEVENT, &ev) == ENOENT, "own change: no event without ALLOW_FEEDBACK");
	int fd2 = open_dev(0, O_RDWR);

	s_ctrl(fd2, V4L2_CID_BRIGHTNESS, 91, NULL);
	s_ctrl(fd2, V4L2_CID_EXPOSURE_AUTO, V4L2_EXPOSURE_MANUAL, NULL);
	bool got_val = false, got_flags = false;

	while (xioctl(fd, VIDIOC_DQEVENT, &ev) == 0) {
		if (ev.id == V4L2_CID_BRIGHTNESS && ev.u.ctrl.value == 91)
			got_val = true;
		if (ev.id == V4L2_CID_EXPOSURE_ABSOLUTE && (ev.u.ctrl.changes & V4L2_EVENT_CTRL_CH_FLAGS) &&
		    !(ev.u.ctrl.flags & V4L2_CTRL_FLAG_INACTIVE))
			got_flags = true;
	}
	check(got_val, "value change by another fd -> event");
	check(got_flags, "auto_exposure -> manual: flags event for exposure_time_absolute");
	s_ctrl(fd2, V4L2_CID_BRIGHTNESS, 128, NULL);
	s_ctrl(fd2, V4L2_CID_EXPOSURE_AUTO, V4L2_EXPOSURE_APERTURE_PRIORITY, NULL);
	v4l2_close(fd2);
	sub.type = V4L2_EVENT_ALL;
	xioctl(fd, VIDIOC_UNSUBSCRIBE_EVENT, &sub);
	fcntl(fd, F_SETFL, fl);
}

static void test_read(void)
{
	printf("read()\n");
	int fd = open_dev(0, O_RDWR);
	size_t size = 640 * 480 * 2;
	
	uint8_t *buf = malloc(size);
	ssize_t n = v4l2_read(fd, buf, size);

	check(n == (ssize_t)size && le32(buf) == MAGIC, "read() returns a whole frame with the header");
	n = v4l2_read(fd, buf, size);
	check(n == (ssize_t)size && le32(buf + 4) >= 1, "next read() returns the next frame (seq %u)",
	      le32(buf + 4));
	free(buf);
	v4l2_close(fd);
}

/* ---- sensor timing (videoN.timing, videoN.truth) ---- */

/* A fresh node N: no state, the given timing file, an empty truth log. */
static void make_node(unsigned n, const char *timing)
{
	static const char *const suffixes[] = { "", ".state", ".lock", ".truth", ".timing" };
	char path[4200];

	for (unsigned i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		snprintf(path, sizeof(path), "%s/video%u%s", dir, n, suffixes[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/video%u", dir, n);
	close(open(path, O_CREAT | O_RDWR, 0644));
	snprintf(path, sizeof(path), "%s/video%u.truth", dir, n);
	close(open(path, O_CREAT | O_RDWR, 0644));
	snprintf(path, sizeof(path), "%s/video%u.timing", dir, n);
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(timing, f);
		fclose(f);
	}
}

struct truth {
	uint32_t stream, seq;
	uint64_t start, ts;
	int delivered;
};

/* Reads videoN.truth; *format_ok: every line has the five fields, DELIVERED 0/1. */
static int read_truth(unsigned n, struct truth *out, int max, bool *format_ok)
{
	char path[4200], line[256];
	int k = 0;

	*format_ok = true;
	snprintf(path, sizeof(path), "%s/video%u.truth", dir, n);
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (k < max && fgets(line, sizeof(line), f)) {
		struct truth *t = &out[k];
		char extra;

		if (sscanf(line, "%" SCNu32 " %" SCNu32 " %" SCNu64 " %" SCNu64 " %d %c", &t->stream, &t->seq,
			   &t->start, &t->ts, &t->delivered, &extra) != 5 ||
		    (t->delivered != 0 && t->delivered != 1) || line[strlen(line) - 1] != '\n')
			*format_ok = false;
		k++;
	}
	fclose(f);
	return k;
}

static uint64_t buf_ts_ns(const struct v4l2_buffer *b)
{
	return (uint64_t)b->timestamp.tv_sec * 1000000000ull + (uint64_t)b->timestamp.tv_usec * 1000;
}

#define MAX_TRUTH 8192

/* EOF timestamps, the truth log, the 24-byte header, and VBLANK written by
 * the streaming fd and by another process. */
static void test_eof_vblank(void)
{
	const unsigned node = 10;
	struct cap c;
	struct v4l2_buffer b;
	int32_t v = 0;
	uint64_t hdr_true[64] = { 0 }, buf_ts[64] = { 0 };
	bool eof_flags = true;

	printf("sensor timing: EOF stamps, truth log, VBLANK (video%u)\n", node);
	make_node(node, "# end-of-frame stamps and a vblank control\n"
			"timestamp_source = eof\nframe_duration_control=vblank\nno_such_key=1\n");
	int fd = open_dev(node, O_RDWR);

	set_fmt(fd, V4L2_PIX_FMT_YUYV, 640, 480, NULL);
	set_interval(fd, 1, 60, NULL);
	s_ctrl(fd, V4L2_CID_EXPOSURE_AUTO, V4L2_EXPOSURE_MANUAL, NULL);
	s_ctrl(fd, V4L2_CID_EXPOSURE_ABSOLUTE, 50, NULL);   /* 5 ms */

	struct v4l2_ext_control xc = { .id = V4L2_CID_PIXEL_RATE };
	struct v4l2_ext_controls xs = { .which = V4L2_CTRL_CLASS_IMAGE_PROC, .count = 1, .controls = &xc };

	int r = xioctl(fd, VIDIOC_G_EXT_CTRLS, &xs);

	check(r == 0 && xc.value64 == 200000000, "G_EXT_CTRLS PIXEL_RATE = %" PRId64, (int64_t)xc.value64);
	check(g_ctrl(fd, V4L2_CID_PIXEL_RATE, &v) == EINVAL, "G_CTRL PIXEL_RATE (64-bit) -> EINVAL");
	r = g_ctrl(fd, V4L2_CID_HBLANK, &v);
	check(r == 0 && v == 160 && s_ctrl(fd, V4L2_CID_HBLANK, 100, NULL) == EACCES, "HBLANK 160, read-only");
	r = g_ctrl(fd, V4L2_CID_VBLANK, &v);
	check(r == 0 && v == 4167 - 480, "S_PARM 1/60 at 640x480 set VBLANK %d (4167 lines per frame)", v);

	uint64_t t_on = now_ns();

	r = cap_start(&c, fd, 4, true, true);

	check(r == 0, "stream with 4 buffers");
	uint64_t t_w0 = 0, t_w1 = 0, t_c0 = 0, t_c1 = 0;

	for (unsigned i = 0; i < 18 && !r; i++) {
		if ((r = dqbuf(fd, &b)))
			break;
		if ((b.flags & V4L2_BUF_FLAG_TSTAMP_SRC_MASK) != V4L2_BUF_FLAG_TSTAMP_SRC_EOF ||
		    !(b.flags & V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC))
			eof_flags = false;
		if (b.sequence < 64) {
			hdr_true[b.sequence] = le64((const uint8_t *)c.mem[b.index] + 16);
			buf_ts[b.sequence] = buf_ts_ns(&b);
		}
		qbuf(fd, b.index);
		if (i == 5) {   /* this fd: 1000 more lines per frame */
			t_w0 = now_ns();
			s_ctrl(fd, V4L2_CID_VBLANK, 4167 - 480 + 1000, NULL);
			t_w1 = now_ns();
		}
		if (i == 11) {   /* another process: back to 4167 lines */
			t_c0 = now_ns();
			pid_t pid = fork();

			if (pid == 0) {
				int cfd = open_dev(node, O_RDWR);

				_exit(cfd >= 0 && s_ctrl(cfd, V4L2_CID_VBLANK, 4167 - 480, NULL) == 0 ? 0 : 1);
			}
			waitpid(pid, NULL, 0);
			t_c1 = now_ns();
		}
	}
	check(r == 0, "18 frames dequeued");
	check(eof_flags, "buffer flags TIMESTAMP_MONOTONIC | TSTAMP_SRC_EOF");
	struct v4l2_streamparm p = { .type = V4L2_BUF_TYPE_VIDEO_CAPTURE };

	check(xioctl(fd, VIDIOC_G_PARM, &p) == 0 && p.parm.capture.timeperframe.denominator == 60,
	      "G_PARM still returns the nominal 1/60 after VBLANK writes");
	cap_stop(&c);
	s_ctrl(fd, V4L2_CID_EXPOSURE_AUTO, V4L2_EXPOSURE_APERTURE_PRIORITY, NULL);
	v4l2_close(fd);

	static struct truth t[MAX_TRUTH];
	bool format_ok;
	int n = read_truth(node, t, MAX_TRUTH, &format_ok);
	bool order_ok = n >= 18, eof_ok = true, hdr_ok = true, ts_ok = true;

	for (int k = 0; k < n; k++) {
		if (t[k].seq != (uint32_t)k || t[k].stream != t[0].stream)
			order_ok = false;
		/* EOF = true start + exposure (5 ms) + readout (480 lines) */
		if (t[k].ts != t[k].start + 5000000 + 480 * LINE_640)
			eof_ok = false;
		if (t[k].delivered && k < 64 && buf_ts[k] &&
		    (hdr_true[k] != t[k].start || buf_ts[k] / 1000 != t[k].ts / 1000))
			hdr_ok = false;
		if (t[k].delivered && k < 64 && !buf_ts[k] && k < 17)
			ts_ok = false;
	}
	check(format_ok && order_ok, "truth log: %d lines 'STREAM SEQUENCE TRUE_START_NS TIMESTAMP_NS "
	      "DELIVERED', one stream, sequence 0, 1, 2, ...", n);
	check(eof_ok, "TIMESTAMP_NS = TRUE_START_NS + exposure 5 ms + readout 480 x 4 us");
	check(hdr_ok && ts_ok, "header bytes 16..23 = true start; buffer timestamp = TIMESTAMP_NS");
	check(n > 0 && t[0].start >= t_on && t[0].start < t_on + 5000000, "first frame starts at STREAMON");

	/* Frame durations: start of the next frame minus start of this one. */
	const uint64_t old_d = FRAME_60, new_d = (uint64_t)5167 * LINE_640;
	bool own_ok = true, other_ok = true;
	int first_new = -1, first_back = -1;

	for (int k = 0; k + 1 < n; k++) {
		uint64_t d = t[k + 1].start - t[k].start;

		if (t[k].start < t_w0 && d != old_d)
			own_ok = false;
		if (t[k].start > t_w1 && t[k].start < t_c0 && d != new_d)
			own_ok = false;
		if (first_new < 0 && t[k].start > t_w1)
			first_new = k;
		if (t[k].start > t_c1 + 5000000 && d != old_d)
			other_ok = false;
		if (first_back < 0 && d == old_d && t[k].start > t_c0)
			first_back = k;
	}
	check(own_ok && first_new > 0 && t[first_new - 1].start <= t_w1,
	      "VBLANK from the streaming fd: frames starting before the write last 4167 lines, "
	      "from the next one on 5167");
	check(other_ok && first_back > 0 && t[first_back].start >= t_c0 &&
	      t[first_back].start <= t_c1 + 5000000 + new_d,
	      "VBLANK from another process: every frame starting 5 ms after the write has it "
	      "(the first one started %.2f ms after the write)",
	      first_back > 0 ? ((double)t[first_back].start - (double)t_c1) / 1e6 : -1.0);
}

/* rate_ppm, startup delay and jitter. */
static void test_rate(void)
{
	const unsigned node = 11;
	struct cap c;
	struct v4l2_buffer b;
	uint64_t ts0 = 0, ts60 = 0, first_true = 0;
	bool gaps = false;

	printf("sensor timing: rate_ppm=200, startup delay 30 ms + jitter 5 ms (video%u)\n", node);
	make_node(node, "rate_ppm=200\nstartup_delay_us=30000\nstartup_jitter_us=5000\n");
	int fd = open_dev(node, O_RDWR);

	set_fmt(fd, V4L2_PIX_FMT_YUYV, 640, 480, NULL);
	set_interval(fd, 1, 60, NULL);
	uint64_t t0 = now_ns();
	int r = cap_start(&c, fd, 4, true, true);
	uint64_t t1 = now_ns();

	for (unsigned i = 0; i <= 60 && !r; i++) {
		if ((r = dqbuf(fd, &b)))
			break;
		if (b.sequence != i)
			gaps = true;
		if (i == 0) {
			ts0 = buf_ts_ns(&b);
			first_true = le64((const uint8_t *)c.mem[b.index] + 16);
		}
		if (i == 60)
			ts60 = buf_ts_ns(&b);
		qbuf(fd, b.index);
	}
	cap_stop(&c);
	v4l2_close(fd);
	check(r == 0 && !gaps, "61 frames, no drops");
	double ppm = ((double)(ts60 - ts0) / 60.0 / (double)FRAME_60 - 1.0) * 1e6;

	check(fabs(ppm - 200.0) <= 10.0, "mean period over 60 frames: %+.1f ppm (configured +200)", ppm);
	double delay = ((double)first_true - (double)t0) / 1e6;

	check(first_true >= t0 + 30000000 && first_true <= t1 + 35000000,
	      "first frame starts %.3f ms after STREAMON (30 + [0, 5) ms)", delay);
}

/* timestamp_jitter_us: Gaussian, truncated at 4 sigma; dropped frames are logged. */
static void test_jitter(void)
{
	const unsigned node = 14;   /* continuous sizes: 32x32 GREY frames of 48 lines */
	struct cap c;
	int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;

	printf("sensor timing: timestamp_jitter_us=200 (video%u, ~21700 frames/s, none queued)\n", node);
	make_node(node, "timestamp_jitter_us=200\nframe_duration_control=vblank\nseed=7\n");
	int fd = open_dev(node, O_RDWR);

	set_fmt(fd, V4L2_PIX_FMT_GREY, 32, 32, NULL);
	s_ctrl(fd, V4L2_CID_VBLANK, 16, NULL);
	int r = cap_start(&c, fd, 2, false, true);

	sleep_ms(100);
	xioctl(fd, VIDIOC_STREAMOFF, &type);
	cap_stop(&c);
	v4l2_close(fd);

	static struct truth t[MAX_TRUTH];
	bool format_ok, dropped = true, period_ok = true;
	int n = read_truth(node, t, MAX_TRUTH, &format_ok);
	double sum = 0, sum2 = 0, worst = 0;

	for (int k = 0; k < n; k++) {
		double x = (double)t[k].ts - (double)t[k].start;

		sum += x;
		sum2 += x * x;
		worst = fmax(worst, fabs(x) / 1000.0);
		dropped &= t[k].delivered == 0;
		if (k && t[k].start - t[k - 1].start != 48 * 960)
			period_ok = false;
	}
	double mean = n ? sum / n / 1000.0 : 0, sd = n > 1 ? sqrt(sum2 / n - (sum / n) * (sum / n)) / 1000.0 : 0;

	check(r == 0 && format_ok && n >= 1000 && dropped && period_ok,
	      "%d dropped frames logged (DELIVERED 0), 48 lines x 960 ns apart", n);
	check(fabs(mean) < 20.0 && sd > 180.0 && sd < 220.0 && worst <= 800.0 + 0.001,
	      "TIMESTAMP_NS - TRUE_START_NS: mean %.1f us, sd %.1f us, max |x| %.1f us (sigma 200, cut at 4 sigma)",
	      mean, sd, worst);
}

int main(int argc, char **argv)
{
	const char *d = getenv("CAMRIG_V4L2_EMULATOR_DIR");

	raw_mode = argc > 1 && !strcmp(argv[1], "--raw");
	printf("emu-selftest (%s)\n", raw_mode ? "libv4l2 conversion disabled" : "libv4l2 default, conversion enabled");

	if (!d) {
		fprintf(stderr, "set CAMRIG_V4L2_EMULATOR_DIR (a directory with video0 and video1)\n");
		return 2;
	}
	if (!realpath(d, dir)) {
		perror(d);
		return 2;
	}
	test_claiming();
	test_identity();
	int fd = open_dev(0, O_RDWR);

	if (fd < 0) {
		perror("open video0");
		return 2;
	}
	test_formats();
	test_capture(fd);
	test_busy(fd);
	test_unplug();
	test_threads(fd);
	test_controls(fd);
	test_events(fd);
	v4l2_close(fd);
	test_read();
	test_eof_vblank();
	test_rate();
	test_jitter();
	printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
	return failures ? 1 : 0;
}
