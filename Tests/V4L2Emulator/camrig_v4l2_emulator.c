/*
 * camrig_v4l2_emulator.c - an emulated V4L2 capture device, as a libv4l2 plugin.
 *
 * Purpose
 * -------
 * Lets the CamRig V4L2 camera backend (and tools such as v4l2-ctl -w and
 * v4l2-compliance -w) be tested on machines that have no /dev/video* node and
 * cannot load vivid or v4l2loopback.  libv4l2 dlopen()s every plugin in
 * /usr/lib/x86_64-linux-gnu/libv4l/plugins/ and offers it each fd opened with
 * v4l2_open()/v4l2_fd_open().  This plugin claims an fd iff it refers to a
 * regular file named videoN (N = 0..63) in the emulator directory
 * ($CAMRIG_V4L2_EMULATOR_DIR, else /dev/shm/camrig-v4l2); every v4l2_ioctl()
 * on such an fd is then answered here, as a UVC-like camera driver built on
 * videobuf2 would answer it: MMAP streaming (and read()), formats, frame
 * intervals, controls, control events, inputs and priorities.
 *
 * Files of device N, all in the emulator directory
 * ------------------------------------------------
 *   videoN            the "device node" (create it with touch).  Buffer memory
 *                     lives in this file: buffer i is at offset
 *                     i * page_align(sizeimage); v4l2_mmap() maps the file
 *                     itself, and frames are written into it with pwrite().
 *   videoN.unplugged  if it exists, every ioctl fails with ENODEV (also a
 *                     DQBUF that is already waiting).
 *   videoN.lock       flock()ed (LOCK_EX) by the fd that owns the buffers;
 *                     another fd's REQBUFS/STREAMON/QBUF/DQBUF gets EBUSY.
 *   videoN.state      format, frame interval and control values, shared by
 *                     every fd and process that opens the device.
 *   videoN.timing     optional, written by the user: the sensor's timing
 *                     errors (read at open and at every STREAMON; section 7).
 *   videoN.truth      optional, created by the user: one line per frame
 *                     with its true start of exposure (section 7).
 * The lock and state files are created on first use (mode 0666), so the
 * directory must be writable by the users of the emulator (e.g. 1777), or
 * they must exist already.  If videoN.state cannot be opened read-write, the
 * state is kept per process (seeded from the file when readable).
 *
 * Node kinds
 * ----------
 * Every node has the same formats and kinds of intervals; the kind of frame
 * sizes (discrete, stepwise, continuous) is N % 3 of videoN (section 2).
 *
 * Frames
 * ------
 * Each node is a free-running image sensor (section 7): frames follow each
 * other by (height + vblank) lines of (width + 160) pixels at 200 MHz, with
 * the oscillator error, startup delay and timestamp noise of videoN.timing.
 * A frame takes the oldest buffer queued by the time it starts exposing,
 * or is dropped if there is none (the sequence still counts it); the buffer
 * is ready at the frame's end (start + exposure + readout).  It shows the
 * selected test pattern with a white band moving down 4 rows per frame, and
 * starts with a 24-byte little-endian header: u32 0x43524D55 ("UMRC"),
 * u32 sequence, u64 timestamp in ns, u64 true start of exposure in ns.
 * Frames are produced lazily, when DQBUF/QBUF/read()/poll look at the clock;
 * a DQBUF that has to wait sleeps in steps of at most 5 ms, checking for
 * STREAMOFF, close() and unplugging in between.
 *
 * Debugging: CAMRIG_V4L2_EMULATOR_DEBUG=1 logs every ioctl to stderr.
 *
 * Layout of this file
 * -------------------
 *   1. constants, small helpers
 *   2. format table (sizes, intervals) and format negotiation
 *   3. control table and control validation
 *   4. persistent device state (videoN.state)
 *   5. per-fd handle, process-wide registry (priorities)
 *   6. frame generation (test pattern + 16-byte header)
 *   7. buffer queue, sensor timing and frame pacing
 *   8. ioctl handlers, grouped by topic
 *   9. plugin entry points (init/close/ioctl/read/write), the exported
 *      struct libv4l_dev_ops libv4l2_plugin and camrig_v4l2_emulator_poll()
 *
 * Limitations, by construction
 * ----------------------------
 *   - poll()/select()/epoll on the fd go straight to the kernel, which sees a
 *     regular file: it is always "readable" and never signals POLLPRI, and
 *     epoll_ctl() refuses it (EPERM).  Use blocking DQBUF/DQEVENT, or
 *     O_NONBLOCK + retry on EAGAIN/ENOENT.  The LD_PRELOAD shim for the
 *     v4l-utils tools answers them through camrig_v4l2_emulator_poll().
 *   - Priorities (G/S_PRIORITY) are tracked per process, not across
 *     processes.  Format, interval, controls and buffer ownership are shared
 *     across processes.
 *   - Control events are generated lazily by comparing the current state with
 *     what the subscriber last saw, so changes made by other processes are
 *     reported too, but only when that fd next calls DQEVENT (or is polled).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <linux/videodev2.h>
#include <libv4l-plugin.h>

/* ======================================================================== */
/* 1. Constants and small helpers                                           */
/* ======================================================================== */

#define EMU_ENV_DIR        "CAMRIG_V4L2_EMULATOR_DIR"
#define EMU_DEFAULT_DIR    "/dev/shm/camrig-v4l2"
#define EMU_MAX_DEVICES    64
#define EMU_DRIVER         "camrig-emu"
#define EMU_MIN_BUFFERS    2
#define EMU_MAX_BUFFERS    32
#define EMU_MAX_EVENTS     64
#define EMU_READ_BUFFERS   4                        /* buffers behind read() */
#define EMU_WAIT_STEP_NS   (5ull * 1000 * 1000)     /* longest single sleep */
#define EMU_FRAME_MAGIC    0x43524D55u              /* "UMRC" little-endian */
#define EMU_HEADER_BYTES   24
#define NSEC_PER_SEC       1000000000ull

/* Sensor timing (section 7): a fixed pixel clock and line length per size. */
#define EMU_PIXEL_RATE     200000000                /* pixels per second */
#define EMU_NS_PER_PIXEL   5                        /* 1e9 / EMU_PIXEL_RATE */
#define EMU_HBLANK         160                      /* pixels; line length = width + hblank */
#define EMU_VBLANK_MIN     16                       /* lines */
#define EMU_VBLANK_MAX     1048575
#define EMU_VBLANK_DEFAULT 7853                     /* 640x480 @ 1/30: 8333 lines - 480 */
#define EMU_EXPOSURE_DEFAULT 156                    /* exposure_time_absolute, 100 us units */
#define EMU_MAX_INFLIGHT   16                       /* frames started, not yet finished */

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void sleep_until_ns(uint64_t t)
{
	struct timespec ts = {
		.tv_sec = (time_t)(t / NSEC_PER_SEC),
		.tv_nsec = (long)(t % NSEC_PER_SEC),
	};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static bool file_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static void copy_str(void *dst, size_t size, const char *src)
{
	/* Fixed-size, NUL-padded string fields as the kernel fills them. */
	size_t n = strnlen(src, size - 1);

	memset(dst, 0, size);
	memcpy(dst, src, n);
}

static uint32_t gcd_u32(uint32_t a, uint32_t b)
{
	while (b) {
		uint32_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint8_t clamp_u8(int v)
{
	return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* ======================================================================== */
/* 2. Formats                                                               */
/* ======================================================================== */

struct emu_fract {
	uint32_t num, den;             /* seconds per frame = num / den */
};

struct emu_size {
	uint32_t width, height;
	const struct emu_fract *intervals;   /* own discrete intervals, fastest first (or none) */
	unsigned n_intervals;
};

enum emu_kind { EMU_DISCRETE, EMU_STEPWISE, EMU_CONTINUOUS };

struct emu_format {
	uint32_t fourcc;
	const char *description;        /* as the kernel's v4l_fill_fmtdesc() */
	uint32_t bytes_per_pixel;
	enum emu_kind size_kind;
	/* EMU_DISCRETE sizes */
	const struct emu_size *sizes;
	unsigned n_sizes;
	/* EMU_STEPWISE / EMU_CONTINUOUS sizes */
	uint32_t min_w, max_w, step_w, min_h, max_h, step_h;
	/* Intervals of every size without its own list: EMU_DISCRETE
	 * (intervals[]), EMU_STEPWISE or EMU_CONTINUOUS (min, max, step). */
	enum emu_kind ival_kind;
	const struct emu_fract *intervals;
	unsigned n_intervals;
	struct emu_fract ival_min, ival_max, ival_step;
};

/*
 * Node kinds.  Each node offers the same four formats with the same kinds of
 * frame intervals (YUYV and RGGB discrete, RGB3 stepwise, GREY continuous);
 * the kind of frame sizes depends on N % 3 of videoN, the same for every
 * format of the node.  That keeps libv4lconvert's merged size lists (RGB3,
 * BGR3, YU12, YV12 with conversion on) valid: one kind per list, and one
 * shared range on the stepwise and continuous nodes.  Every size can run
 * every listed interval (see frame timing in section 7).
 */
enum { EMU_NODE_DISCRETE, EMU_NODE_STEPWISE, EMU_NODE_CONTINUOUS, EMU_NODE_KINDS };
#define EMU_NUM_FORMATS 4

static const struct emu_fract yuyv_ivals[] = { { 1, 60 }, { 1, 30 }, { 1, 15 } };
static const struct emu_fract yuyv_720p_ivals[] = { { 1, 30 }, { 1, 15 } };
static const struct emu_fract yuyv_1080p_ivals[] = { { 1, 30 }, { 1, 15 }, { 1, 5 } };
static const struct emu_fract bayer_ivals[] = { { 1, 90 } };

static const struct emu_size yuyv_sizes[] = {
	{ 640, 480, yuyv_ivals, ARRAY_SIZE(yuyv_ivals) },
	{ 1280, 720, yuyv_720p_ivals, ARRAY_SIZE(yuyv_720p_ivals) },
	{ 1920, 1080, yuyv_1080p_ivals, ARRAY_SIZE(yuyv_1080p_ivals) },
};
static const struct emu_size rgb_sizes[] = {
	{ 320, 240, NULL, 0 }, { 800, 600, NULL, 0 }, { 1920, 1080, NULL, 0 },
};
static const struct emu_size grey_sizes[] = {
	{ 640, 480, NULL, 0 }, { 1280, 1024, NULL, 0 },
};
static const struct emu_size bayer_sizes[] = {
	{ 640, 480, NULL, 0 },
};

#define YUYV_FORMAT	.fourcc = V4L2_PIX_FMT_YUYV, .description = "YUYV 4:2:2",		\
			.bytes_per_pixel = 2, .ival_kind = EMU_DISCRETE,			\
			.intervals = yuyv_ivals, .n_intervals = ARRAY_SIZE(yuyv_ivals)
#define RGB3_FORMAT	.fourcc = V4L2_PIX_FMT_RGB24, .description = "24-bit RGB 8-8-8",	\
			.bytes_per_pixel = 3, .ival_kind = EMU_STEPWISE,			\
			.ival_min = { 1, 60 }, .ival_max = { 1, 1 }, .ival_step = { 1, 60 }
#define GREY_FORMAT	.fourcc = V4L2_PIX_FMT_GREY, .description = "8-bit Greyscale",	\
			.bytes_per_pixel = 1, .ival_kind = EMU_CONTINUOUS,			\
			.ival_min = { 1, 120 }, .ival_max = { 1, 1 }, .ival_step = { 1, 1 }
#define RGGB_FORMAT	.fourcc = V4L2_PIX_FMT_SRGGB8, .description = "8-bit Bayer RGRG/GBGB",	\
			.bytes_per_pixel = 1, .ival_kind = EMU_DISCRETE,			\
			.intervals = bayer_ivals, .n_intervals = ARRAY_SIZE(bayer_ivals)
#define DISCRETE(list)	.size_kind = EMU_DISCRETE, .sizes = list, .n_sizes = ARRAY_SIZE(list)
/* Stepwise nodes: one grid for every format. */
#define STEPWISE	.size_kind = EMU_STEPWISE,						\
			.min_w = 64, .max_w = 1280, .step_w = 16, .min_h = 48, .max_h = 1024, .step_h = 8
/* Continuous nodes: one range for every format (32x32 can still run 1 s frames). */
#define CONTINUOUS	.size_kind = EMU_CONTINUOUS,						\
			.min_w = 32, .max_w = 1280, .step_w = 1, .min_h = 32, .max_h = 1024, .step_h = 1

static const struct emu_format emu_formats[EMU_NODE_KINDS][EMU_NUM_FORMATS] = {
	[EMU_NODE_DISCRETE] = {
		{ YUYV_FORMAT, DISCRETE(yuyv_sizes) },
		{ RGB3_FORMAT, DISCRETE(rgb_sizes) },
		{ GREY_FORMAT, DISCRETE(grey_sizes) },
		{ RGGB_FORMAT, DISCRETE(bayer_sizes) },
	},
	[EMU_NODE_STEPWISE] = {
		{ YUYV_FORMAT, STEPWISE }, { RGB3_FORMAT, STEPWISE },
		{ GREY_FORMAT, STEPWISE }, { RGGB_FORMAT, STEPWISE },
	},
	[EMU_NODE_CONTINUOUS] = {
		{ YUYV_FORMAT, CONTINUOUS }, { RGB3_FORMAT, CONTINUOUS },
		{ GREY_FORMAT, CONTINUOUS }, { RGGB_FORMAT, CONTINUOUS },
	},
};

#define EMU_DEFAULT_FOURCC  V4L2_PIX_FMT_YUYV
#define EMU_DEFAULT_WIDTH   640
#define EMU_DEFAULT_HEIGHT  480
static const struct emu_fract emu_default_interval = { 1, 30 };

/* The format table of device N. */
static const struct emu_format *node_formats(unsigned index)
{
	return emu_formats[index % EMU_NODE_KINDS];
}

static const struct emu_format *find_format(const struct emu_format *table, uint32_t fourcc)
{
	for (unsigned i = 0; i < EMU_NUM_FORMATS; i++)
		if (table[i].fourcc == fourcc)
			return &table[i];
	return NULL;
}

static const struct emu_size *find_discrete_size(const struct emu_format *f,
						 uint32_t w, uint32_t h)
{
	if (f->size_kind != EMU_DISCRETE)
		return NULL;
	for (unsigned i = 0; i < f->n_sizes; i++)
		if (f->sizes[i].width == w && f->sizes[i].height == h)
			return &f->sizes[i];
	return NULL;
}

/* The discrete intervals of size w x h (NULL if they are stepwise/continuous). */
static const struct emu_fract *discrete_intervals(const struct emu_format *f, uint32_t w,
						  uint32_t h, unsigned *n)
{
	if (f->size_kind == EMU_DISCRETE) {
		const struct emu_size *s = find_discrete_size(f, w, h);

		if (!s)
			s = &f->sizes[0];
		if (s->n_intervals) {
			*n = s->n_intervals;
			return s->intervals;
		}
	}
	if (f->ival_kind != EMU_DISCRETE)
		return NULL;
	*n = f->n_intervals;
	return f->intervals;
}

static uint32_t clamp_step(uint32_t v, uint32_t min, uint32_t max, uint32_t step)
{
	if (v <= min)
		return min;
	if (v >= max)
		return max;
	uint32_t k = (v - min + step / 2) / step;
	uint32_t r = min + k * step;

	return r > max ? max : r;
}

/* Round a requested size to the nearest supported one, as drivers do. */
static void adjust_size(const struct emu_format *f, uint32_t *w, uint32_t *h)
{
	if (f->size_kind == EMU_DISCRETE) {
		/* Same metric as the kernel's v4l2_find_nearest_size(). */
		const struct emu_size *best = &f->sizes[0];
		uint64_t best_err = UINT64_MAX;

		for (unsigned i = 0; i < f->n_sizes; i++) {
			int64_t dw = (int64_t)f->sizes[i].width - *w;
			int64_t dh = (int64_t)f->sizes[i].height - *h;
			uint64_t err = (uint64_t)llabs(dw) + (uint64_t)llabs(dh);

			if (err < best_err) {
				best_err = err;
				best = &f->sizes[i];
			}
		}
		*w = best->width;
		*h = best->height;
		return;
	}
	*w = clamp_step(*w, f->min_w, f->max_w, f->step_w);
	*h = clamp_step(*h, f->min_h, f->max_h, f->step_h);
}

static bool size_is_valid(const struct emu_format *f, uint32_t w, uint32_t h)
{
	uint32_t aw = w, ah = h;

	adjust_size(f, &aw, &ah);
	return aw == w && ah == h;
}

/* Compare a/b with c/d without floating point: <0, 0, >0. */
static int fract_cmp(struct emu_fract a, struct emu_fract b)
{
	uint64_t l = (uint64_t)a.num * b.den, r = (uint64_t)b.num * a.den;

	return l < r ? -1 : l > r;
}

static double fract_to_double(struct emu_fract f)
{
	return (double)f.num / (double)f.den;
}

static struct emu_fract fract_reduce(struct emu_fract f)
{
	uint32_t g = gcd_u32(f.num, f.den);

	if (g > 1) {
		f.num /= g;
		f.den /= g;
	}
	return f;
}

/*
 * The supported interval nearest to @want for format @f at size w x h.
 * A zero numerator or denominator means "the default" (1/30, or nearest).
 */
static struct emu_fract nearest_interval(const struct emu_format *f, uint32_t w,
					 uint32_t h, struct emu_fract want)
{
	unsigned n = 0;
	const struct emu_fract *list;

	if (want.num == 0 || want.den == 0)
		want = emu_default_interval;
	want = fract_reduce(want);

	if ((list = discrete_intervals(f, w, h, &n))) {
		double t = fract_to_double(want), best_err = 1e300;
		struct emu_fract best = list[0];

		for (unsigned i = 0; i < n; i++) {
			double err = fract_to_double(list[i]) - t;

			if (err < 0)
				err = -err;

			if (err < best_err) {
				best_err = err;
				best = list[i];
			}
		}
		return best;
	}
	if (fract_cmp(want, f->ival_min) < 0)
		return f->ival_min;
	if (fract_cmp(want, f->ival_max) > 0)
		return f->ival_max;
	if (f->ival_kind == EMU_CONTINUOUS)
		return want;
	/* Stepwise: min + k * step, with min and step sharing a denominator. */
	{
		double t = fract_to_double(want);
		double k = (t - fract_to_double(f->ival_min)) / fract_to_double(f->ival_step);
		uint64_t kk = (uint64_t)(k + 0.5);
		struct emu_fract r = {
			f->ival_min.num + (uint32_t)kk * f->ival_step.num,
			f->ival_step.den,
		};

		if (fract_cmp(r, f->ival_max) > 0)
			r = f->ival_max;
		return fract_reduce(r);
	}
}

static bool interval_is_valid(const struct emu_format *f, uint32_t w, uint32_t h,
			      struct emu_fract iv)
{
	if (iv.num == 0 || iv.den == 0)
		return false;
	struct emu_fract n = nearest_interval(f, w, h, iv);

	return fract_cmp(n, iv) == 0;
}

static void fill_pix_format(struct v4l2_pix_format *pix, const struct emu_format *f,
			    uint32_t w, uint32_t h)
{
	memset(pix, 0, sizeof(*pix));
	pix->width = w;
	pix->height = h;
	pix->pixelformat = f->fourcc;
	pix->field = V4L2_FIELD_NONE;
	pix->bytesperline = w * f->bytes_per_pixel;
	pix->sizeimage = pix->bytesperline * h;
	pix->colorspace = V4L2_COLORSPACE_SRGB;
	pix->priv = V4L2_PIX_FMT_PRIV_MAGIC;   /* we advertise V4L2_CAP_EXT_PIX_FORMAT */
	pix->flags = 0;
	pix->ycbcr_enc = V4L2_YCBCR_ENC_DEFAULT;
	pix->quantization = V4L2_QUANTIZATION_DEFAULT;
	pix->xfer_func = V4L2_XFER_FUNC_DEFAULT;
}

/* ======================================================================== */
/* 3. Controls                                                              */
/* ======================================================================== */

struct emu_ctrl {
	uint32_t id;
	uint32_t type;                  /* enum v4l2_ctrl_type */
	const char *name;
	int32_t min, max, step, def;
	uint32_t flags;                 /* static flags */
	uint32_t menu_skip_mask;        /* menu items that QUERYMENU rejects */
	const char *const *menu;        /* V4L2_CTRL_TYPE_MENU item names */
	const int64_t *int_menu;        /* V4L2_CTRL_TYPE_INTEGER_MENU values */
	/* "Manual" control of an auto cluster: INACTIVE while the auto control
	 * auto_id has a value other than manual_value. */
	uint32_t auto_id;
	int32_t manual_value;
	/* Present only on nodes with frame_duration_control=vblank. */
	bool vblank_only;
};

static const char *const power_line_menu[] = {
	"Disabled", "50 Hz", "60 Hz", "Auto",
};
static const char *const exposure_auto_menu[] = {
	"Auto Mode", "Manual Mode", "Shutter Priority Mode", "Aperture Priority Mode",
};
static const char *const test_pattern_menu[] = {
	"Colour Bars", "Horizontal Gradient", "Checkerboard", "Solid Grey",
};
static const int64_t link_freq_menu[] = {
	192000000, 384000000, 456000000,
};

#define CLASS_FLAGS (V4L2_CTRL_FLAG_READ_ONLY | V4L2_CTRL_FLAG_WRITE_ONLY)

/* Sorted by id: enumeration with V4L2_CTRL_FLAG_NEXT_CTRL relies on it. */
static const struct emu_ctrl emu_ctrls[] = {
	{ V4L2_CID_USER_CLASS, V4L2_CTRL_TYPE_CTRL_CLASS, "User Controls",
	  0, 0, 0, 0, CLASS_FLAGS, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_BRIGHTNESS, V4L2_CTRL_TYPE_INTEGER, "Brightness",
	  0, 255, 1, 128, V4L2_CTRL_FLAG_SLIDER, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_CONTRAST, V4L2_CTRL_TYPE_INTEGER, "Contrast",
	  0, 255, 1, 128, V4L2_CTRL_FLAG_SLIDER, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_SATURATION, V4L2_CTRL_TYPE_INTEGER, "Saturation",
	  0, 255, 1, 128, V4L2_CTRL_FLAG_SLIDER, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_HUE, V4L2_CTRL_TYPE_INTEGER, "Hue",
	  -180, 180, 1, 0, V4L2_CTRL_FLAG_SLIDER, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_AUTO_WHITE_BALANCE, V4L2_CTRL_TYPE_BOOLEAN, "White Balance, Automatic",
	  0, 1, 1, 1, V4L2_CTRL_FLAG_UPDATE, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_GAIN, V4L2_CTRL_TYPE_INTEGER, "Gain",
	  0, 255, 1, 0, 0, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_POWER_LINE_FREQUENCY, V4L2_CTRL_TYPE_MENU, "Power Line Frequency",
	  0, 3, 1, 1, 0, 0, power_line_menu, NULL, 0, 0, false },
	{ V4L2_CID_WHITE_BALANCE_TEMPERATURE, V4L2_CTRL_TYPE_INTEGER, "White Balance Temperature",
	  2800, 6500, 10, 4600, 0, 0, NULL, NULL, V4L2_CID_AUTO_WHITE_BALANCE, 0, false },
	{ V4L2_CID_CAMERA_CLASS, V4L2_CTRL_TYPE_CTRL_CLASS, "Camera Controls",
	  0, 0, 0, 0, CLASS_FLAGS, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_EXPOSURE_AUTO, V4L2_CTRL_TYPE_MENU, "Auto Exposure",
	  0, 3, 1, V4L2_EXPOSURE_APERTURE_PRIORITY, V4L2_CTRL_FLAG_UPDATE,
	  (1u << V4L2_EXPOSURE_AUTO) | (1u << V4L2_EXPOSURE_SHUTTER_PRIORITY),
	  exposure_auto_menu, NULL, 0, 0, false },
	{ V4L2_CID_EXPOSURE_ABSOLUTE, V4L2_CTRL_TYPE_INTEGER, "Exposure Time, Absolute",
	  1, 10000, 1, 156, 0, 0, NULL, NULL, V4L2_CID_EXPOSURE_AUTO, V4L2_EXPOSURE_MANUAL, false },
	{ V4L2_CID_FOCUS_ABSOLUTE, V4L2_CTRL_TYPE_INTEGER, "Focus, Absolute",
	  0, 1023, 1, 0, 0, 0, NULL, NULL, V4L2_CID_FOCUS_AUTO, 0, false },
	{ V4L2_CID_FOCUS_AUTO, V4L2_CTRL_TYPE_BOOLEAN, "Focus, Automatic Continuous",
	  0, 1, 1, 1, V4L2_CTRL_FLAG_UPDATE, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_ZOOM_ABSOLUTE, V4L2_CTRL_TYPE_INTEGER, "Zoom, Absolute",
	  100, 500, 1, 100, 0, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_IMAGE_SOURCE_CLASS, V4L2_CTRL_TYPE_CTRL_CLASS, "Image Source Controls",
	  0, 0, 0, 0, CLASS_FLAGS, 0, NULL, NULL, 0, 0, true },
	/* The vblank in effect when a frame starts exposing sets its duration. */
	{ V4L2_CID_VBLANK, V4L2_CTRL_TYPE_INTEGER, "Vertical Blanking",
	  EMU_VBLANK_MIN, EMU_VBLANK_MAX, 1, EMU_VBLANK_DEFAULT, 0, 0, NULL, NULL, 0, 0, true },
	{ V4L2_CID_HBLANK, V4L2_CTRL_TYPE_INTEGER, "Horizontal Blanking",
	  EMU_HBLANK, EMU_HBLANK, 1, EMU_HBLANK, V4L2_CTRL_FLAG_READ_ONLY, 0, NULL, NULL, 0, 0, true },
	{ V4L2_CID_IMAGE_PROC_CLASS, V4L2_CTRL_TYPE_CTRL_CLASS, "Image Processing Controls",
	  0, 0, 0, 0, CLASS_FLAGS, 0, NULL, NULL, 0, 0, false },
	{ V4L2_CID_LINK_FREQ, V4L2_CTRL_TYPE_INTEGER_MENU, "Link Frequency",
	  0, 2, 1, 0, V4L2_CTRL_FLAG_READ_ONLY, 0, NULL, link_freq_menu, 0, 0, false },
	/* 64-bit: G/S_CTRL refuse it (EINVAL), G_EXT_CTRLS reads value64. */
	{ V4L2_CID_PIXEL_RATE, V4L2_CTRL_TYPE_INTEGER64, "Pixel Rate",
	  EMU_PIXEL_RATE, EMU_PIXEL_RATE, 1, EMU_PIXEL_RATE, V4L2_CTRL_FLAG_READ_ONLY, 0, NULL, NULL,
	  0, 0, true },
	{ V4L2_CID_TEST_PATTERN, V4L2_CTRL_TYPE_MENU, "Test Pattern",
	  0, 3, 1, 0, 0, 0, test_pattern_menu, NULL, 0, 0, false },
};

#define EMU_NUM_CTRLS ARRAY_SIZE(emu_ctrls)

static int ctrl_index(uint32_t id)
{
	for (unsigned i = 0; i < EMU_NUM_CTRLS; i++)
		if (emu_ctrls[i].id == id)
			return (int)i;
	return -1;
}

static bool ctrl_is_int64(const struct emu_ctrl *c)
{
	return c->type == V4L2_CTRL_TYPE_INTEGER64;
}

static bool ctrl_is_class(const struct emu_ctrl *c)
{
	return c->type == V4L2_CTRL_TYPE_CTRL_CLASS;
}

static bool menu_item_valid(const struct emu_ctrl *c, int64_t v)
{
	if (v < c->min || v > c->max)
		return false;
	return !(c->menu_skip_mask & (1u << v));
}

/*
 * Validate a value for the control, the way v4l2-ctrls does it:
 * integers are rounded to the step (and clamped if @clamp, else ERANGE when
 * out of range), booleans become 0/1, menus must name a valid item (ERANGE
 * when out of range, EINVAL for a skipped item).
 */
static int ctrl_validate(const struct emu_ctrl *c, int32_t *value, bool clamp)
{
	int64_t v = *value;

	switch (c->type) {
	case V4L2_CTRL_TYPE_INTEGER:
	case V4L2_CTRL_TYPE_INTEGER64:   /* values of our 64-bit control fit 32 bits */
		if (v < c->min || v > c->max) {
			if (!clamp)
				return ERANGE;
			v = v < c->min ? c->min : c->max;
		}
		v = c->min + ((v - c->min + c->step / 2) / c->step) * c->step;
		if (v > c->max)
			v -= c->step;
		*value = (int32_t)v;
		return 0;
	case V4L2_CTRL_TYPE_BOOLEAN:
		*value = v != 0;
		return 0;
	case V4L2_CTRL_TYPE_MENU:
	case V4L2_CTRL_TYPE_INTEGER_MENU:
		if (v < c->min || v > c->max)
			return ERANGE;
		if (c->menu_skip_mask & (1u << v))
			return EINVAL;
		return 0;
	default:
		return EINVAL;
	}
}

/* ======================================================================== */
/* 4. Persistent device state (videoN.state)                                */
/* ======================================================================== */

#define EMU_STATE_MAGIC    0x54534D43u   /* "CMST" */
#define EMU_STATE_VERSION  2

struct emu_state {
	uint32_t magic;
	uint32_t version;
	uint32_t size;                /* sizeof(struct emu_state) */
	uint32_t pixelformat, width, height;
	uint32_t tpf_num, tpf_den;    /* time per frame */
	uint32_t streaming;           /* owner is streaming (valid while videoN.lock is held) */
	uint32_t streams;             /* STREAMONs so far (the truth log's STREAM column) */
	uint64_t vblank_set_ns;       /* CLOCK_MONOTONIC of the last change of the vblank */
	int32_t ctrl[EMU_NUM_CTRLS];  /* indexed like emu_ctrls[] (vblank even when hidden) */
};

static void state_defaults(struct emu_state *st)
{
	memset(st, 0, sizeof(*st));
	st->magic = EMU_STATE_MAGIC;
	st->version = EMU_STATE_VERSION;
	st->size = sizeof(*st);
	st->pixelformat = EMU_DEFAULT_FOURCC;
	st->width = EMU_DEFAULT_WIDTH;
	st->height = EMU_DEFAULT_HEIGHT;
	st->tpf_num = emu_default_interval.num;
	st->tpf_den = emu_default_interval.den;
	for (unsigned i = 0; i < EMU_NUM_CTRLS; i++)
		st->ctrl[i] = emu_ctrls[i].def;
}

/* Repair anything in a loaded state that is not valid (e.g. a foreign file). */
static void state_sanitize(struct emu_state *st, const struct emu_format *table)
{
	if (st->magic != EMU_STATE_MAGIC || st->version != EMU_STATE_VERSION ||
	    st->size != sizeof(*st)) {
		state_defaults(st);
		return;
	}
	const struct emu_format *f = find_format(table, st->pixelformat);

	if (!f) {
		f = find_format(table, EMU_DEFAULT_FOURCC);
		st->pixelformat = f->fourcc;
		st->width = EMU_DEFAULT_WIDTH;
		st->height = EMU_DEFAULT_HEIGHT;
	}
	adjust_size(f, &st->width, &st->height);
	struct emu_fract iv = { st->tpf_num, st->tpf_den };

	if (!interval_is_valid(f, st->width, st->height, iv)) {
		iv = nearest_interval(f, st->width, st->height, iv);
		st->tpf_num = iv.num;
		st->tpf_den = iv.den;
	}
	for (unsigned i = 0; i < EMU_NUM_CTRLS; i++) {
		const struct emu_ctrl *c = &emu_ctrls[i];
		int32_t v = st->ctrl[i];

		if (ctrl_is_class(c))
			st->ctrl[i] = 0;
		else if (ctrl_validate(c, &v, false) || v != st->ctrl[i])
			st->ctrl[i] = c->def;
	}
}

/* ======================================================================== */
/* 5. Per-fd handle and the process-wide registry                           */
/* ======================================================================== */

enum emu_buf_state { BUF_DEQUEUED, BUF_QUEUED, BUF_DONE };

struct emu_buffer {
	enum emu_buf_state state;
	uint64_t queued_ns;             /* when it was queued (QBUF) */
	uint32_t sequence;
	uint64_t timestamp_ns;          /* as reported (jitter, SOE or EOF) */
	uint64_t true_start_ns;         /* true start of exposure */
	uint32_t bytesused;
};

/* videoN.timing: the sensor's timing errors (see section 7). */
struct emu_timing {
	uint64_t seed;                  /* seeds every random draw (default N) */
	double rate_ppm;                /* oscillator rate error */
	double startup_delay_us, startup_jitter_us;
	double timestamp_jitter_us;     /* Gaussian sigma, truncated at 4 sigma */
	bool eof;                       /* timestamp_source=eof (else soe) */
	bool vblank_ctrl;               /* frame_duration_control=vblank */
};

/* A frame that has started exposing and is not yet logged/finished. */
struct emu_frame {
	uint64_t seq;
	uint64_t start_ns;              /* true start of exposure */
	uint64_t ts_ns;                 /* buffer timestamp */
	uint64_t ready_ns;              /* end of frame: start + exposure + readout */
	int buf;                        /* buffer index, or -1 if dropped */
};

struct emu_sub {                    /* control event subscription */
	bool active;
	uint32_t flags;                 /* V4L2_EVENT_SUB_FL_* */
	int32_t seen_value;             /* what the subscriber was last told */
	uint32_t seen_flags;
};

struct emu_handle {
	struct emu_handle *next;        /* registry list, under g_lock */
	int fd;
	unsigned index;                 /* N of videoN */
	dev_t st_dev;
	ino_t st_ino;
	char unplug_path[PATH_MAX];
	char lock_path[PATH_MAX];
	char state_path[PATH_MAX];
	char timing_path[PATH_MAX];
	char truth_path[PATH_MAX];
	const struct emu_format *formats;   /* this node kind's format table */
	struct emu_timing timing;       /* read at open and at every STREAMON */

	pthread_mutex_t lock;           /* protects everything below */
	pthread_cond_t idle;            /* signalled when active_calls drops to 0 */
	unsigned active_calls;
	bool closing;

	uint32_t prio;                  /* V4L2 priority; read/written under g_lock */
	unsigned pollers;               /* camrig_v4l2_emulator_poll() calls; under g_lock */
	int state_fd;                   /* videoN.state, or -1 (then g_mem_state) */
	int lock_fd;                    /* videoN.lock, >= 0 while we own the buffers */
	int data_fd;                    /* read-write fd on the device file */

	/* Buffers (valid while nbufs > 0; the format is fixed while they exist). */
	unsigned nbufs;
	struct emu_buffer bufs[EMU_MAX_BUFFERS];
	uint32_t pixfmt, width, height, bytesperline, sizeimage;
	size_t stride;                  /* page-aligned sizeimage */
	uint8_t *frame;                 /* scratch frame, sizeimage bytes */
	unsigned queue[EMU_MAX_BUFFERS], q_head, q_count;   /* queued, FIFO */
	unsigned done[EMU_MAX_BUFFERS], d_head, d_count;    /* filled, FIFO */

	/* read() I/O: like vb2's "fileio", a private set of EMU_READ_BUFFERS
	 * buffers streams while read() is in use; their data is rendered when
	 * read() copies it out, so nothing is stored in the device file. */
	bool fileio;
	int fileio_cur;                 /* buffer being read, or -1 */
	size_t fileio_pos;              /* bytes of it already returned */

	/* Streaming: the sensor's free-running frame clock (section 7). */
	bool streaming;
	bool ts_eof;                    /* this stream stamps end of frame */
	uint32_t stream_no;             /* STREAM column of the truth log */
	uint64_t rng;                   /* splitmix64 state */
	uint64_t start_ns;              /* STREAMON time */
	uint64_t next_seq;              /* sequence of the next frame to start */
	uint64_t next_start_ns;         /* its true start of exposure ... */
	double next_start_frac;         /* ... plus this fraction of a ns */
	uint32_t vblank;                /* in effect for frames starting now */
	uint64_t vblank_seen_ns;        /* vblank_set_ns of the value in effect */
	uint64_t clock_ns;              /* frames are simulated up to this time */
	struct emu_frame inflight[EMU_MAX_INFLIGHT];
	unsigned f_head, f_count;       /* started frames, in sequence order */

	/* Control events. */
	struct emu_sub subs[EMU_NUM_CTRLS];
	struct v4l2_event events[EMU_MAX_EVENTS];
	unsigned ev_head, ev_count;
	uint32_t ev_sequence;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct emu_handle *g_handles;
/* Fallback state for devices whose videoN.state cannot be opened. */
static struct emu_state g_mem_state[EMU_MAX_DEVICES];
static bool g_mem_state_valid[EMU_MAX_DEVICES];

static bool same_device(const struct emu_handle *a, const struct emu_handle *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

static uint32_t prio_max_locked(const struct emu_handle *h)
{
	uint32_t max = V4L2_PRIORITY_UNSET;

	for (const struct emu_handle *o = g_handles; o; o = o->next)
		if (same_device(o, h) && o->prio > max)
			max = o->prio;
	return max;
}

/* EBUSY if another fd of this device (in this process) has a higher priority. */
static int check_prio(const struct emu_handle *h)
{
	int err;

	pthread_mutex_lock(&g_lock);
	err = h->prio < prio_max_locked(h) ? EBUSY : 0;
	pthread_mutex_unlock(&g_lock);
	return err;
}

/* Is control i offered by this node (the timing controls only with
 * frame_duration_control=vblank)? */
static bool ctrl_visible(const struct emu_handle *h, int i)
{
	return i >= 0 && (!emu_ctrls[i].vblank_only || h->timing.vblank_ctrl);
}

/* Index of a control this node offers, or -1. */
static int ctrl_find(const struct emu_handle *h, uint32_t id)
{
	int i = ctrl_index(id);

	return ctrl_visible(h, i) ? i : -1;
}

static bool is_unplugged(const struct emu_handle *h)
{
	return file_exists(h->unplug_path);
}

/* Read the shared state (shared lock). */
static void state_read(struct emu_handle *h, struct emu_state *st)
{
	if (h->state_fd >= 0) {
		flock(h->state_fd, LOCK_SH);
		ssize_t n = pread(h->state_fd, st, sizeof(*st), 0);
		flock(h->state_fd, LOCK_UN);
		if (n != (ssize_t)sizeof(*st))
			state_defaults(st);
		state_sanitize(st, h->formats);
		return;
	}
	pthread_mutex_lock(&g_lock);
	if (!g_mem_state_valid[h->index]) {
		state_defaults(&g_mem_state[h->index]);
		g_mem_state_valid[h->index] = true;
	}
	*st = g_mem_state[h->index];
	pthread_mutex_unlock(&g_lock);
}

/* Begin a read-modify-write of the shared state (exclusive lock). */
static void state_begin(struct emu_handle *h, struct emu_state *st)
{
	if (h->state_fd >= 0) {
		flock(h->state_fd, LOCK_EX);
		if (pread(h->state_fd, st, sizeof(*st), 0) != (ssize_t)sizeof(*st))
			state_defaults(st);
		state_sanitize(st, h->formats);
		return;
	}
	pthread_mutex_lock(&g_lock);
	if (!g_mem_state_valid[h->index]) {
		state_defaults(&g_mem_state[h->index]);
		g_mem_state_valid[h->index] = true;
	}
	*st = g_mem_state[h->index];
}

/* End a read-modify-write; store @st if @write. */
static void state_end(struct emu_handle *h, const struct emu_state *st, bool write)
{
	if (h->state_fd >= 0) {
		if (write && pwrite(h->state_fd, st, sizeof(*st), 0) != (ssize_t)sizeof(*st)) {
			/* Nothing sensible to do; the next reader sees the old state. */
		}
		flock(h->state_fd, LOCK_UN);
		return;
	}
	if (write)
		g_mem_state[h->index] = *st;
	pthread_mutex_unlock(&g_lock);
}

/* Current flags of a control: static flags plus INACTIVE for manual controls
 * of an auto cluster whose auto control is on. */
static uint32_t ctrl_cur_flags(const struct emu_ctrl *c, const struct emu_state *st)
{
	uint32_t flags = c->flags;

	if (c->auto_id) {
		int a = ctrl_index(c->auto_id);

		if (a >= 0 && st->ctrl[a] != c->manual_value)
			flags |= V4L2_CTRL_FLAG_INACTIVE;
	}
	return flags;
}

/* Open a sidecar file read-write, creating it world-writable (whatever the
 * umask) so that every user who can open the device can share it. */
static int open_sidecar(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);

	if (fd >= 0) {
		if (fchmod(fd, 0666) != 0) {
			/* Keep the umask's mode. */
		}
		return fd;
	}
	if (errno != EEXIST)
		return -1;
	return open(path, O_RDWR | O_CLOEXEC);
}

/* ---- buffer ownership (videoN.lock) ---- */

static int open_lock_file(const struct emu_handle *h)
{
	int fd = open_sidecar(h->lock_path);

	if (fd < 0) {   /* flock() works on a read-only fd too */
		int err = errno;

		fd = open(h->lock_path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			errno = err;   /* report why it could not be created */
	}
	return fd;
}

/* Does another fd (in any process) own this device's buffers? */
static bool other_owner(const struct emu_handle *h)
{
	if (h->lock_fd >= 0)
		return false;
	int fd = open_lock_file(h);

	if (fd < 0)
		return false;
	bool busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;

	close(fd);   /* also drops the probe lock if we got it */
	return busy;
}

static int acquire_ownership(struct emu_handle *h)
{
	if (h->lock_fd >= 0)
		return 0;
	int fd = open_lock_file(h);

	if (fd < 0)
		return errno ? errno : EIO;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int err = errno == EWOULDBLOCK ? EBUSY : errno;

		close(fd);
		return err;
	}
	h->lock_fd = fd;
	return 0;
}

static void release_ownership(struct emu_handle *h)
{
	if (h->lock_fd < 0)
		return;
	close(h->lock_fd);   /* releases the flock */
	h->lock_fd = -1;
}

/* ======================================================================== */
/* 6. Frame generation                                                      */
/* ======================================================================== */

struct rgb {
	uint8_t r, g, b;
};

/* 75% colour bars, as vivid/SMPTE: white, yellow, cyan, green, magenta, red, blue, black. */
static const struct rgb colour_bars[8] = {
	{ 191, 191, 191 }, { 191, 191, 0 }, { 0, 191, 191 }, { 0, 191, 0 },
	{ 191, 0, 191 }, { 191, 0, 0 }, { 0, 0, 191 }, { 0, 0, 0 },
};

enum { PATTERN_BARS, PATTERN_GRADIENT, PATTERN_CHECKER, PATTERN_SOLID };

struct picture_params {
	int pattern, brightness, contrast, saturation;
};

static struct rgb adjust_rgb(struct rgb c, const struct picture_params *p)
{
	int v[3] = { c.r, c.g, c.b };
	int y = (77 * v[0] + 150 * v[1] + 29 * v[2]) >> 8;

	for (int i = 0; i < 3; i++) {
		int x = y + (v[i] - y) * p->saturation / 128;      /* saturation */
		x = (x - 128) * p->contrast / 128 + 128;            /* contrast */
		x += p->brightness - 128;                           /* brightness */
		v[i] = clamp_u8(x);
	}
	return (struct rgb){ (uint8_t)v[0], (uint8_t)v[1], (uint8_t)v[2] };
}

/* One row of the pattern, as RGB.  @phase selects the checkerboard row phase;
 * @band paints the moving band instead. */
static void pattern_row(struct rgb *row, uint32_t width, int phase, bool band,
			const struct picture_params *p)
{
	for (uint32_t x = 0; x < width; x++) {
		struct rgb c;

		if (band) {
			c = (struct rgb){ 255, 255, 255 };
		} else {
			switch (p->pattern) {
			case PATTERN_GRADIENT: {
				uint8_t g = (uint8_t)(width > 1 ? x * 255 / (width - 1) : 0);
				c = (struct rgb){ g, g, g };
				break;
			}
			case PATTERN_CHECKER:
				c = (((x / 32) + (uint32_t)phase) & 1) ?
					(struct rgb){ 235, 235, 235 } : (struct rgb){ 16, 16, 16 };
				break;
			case PATTERN_SOLID:
				c = (struct rgb){ 128, 128, 128 };
				break;
			default:
				c = colour_bars[(uint64_t)x * 8 / width];
				break;
			}
		}
		row[x] = adjust_rgb(c, p);
	}
}

/* Convert an RGB row to the pixel format; @parity is the row parity (Bayer). */
static void convert_row(uint32_t fourcc, const struct rgb *src, uint32_t width,
			int parity, uint8_t *dst)
{
	switch (fourcc) {
	case V4L2_PIX_FMT_YUYV:
		/* BT.601 limited range, chroma averaged over each pixel pair. */
		for (uint32_t x = 0; x + 1 < width; x += 2) {
			const struct rgb *a = &src[x], *b = &src[x + 1];
			int r = (a->r + b->r) / 2, g = (a->g + b->g) / 2, bl = (a->b + b->b) / 2;

			dst[2 * x + 0] = clamp_u8(((66 * a->r + 129 * a->g + 25 * a->b + 128) >> 8) + 16);
			dst[2 * x + 1] = clamp_u8(((-38 * r - 74 * g + 112 * bl + 128) >> 8) + 128);
			dst[2 * x + 2] = clamp_u8(((66 * b->r + 129 * b->g + 25 * b->b + 128) >> 8) + 16);
			dst[2 * x + 3] = clamp_u8(((112 * r - 94 * g - 18 * bl + 128) >> 8) + 128);
		}
		if (width & 1) {   /* continuous sizes: a last unpaired pixel (Y, U) */
			const struct rgb *a = &src[width - 1];

			dst[2 * (width - 1) + 0] = clamp_u8(((66 * a->r + 129 * a->g + 25 * a->b + 128) >> 8) + 16);
			dst[2 * (width - 1) + 1] = clamp_u8(((-38 * a->r - 74 * a->g + 112 * a->b + 128) >> 8) + 128);
		}
		break;
	case V4L2_PIX_FMT_RGB24:
		for (uint32_t x = 0; x < width; x++) {
			dst[3 * x + 0] = src[x].r;
			dst[3 * x + 1] = src[x].g;
			dst[3 * x + 2] = src[x].b;
		}
		break;
	case V4L2_PIX_FMT_GREY:
		for (uint32_t x = 0; x < width; x++)
			dst[x] = (uint8_t)((77 * src[x].r + 150 * src[x].g + 29 * src[x].b) >> 8);
		break;
	case V4L2_PIX_FMT_SRGGB8:
		/* Even rows R G R G ..., odd rows G B G B ... */
		for (uint32_t x = 0; x < width; x++) {
			if (parity == 0)
				dst[x] = (x & 1) ? src[x].g : src[x].r;
			else
				dst[x] = (x & 1) ? src[x].b : src[x].g;
		}
		break;
	}
}

/*
 * Render frame @seq into h->frame: the selected test pattern, a white band
 * moving down 4 rows per frame (so consecutive frames differ), and the
 * 24-byte header { u32 magic, u32 sequence, u64 timestamp_ns,
 * u64 true_start_ns } (LE).  Rows repeat, so a few distinct rows are
 * rendered and copied.
 */
static void render_frame(struct emu_handle *h, uint64_t seq, uint64_t ts_ns, uint64_t true_ns)
{
	struct emu_state st;
	struct picture_params p;
	uint32_t w = h->width, hgt = h->height, bpl = h->bytesperline;

	state_read(h, &st);
	p.pattern = st.ctrl[ctrl_index(V4L2_CID_TEST_PATTERN)];
	p.brightness = st.ctrl[ctrl_index(V4L2_CID_BRIGHTNESS)];
	p.contrast = st.ctrl[ctrl_index(V4L2_CID_CONTRAST)];
	p.saturation = st.ctrl[ctrl_index(V4L2_CID_SATURATION)];

	struct rgb *rgb = malloc(sizeof(*rgb) * w);
	uint8_t *rows = malloc((size_t)bpl * 6);   /* [phase 0..1][parity 0..1] + band[parity] */

	if (!rgb || !rows) {
		free(rgb);
		free(rows);
		memset(h->frame, 0, h->sizeimage);
	} else {
		for (int phase = 0; phase < 2; phase++) {
			pattern_row(rgb, w, phase, false, &p);
			for (int parity = 0; parity < 2; parity++)
				convert_row(h->pixfmt, rgb, w, parity, rows + (size_t)bpl * (phase * 2 + parity));
		}
		pattern_row(rgb, w, 0, true, &p);
		for (int parity = 0; parity < 2; parity++)
			convert_row(h->pixfmt, rgb, w, parity, rows + (size_t)bpl * (4 + parity));

		uint32_t band_h = hgt / 24 > 2 ? hgt / 24 : 2;
		uint32_t band_y = (uint32_t)((seq * 4) % hgt);

		for (uint32_t y = 0; y < hgt; y++) {
			uint32_t dy = (y + hgt - band_y) % hgt;
			int parity = (int)(y & 1);
			size_t variant = dy < band_h ? (size_t)(4 + parity) :
				(size_t)(((y / 32) & 1) * 2 + (uint32_t)parity);

			memcpy(h->frame + (size_t)y * bpl, rows + variant * bpl, bpl);
		}
		free(rgb);
		free(rows);
	}
	if (h->sizeimage >= EMU_HEADER_BYTES) {
		put_le32(h->frame + 0, EMU_FRAME_MAGIC);
		put_le32(h->frame + 4, (uint32_t)seq);
		put_le64(h->frame + 8, ts_ns);
		put_le64(h->frame + 16, true_ns);
	}
}

/* ======================================================================== */
/* 7. Buffer queue, sensor timing and frame pacing                          */
/* ======================================================================== */

/*
 * Sensor timing
 * -------------
 * Every node behaves like a free-running image sensor: a 200 MHz pixel
 * clock, lines of width + 160 (hblank) pixels, frames of height + vblank
 * lines.  S_FMT and S_PARM pick vblank so that the frame duration is the
 * nearest achievable to the nominal interval; with
 * frame_duration_control=vblank the V4L2_CID_VBLANK control changes it
 * while streaming.  The oscillator is rate_ppm off (every true frame
 * duration is nominal * (1 + rate_ppm * 1e-6): positive runs slow), the first frame starts
 * exposing startup_delay_us + uniform[0, startup_jitter_us) after
 * STREAMON, and each frame starts where the previous one ended.  A frame
 * is ready (DQBUF returns it) at its end of frame: true start + exposure +
 * readout (height lines).  Its timestamp is the true start of exposure
 * (SOE) or that end of frame (EOF), plus Gaussian noise.
 */

/* ---- videoN.timing ---- */

static locale_t c_locale(void)
{
	static locale_t loc;

	if (!loc)
		loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	return loc;
}

static char *trim(char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	char *e = p + strlen(p);

	while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return p;
}

static double parse_double(const char *v, double fallback)
{
	char *end;
	locale_t loc = c_locale();
	double d = loc ? strtod_l(v, &end, loc) : strtod(v, &end);

	return end != v && isfinite(d) ? d : fallback;
}

/* (Re)read videoN.timing: key=value lines, '#' comments, unknown keys ignored. */
static void load_timing(struct emu_handle *h)
{
	struct emu_timing *t = &h->timing;
	char line[512];

	memset(t, 0, sizeof(*t));
	t->seed = h->index;
	FILE *f = fopen(h->timing_path, "re");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#'), *eq;

		if (hash)
			*hash = '\0';
		if (!(eq = strchr(line, '=')))
			continue;
		*eq = '\0';
		const char *key = trim(line), *val = trim(eq + 1);

		if (!strcmp(key, "seed")) {
			char *end;
			unsigned long long v = strtoull(val, &end, 0);

			if (end != val)
				t->seed = v;
		} else if (!strcmp(key, "rate_ppm")) {
			t->rate_ppm = parse_double(val, 0);
		} else if (!strcmp(key, "startup_delay_us")) {
			t->startup_delay_us = fmax(0, parse_double(val, 0));
		} else if (!strcmp(key, "startup_jitter_us")) {
			t->startup_jitter_us = fmax(0, parse_double(val, 0));
		} else if (!strcmp(key, "timestamp_jitter_us")) {
			t->timestamp_jitter_us = fmax(0, parse_double(val, 0));
		} else if (!strcmp(key, "timestamp_source")) {
			t->eof = !strcmp(val, "eof");
		} else if (!strcmp(key, "frame_duration_control")) {
			t->vblank_ctrl = !strcmp(val, "vblank");
		}
	}
	fclose(f);
}

/* ---- random draws (splitmix64) ---- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double rng_uniform(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller), truncated at +-4 sigma by redrawing. */
static double rng_gauss(uint64_t *s)
{
	for (;;) {
		double u1 = rng_uniform(s), u2 = rng_uniform(s);

		if (u1 <= 0)
			continue;
		double g = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);

		if (fabs(g) <= 4.0)
			return g;
	}
}

/* ---- the sensor model ---- */

/* Nominal line time in ns at width w. */
static uint64_t line_ns(uint32_t w)
{
	return (uint64_t)(w + EMU_HBLANK) * EMU_NS_PER_PIXEL;
}

/* The vblank whose frame duration is nearest to @iv at size w x h. */
static int32_t vblank_for(uint32_t w, uint32_t h, struct emu_fract iv)
{
	double lines = (double)iv.num * 1e9 / (double)iv.den / (double)line_ns(w);
	double vb = floor(lines + 0.5) - (double)h;

	if (vb < EMU_VBLANK_MIN)
		vb = EMU_VBLANK_MIN;
	if (vb > EMU_VBLANK_MAX)
		vb = EMU_VBLANK_MAX;
	return (int32_t)vb;
}

/* Set the vblank in a state being modified; stamps the time of a change. */
static void state_set_vblank(struct emu_state *st, int32_t vblank)
{
	int i = ctrl_index(V4L2_CID_VBLANK);

	if (st->ctrl[i] != vblank) {
		st->ctrl[i] = vblank;
		st->vblank_set_ns = now_ns();
	}
}

/* Exposure time in ns: exposure_time_absolute when manual, else the default. */
static uint64_t exposure_ns(const struct emu_state *st)
{
	int32_t v = EMU_EXPOSURE_DEFAULT;

	if (st->ctrl[ctrl_index(V4L2_CID_EXPOSURE_AUTO)] == V4L2_EXPOSURE_MANUAL)
		v = st->ctrl[ctrl_index(V4L2_CID_EXPOSURE_ABSOLUTE)];
	return (uint64_t)v * 100000ull;
}

/* ---- videoN.truth ---- */

/* STREAM of the last line in videoN.truth, if there is one. */
static bool truth_last_stream(const struct emu_handle *h, uint32_t *stream)
{
	char buf[512];
	struct stat sb;
	bool found = false;
	int fd = open(h->truth_path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
		off_t off = sb.st_size > (off_t)sizeof(buf) - 1 ? sb.st_size - (off_t)sizeof(buf) + 1 : 0;
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, off);

		if (n > 0) {
			buf[n] = '\0';
			while (n > 0 && buf[n - 1] == '\n')
				buf[--n] = '\0';
			char *last = strrchr(buf, '\n');

			found = sscanf(last ? last + 1 : buf, "%" SCNu32, stream) == 1;
		}
	}
	close(fd);
	return found;
}

/* Append "STREAM SEQUENCE TRUE_START_NS TIMESTAMP_NS DELIVERED" if
 * videoN.truth exists: one write() per line, O_APPEND. */
static void truth_log(const struct emu_handle *h, const struct emu_frame *fr, bool delivered)
{
	char line[128];
	int fd = open(h->truth_path, O_WRONLY | O_APPEND | O_CLOEXEC);

	if (fd < 0)
		return;
	int n = snprintf(line, sizeof(line), "%" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %d\n",
			 h->stream_no, (uint32_t)fr->seq, fr->start_ns, fr->ts_ns, delivered ? 1 : 0);

	if (write(fd, line, (size_t)n) != n) {
		/* A full disk loses truth lines, not frames. */
	}
	close(fd);
}

/* Bitmask of buffers that this process has mmap()ed (from /proc/self/maps). */
static uint32_t mapped_mask(const struct emu_handle *h)
{
	uint32_t mask = 0;

	if (!h->nbufs)
		return 0;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return 0;
	char *line = NULL;
	size_t cap = 0;

	while (getline(&line, &cap, f) > 0) {
		unsigned long start, end;
		unsigned long long off, ino;
		unsigned int maj, min;

		if (sscanf(line, "%lx-%lx %*s %llx %x:%x %llu", &start, &end, &off,
			   &maj, &min, &ino) != 6)
			continue;
		if (ino != (unsigned long long)h->st_ino || makedev(maj, min) != h->st_dev)
			continue;
		unsigned long long len = end - start;

		for (unsigned i = 0; i < h->nbufs; i++) {
			unsigned long long b0 = (unsigned long long)i * h->stride;
			unsigned long long b1 = b0 + h->sizeimage;

			if (off < b1 && off + len > b0)
				mask |= 1u << i;
		}
	}
	free(line);
	fclose(f);
	return mask;
}

/* Fill a buffer with the frame @fr and move it to the done list. */
static void complete_buffer(struct emu_handle *h, unsigned idx, const struct emu_frame *fr)
{
	struct emu_buffer *b = &h->bufs[idx];

	if (!h->fileio) {
		render_frame(h, fr->seq, fr->ts_ns, fr->start_ns);
		if (pwrite(h->data_fd, h->frame, h->sizeimage, (off_t)(idx * h->stride)) !=
		    (ssize_t)h->sizeimage) {
			/* The device file vanished or the disk is full: deliver anyway. */
		}
	}
	b->state = BUF_DONE;
	b->sequence = (uint32_t)fr->seq;
	b->timestamp_ns = fr->ts_ns;
	b->true_start_ns = fr->start_ns;
	b->bytesused = h->sizeimage;
	h->done[(h->d_head + h->d_count) % EMU_MAX_BUFFERS] = idx;
	h->d_count++;
}

/* The oldest started frame is over: deliver it (if it has a buffer and
 * @deliver) and log it. */
static void finish_frame(struct emu_handle *h, bool deliver)
{
	struct emu_frame *fr = &h->inflight[h->f_head];
	bool delivered = deliver && fr->buf >= 0;

	if (delivered)
		complete_buffer(h, (unsigned)fr->buf, fr);
	truth_log(h, fr, delivered);
	h->f_head = (h->f_head + 1) % EMU_MAX_INFLIGHT;
	h->f_count--;
}

/*
 * Frame next_seq starts exposing at next_start: it takes the oldest buffer
 * queued by then (or is dropped), gets its timestamp, and sets when the
 * next frame starts from the vblank in effect now.
 */
static void start_frame(struct emu_handle *h, const struct emu_state *st)
{
	struct emu_frame *fr = &h->inflight[(h->f_head + h->f_count) % EMU_MAX_INFLIGHT];
	uint64_t line = line_ns(h->width);
	double duration = (double)(h->height + h->vblank) * (double)line *
			  (1.0 + h->timing.rate_ppm * 1e-6);
	uint64_t exposure = exposure_ns(st);

	if (duration > (double)line && (double)exposure > duration - (double)line)
		exposure = (uint64_t)(duration - (double)line);
	h->f_count++;
	fr->seq = h->next_seq;
	fr->start_ns = h->next_start_ns;
	fr->ready_ns = fr->start_ns + exposure + (uint64_t)h->height * line;
	double ts = (double)(h->ts_eof ? fr->ready_ns : fr->start_ns);

	if (h->timing.timestamp_jitter_us > 0)
		ts += rng_gauss(&h->rng) * h->timing.timestamp_jitter_us * 1000.0;
	fr->ts_ns = ts > 0 ? (uint64_t)llround(ts) : 0;
	fr->buf = -1;
	if (h->q_count && h->bufs[h->queue[h->q_head]].queued_ns <= fr->start_ns) {
		fr->buf = (int)h->queue[h->q_head];
		h->q_head = (h->q_head + 1) % EMU_MAX_BUFFERS;
		h->q_count--;
	}
	double next = h->next_start_frac + duration;
	uint64_t whole = (uint64_t)next;

	h->next_start_ns += whole;
	h->next_start_frac = next - (double)whole;
	h->next_seq++;
}

/* When the next frame starts or ends (0: now). */
static uint64_t next_event_ns(const struct emu_handle *h)
{
	uint64_t t = h->next_start_ns;

	if (h->f_count) {
		const struct emu_frame *fr = &h->inflight[h->f_head];

		if (fr->buf < 0)
			return 0;
		if (fr->ready_ns < t)
			t = fr->ready_ns;
	}
	return t;
}

/*
 * Catch up with the clock: start every frame due by @now, finish every
 * frame whose end of frame has passed, in time order.  The sequence counts
 * dropped frames, as real drivers do.  A vblank written since the last look
 * applies to frames starting after its write (or after the last look, if
 * that was later).
 */
static void advance_stream(struct emu_handle *h, uint64_t now)
{
	struct emu_state st;

	if (!h->streaming)
		return;
	state_read(h, &st);
	int32_t vblank = st.ctrl[ctrl_index(V4L2_CID_VBLANK)];
	bool pending = st.vblank_set_ns != h->vblank_seen_ns;
	uint64_t pending_at = st.vblank_set_ns > h->clock_ns ? st.vblank_set_ns : h->clock_ns;

	for (;;) {
		uint64_t fin = UINT64_MAX;

		if (h->f_count) {
			const struct emu_frame *fr = &h->inflight[h->f_head];

			fin = fr->buf < 0 ? 0 : fr->ready_ns;
		}
		if (fin <= now && fin <= h->next_start_ns) {
			finish_frame(h, true);
			continue;
		}
		if (h->next_start_ns > now)
			break;
		if (pending && pending_at <= h->next_start_ns) {
			h->vblank = (uint32_t)vblank;
			h->vblank_seen_ns = st.vblank_set_ns;
			pending = false;
		}
		if (h->f_count == EMU_MAX_INFLIGHT)   /* not reached: frames overlap by < 2 */
			finish_frame(h, true);
		start_frame(h, &st);
	}
	if (pending && pending_at <= now) {
		h->vblank = (uint32_t)vblank;
		h->vblank_seen_ns = st.vblank_set_ns;
	}
	if (now > h->clock_ns)
		h->clock_ns = now;
}

/* Return every buffer to the dequeued state (STREAMOFF, REQBUFS). */
static void cancel_buffers(struct emu_handle *h)
{
	for (unsigned i = 0; i < h->nbufs; i++)
		h->bufs[i].state = BUF_DEQUEUED;
	h->q_head = h->q_count = 0;
	h->d_head = h->d_count = 0;
	h->f_head = h->f_count = 0;
}

static void set_streaming_flag(struct emu_handle *h, bool on)
{
	struct emu_state st;

	state_begin(h, &st);
	st.streaming = on;
	state_end(h, &st, true);
}

/* Frames still exposing or being read out when the stream stops are not
 * delivered (the truth log says so). */
static void stop_streaming(struct emu_handle *h)
{
	if (h->streaming) {
		advance_stream(h, now_ns());
		while (h->f_count)
			finish_frame(h, false);
		h->streaming = false;
		set_streaming_flag(h, false);
	}
	cancel_buffers(h);
}

/* Shrink the device file to nothing, unless this process still maps it. */
static void trim_device_file(struct emu_handle *h)
{
	if (h->data_fd < 0)
		return;
	if (mapped_mask(h) == 0 && ftruncate(h->data_fd, 0) != 0) {
		/* Best effort only. */
	}
}

static void free_buffers(struct emu_handle *h)
{
	stop_streaming(h);
	if (!h->fileio)
		trim_device_file(h);
	h->fileio = false;
	h->fileio_cur = -1;
	h->fileio_pos = 0;
	h->nbufs = 0;
	free(h->frame);
	h->frame = NULL;
	release_ownership(h);
}

static void fill_v4l2_buffer(const struct emu_handle *h, unsigned idx, uint32_t mapped,
			     struct v4l2_buffer *b)
{
	const struct emu_buffer *eb = &h->bufs[idx];

	memset(b, 0, sizeof(*b));
	b->index = idx;
	b->type = V4L2_BUF_TYPE_VIDEO_CAPTURE;
	b->memory = V4L2_MEMORY_MMAP;
	b->bytesused = eb->bytesused;
	b->field = V4L2_FIELD_NONE;
	b->flags = V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC |
		   (h->ts_eof ? V4L2_BUF_FLAG_TSTAMP_SRC_EOF : V4L2_BUF_FLAG_TSTAMP_SRC_SOE);
	if (eb->state == BUF_QUEUED)
		b->flags |= V4L2_BUF_FLAG_QUEUED;
	else if (eb->state == BUF_DONE)
		b->flags |= V4L2_BUF_FLAG_DONE;
	if (mapped & (1u << idx))
		b->flags |= V4L2_BUF_FLAG_MAPPED;
	b->timestamp.tv_sec = (time_t)(eb->timestamp_ns / NSEC_PER_SEC);
	b->timestamp.tv_usec = (suseconds_t)(eb->timestamp_ns % NSEC_PER_SEC / 1000);
	b->sequence = eb->sequence;
	b->m.offset = (uint32_t)(idx * h->stride);
	b->length = h->sizeimage;
}

/* Unlock, sleep until @until (at most EMU_WAIT_STEP_NS), relock. */
static void wait_step(struct emu_handle *h, uint64_t until)
{
	uint64_t limit = now_ns() + EMU_WAIT_STEP_NS;

	if (until == 0 || until > limit)
		until = limit;
	pthread_mutex_unlock(&h->lock);
	sleep_until_ns(until);
	pthread_mutex_lock(&h->lock);
}

static bool fd_nonblocking(const struct emu_handle *h)
{
	int fl = fcntl(h->fd, F_GETFL);

	return fl >= 0 && (fl & O_NONBLOCK);
}

/* ======================================================================== */
/* 8. ioctl handlers                                                        */
/* ======================================================================== */

/* ---- identity, inputs, priority ---- */

static uint32_t kernel_version_code(void)
{
	struct utsname u;
	unsigned a = 0, b = 0, c = 0;

	if (uname(&u) == 0)
		sscanf(u.release, "%u.%u.%u", &a, &b, &c);
	if (c > 255)
		c = 255;
	return (a << 16) | (b << 8) | c;
}

static int vidioc_querycap(struct emu_handle *h, struct v4l2_capability *cap)
{
	char buf[64];

	memset(cap, 0, sizeof(*cap));
	copy_str(cap->driver, sizeof(cap->driver), EMU_DRIVER);
	snprintf(buf, sizeof(buf), "CamRig Emulated Camera %u", h->index);
	copy_str(cap->card, sizeof(cap->card), buf);
	snprintf(buf, sizeof(buf), "platform:camrig-emu-%u", h->index);
	copy_str(cap->bus_info, sizeof(cap->bus_info), buf);
	cap->version = kernel_version_code();
	cap->device_caps = V4L2_CAP_VIDEO_CAPTURE | V4L2_CAP_READWRITE | V4L2_CAP_STREAMING |
			   V4L2_CAP_EXT_PIX_FORMAT;
	cap->capabilities = cap->device_caps | V4L2_CAP_DEVICE_CAPS;
	return 0;
}

static int vidioc_enuminput(struct v4l2_input *in)
{
	uint32_t index = in->index;

	if (index != 0)
		return EINVAL;
	memset(in, 0, sizeof(*in));
	in->index = 0;
	copy_str(in->name, sizeof(in->name), "Camera");
	in->type = V4L2_INPUT_TYPE_CAMERA;
	return 0;
}

static int vidioc_s_priority(struct emu_handle *h, const uint32_t *p)
{
	int err = 0;

	if (*p != V4L2_PRIORITY_BACKGROUND && *p != V4L2_PRIORITY_INTERACTIVE &&
	    *p != V4L2_PRIORITY_RECORD)
		return EINVAL;
	pthread_mutex_lock(&g_lock);
	if (h->prio < prio_max_locked(h))
		err = EBUSY;
	else
		h->prio = *p;
	pthread_mutex_unlock(&g_lock);
	return err;
}

static int vidioc_g_priority(struct emu_handle *h, uint32_t *p)
{
	pthread_mutex_lock(&g_lock);
	*p = prio_max_locked(h);
	pthread_mutex_unlock(&g_lock);
	return 0;
}

/* ---- formats, sizes, intervals ---- */

static int vidioc_enum_fmt(struct emu_handle *h, struct v4l2_fmtdesc *d)
{
	uint32_t index = d->index, type = d->type;

	if (type != V4L2_BUF_TYPE_VIDEO_CAPTURE || index >= EMU_NUM_FORMATS)
		return EINVAL;
	memset(d, 0, sizeof(*d));
	d->index = index;
	d->type = type;
	copy_str(d->description, sizeof(d->description), h->formats[index].description);
	d->pixelformat = h->formats[index].fourcc;
	return 0;
}

static int vidioc_enum_framesizes(struct emu_handle *h, struct v4l2_frmsizeenum *fs)
{
	uint32_t index = fs->index, fourcc = fs->pixel_format;
	const struct emu_format *f = find_format(h->formats, fourcc);

	if (!f)
		return EINVAL;
	memset(fs, 0, sizeof(*fs));
	fs->index = index;
	fs->pixel_format = fourcc;
	if (f->size_kind == EMU_DISCRETE) {
		if (index >= f->n_sizes)
			return EINVAL;
		fs->type = V4L2_FRMSIZE_TYPE_DISCRETE;
		fs->discrete.width = f->sizes[index].width;
		fs->discrete.height = f->sizes[index].height;
		return 0;
	}
	if (index != 0)
		return EINVAL;
	fs->type = f->size_kind == EMU_STEPWISE ? V4L2_FRMSIZE_TYPE_STEPWISE :
						 V4L2_FRMSIZE_TYPE_CONTINUOUS;
	fs->stepwise.min_width = f->min_w;
	fs->stepwise.max_width = f->max_w;
	fs->stepwise.step_width = f->step_w;
	fs->stepwise.min_height = f->min_h;
	fs->stepwise.max_height = f->max_h;
	fs->stepwise.step_height = f->step_h;
	return 0;
}

static int vidioc_enum_frameintervals(struct emu_handle *hd, struct v4l2_frmivalenum *fi)
{
	uint32_t index = fi->index, fourcc = fi->pixel_format, w = fi->width, h = fi->height;
	const struct emu_format *f = find_format(hd->formats, fourcc);
	const struct emu_fract *list;
	unsigned n = 0;

	if (!f || !size_is_valid(f, w, h))
		return EINVAL;
	memset(fi, 0, sizeof(*fi));
	fi->index = index;
	fi->pixel_format = fourcc;
	fi->width = w;
	fi->height = h;
	if ((list = discrete_intervals(f, w, h, &n))) {
		if (index >= n)
			return EINVAL;
		fi->type = V4L2_FRMIVAL_TYPE_DISCRETE;
		fi->discrete.numerator = list[index].num;
		fi->discrete.denominator = list[index].den;
		return 0;
	}
	if (index != 0)
		return EINVAL;
	fi->type = f->ival_kind == EMU_STEPWISE ? V4L2_FRMIVAL_TYPE_STEPWISE :
						 V4L2_FRMIVAL_TYPE_CONTINUOUS;
	fi->stepwise.min.numerator = f->ival_min.num;
	fi->stepwise.min.denominator = f->ival_min.den;
	fi->stepwise.max.numerator = f->ival_max.num;
	fi->stepwise.max.denominator = f->ival_max.den;
	fi->stepwise.step.numerator = f->ival_step.num;
	fi->stepwise.step.denominator = f->ival_step.den;
	return 0;
}

/* TRY_FMT logic: unsupported formats fall back to the default format. */
static const struct emu_format *try_format(const struct emu_format *table, struct v4l2_format *fmt)
{
	const struct emu_format *f = find_format(table, fmt->fmt.pix.pixelformat);
	uint32_t w = fmt->fmt.pix.width, h = fmt->fmt.pix.height;

	if (!f)
		f = find_format(table, EMU_DEFAULT_FOURCC);
	adjust_size(f, &w, &h);
	fill_pix_format(&fmt->fmt.pix, f, w, h);
	return f;
}

static int vidioc_g_fmt(struct emu_handle *h, struct v4l2_format *fmt)
{
	struct emu_state st;

	if (fmt->type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	state_read(h, &st);
	fill_pix_format(&fmt->fmt.pix, find_format(h->formats, st.pixelformat), st.width, st.height);
	return 0;
}

static int vidioc_try_fmt(struct emu_handle *h, struct v4l2_format *fmt)
{
	if (fmt->type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	try_format(h->formats, fmt);
	return 0;
}

static int vidioc_s_fmt(struct emu_handle *h, struct v4l2_format *fmt)
{
	struct emu_state st;
	int err;

	if (fmt->type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	if ((err = check_prio(h)))
		return err;
	const struct emu_format *f = try_format(h->formats, fmt);

	/* Like vb2_is_busy(): no format change while buffers exist anywhere. */
	if (h->nbufs || other_owner(h))
		return EBUSY;
	state_begin(h, &st);
	st.pixelformat = f->fourcc;
	st.width = fmt->fmt.pix.width;
	st.height = fmt->fmt.pix.height;
	struct emu_fract iv = { st.tpf_num, st.tpf_den };

	if (!interval_is_valid(f, st.width, st.height, iv)) {
		iv = nearest_interval(f, st.width, st.height, iv);
		st.tpf_num = iv.num;
		st.tpf_den = iv.den;
	}
	state_set_vblank(&st, vblank_for(st.width, st.height, iv));
	state_end(h, &st, true);
	return 0;
}

static void fill_parm(struct v4l2_streamparm *parm, const struct emu_state *st)
{
	memset(&parm->parm, 0, sizeof(parm->parm));
	parm->parm.capture.capability = V4L2_CAP_TIMEPERFRAME;
	parm->parm.capture.capturemode = 0;
	parm->parm.capture.timeperframe.numerator = st->tpf_num;
	parm->parm.capture.timeperframe.denominator = st->tpf_den;
	parm->parm.capture.extendedmode = 0;
	parm->parm.capture.readbuffers = EMU_READ_BUFFERS;   /* we have V4L2_CAP_READWRITE */
}

static int vidioc_g_parm(struct emu_handle *h, struct v4l2_streamparm *parm)
{
	struct emu_state st;

	if (parm->type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	state_read(h, &st);
	fill_parm(parm, &st);
	return 0;
}

static int vidioc_s_parm(struct emu_handle *h, struct v4l2_streamparm *parm)
{
	struct emu_state st;
	int err;

	if (parm->type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	if ((err = check_prio(h)))
		return err;
	struct emu_fract want = {
		parm->parm.capture.timeperframe.numerator,
		parm->parm.capture.timeperframe.denominator,
	};

	state_begin(h, &st);
	/* Like UVC: the interval cannot change while streaming. */
	if (h->streaming || (st.streaming && other_owner(h))) {
		state_end(h, &st, false);
		return EBUSY;
	}
	struct emu_fract iv = nearest_interval(find_format(h->formats, st.pixelformat), st.width,
					       st.height, want);

	st.tpf_num = iv.num;
	st.tpf_den = iv.den;
	/* The sensor runs the nominal interval as nearly as whole lines allow. */
	state_set_vblank(&st, vblank_for(st.width, st.height, iv));
	state_end(h, &st, true);
	fill_parm(parm, &st);
	return 0;
}

/* ---- controls ---- */

static int find_next_ctrl(const struct emu_handle *h, uint32_t id)
{
	const uint32_t next_mask = V4L2_CTRL_FLAG_NEXT_CTRL | V4L2_CTRL_FLAG_NEXT_COMPOUND;
	uint32_t next = id & next_mask, base = id & ~next_mask;

	if (!next)
		return ctrl_find(h, base);
	/* All our controls are simple (non-compound) ones. */
	if (!(next & V4L2_CTRL_FLAG_NEXT_CTRL))
		return -1;
	for (unsigned i = 0; i < EMU_NUM_CTRLS; i++)
		if (emu_ctrls[i].id > base && ctrl_visible(h, (int)i))
			return (int)i;
	return -1;
}

static int vidioc_query_ext_ctrl(struct emu_handle *h, struct v4l2_query_ext_ctrl *q)
{
	int i = find_next_ctrl(h, q->id);
	struct emu_state st;

	if (i < 0)
		return EINVAL;
	const struct emu_ctrl *c = &emu_ctrls[i];

	state_read(h, &st);
	memset(q, 0, sizeof(*q));
	q->id = c->id;
	q->type = c->type;
	copy_str(q->name, sizeof(q->name), c->name);
	q->minimum = c->min;
	q->maximum = c->max;
	q->step = (uint64_t)c->step;
	q->default_value = c->def;
	q->flags = ctrl_cur_flags(c, &st);
	q->elem_size = ctrl_is_int64(c) ? sizeof(int64_t) : sizeof(int32_t);
	q->elems = 1;
	q->nr_of_dims = 0;
	return 0;
}

static int vidioc_queryctrl(struct emu_handle *h, struct v4l2_queryctrl *qc)
{
	struct v4l2_query_ext_ctrl q = { .id = qc->id };
	int err = vidioc_query_ext_ctrl(h, &q);

	if (err)
		return err;
	memset(qc, 0, sizeof(*qc));
	qc->id = q.id;
	qc->type = q.type;
	copy_str(qc->name, sizeof(qc->name), q.name);
	qc->minimum = (int32_t)q.minimum;
	qc->maximum = (int32_t)q.maximum;
	qc->step = (int32_t)q.step;
	qc->default_value = (int32_t)q.default_value;
	qc->flags = q.flags;
	return 0;
}

static int vidioc_querymenu(struct emu_handle *h, struct v4l2_querymenu *m)
{
	uint32_t id = m->id, index = m->index;
	int i = ctrl_find(h, id);

	if (i < 0)
		return EINVAL;
	const struct emu_ctrl *c = &emu_ctrls[i];

	if (c->type != V4L2_CTRL_TYPE_MENU && c->type != V4L2_CTRL_TYPE_INTEGER_MENU)
		return EINVAL;
	if (!menu_item_valid(c, index))
		return EINVAL;
	memset(m, 0, sizeof(*m));
	m->id = id;
	m->index = index;
	if (c->type == V4L2_CTRL_TYPE_MENU)
		copy_str(m->name, sizeof(m->name), c->menu[index]);
	else
		m->value = c->int_menu[index];
	return 0;
}

/* Remember a value this fd set itself, so it gets no event for it (unless
 * the subscription asked for feedback). */
static void note_own_change(struct emu_handle *h, int i, int32_t value)
{
	if (h->subs[i].active && !(h->subs[i].flags & V4L2_EVENT_SUB_FL_ALLOW_FEEDBACK))
		h->subs[i].seen_value = value;
}

/* Store control values in a state being modified; a new vblank is stamped
 * with the time of the write (see advance_stream()). */
static void state_set_ctrl(struct emu_state *st, int i, int32_t value)
{
	if (emu_ctrls[i].id == V4L2_CID_VBLANK)
		state_set_vblank(st, value);
	else
		st->ctrl[i] = value;
}

/* Before the streaming fd changes the vblank, frames that started before
 * now keep the old one. */
static void settle_stream(struct emu_handle *h)
{
	if (h->streaming)
		advance_stream(h, now_ns());
}

static int vidioc_g_ctrl(struct emu_handle *h, struct v4l2_control *ctrl)
{
	int i = ctrl_find(h, ctrl->id);
	struct emu_state st;

	if (i < 0 || ctrl_is_int64(&emu_ctrls[i]))
		return EINVAL;   /* 64-bit controls only through the EXT_CTRLS ioctls */
	if (emu_ctrls[i].flags & V4L2_CTRL_FLAG_WRITE_ONLY)
		return EACCES;
	state_read(h, &st);
	ctrl->value = st.ctrl[i];
	return 0;
}

static int vidioc_s_ctrl(struct emu_handle *h, struct v4l2_control *ctrl)
{
	int i = ctrl_find(h, ctrl->id), err;
	struct emu_state st;

	if (i < 0 || ctrl_is_int64(&emu_ctrls[i]))
		return EINVAL;
	const struct emu_ctrl *c = &emu_ctrls[i];

	if (c->flags & V4L2_CTRL_FLAG_READ_ONLY)
		return EACCES;
	if ((err = check_prio(h)))
		return err;
	/* VIDIOC_S_CTRL clamps integers (menus still get ERANGE/EINVAL). */
	if ((err = ctrl_validate(c, &ctrl->value, true)))
		return err;
	settle_stream(h);
	state_begin(h, &st);
	state_set_ctrl(&st, i, ctrl->value);
	state_end(h, &st, true);
	note_own_change(h, i, ctrl->value);
	return 0;
}

enum ext_op { EXT_GET, EXT_TRY, EXT_SET };

static bool which_is_class(uint32_t which)
{
	return which != V4L2_CTRL_WHICH_CUR_VAL && which != V4L2_CTRL_WHICH_DEF_VAL &&
	       which != V4L2_CTRL_WHICH_REQUEST_VAL;
}

static bool class_exists(const struct emu_handle *h, uint32_t which)
{
	return ctrl_find(h, which | 1) >= 0;
}

/*
 * G/TRY/S_EXT_CTRLS.  error_idx follows the spec: TRY reports the failing
 * control; G and S report count for errors found while validating (nothing
 * was read or written).
 */
static int vidioc_ext_ctrls(struct emu_handle *h, struct v4l2_ext_controls *cs, enum ext_op op)
{
	uint32_t which = cs->which;
	struct emu_state st;
	int err = 0;

	cs->error_idx = cs->count;
	if (which == V4L2_CTRL_WHICH_REQUEST_VAL)
		return EINVAL;   /* no request API */
	if (op != EXT_GET && which == V4L2_CTRL_WHICH_DEF_VAL)
		return EINVAL;   /* defaults cannot be changed */
	if (which_is_class(which) && !class_exists(h, V4L2_CTRL_ID2WHICH(which)))
		return EINVAL;
	if (cs->count == 0)
		return 0;
	if (!cs->controls)
		return EFAULT;
	if (cs->count > 1024)
		return ENOMEM;

	/* Validation pass: every id known, of the requested class, accessible. */
	for (uint32_t k = 0; k < cs->count; k++) {
		struct v4l2_ext_control *x = &cs->controls[k];
		int i = ctrl_find(h, x->id);

		if (i < 0 || (which_is_class(which) && V4L2_CTRL_ID2WHICH(x->id) != V4L2_CTRL_ID2WHICH(which)))
			err = EINVAL;
		else if (op == EXT_GET && (emu_ctrls[i].flags & V4L2_CTRL_FLAG_WRITE_ONLY))
			err = EACCES;
		else if (op != EXT_GET && (emu_ctrls[i].flags & V4L2_CTRL_FLAG_READ_ONLY))
			err = EACCES;
		if (err) {
			cs->error_idx = op == EXT_TRY ? k : cs->count;
			return err;
		}
	}

	if (op == EXT_GET) {
		if (which == V4L2_CTRL_WHICH_DEF_VAL)
			state_defaults(&st);
		else
			state_read(h, &st);
		for (uint32_t k = 0; k < cs->count; k++) {
			int i = ctrl_index(cs->controls[k].id);

			if (ctrl_is_int64(&emu_ctrls[i]))
				cs->controls[k].value64 = st.ctrl[i];
			else
				cs->controls[k].value = st.ctrl[i];
		}
		return 0;
	}
	if (op == EXT_SET && (err = check_prio(h)))
		return err;

	/* Value validation: out-of-range values give ERANGE (no clamping). */
	for (uint32_t k = 0; k < cs->count; k++) {
		struct v4l2_ext_control *x = &cs->controls[k];
		int32_t v = x->value;

		if ((err = ctrl_validate(&emu_ctrls[ctrl_index(x->id)], &v, false))) {
			cs->error_idx = op == EXT_TRY ? k : cs->count;
			return err;
		}
		x->value = v;
	}
	if (op == EXT_TRY)
		return 0;

	settle_stream(h);
	state_begin(h, &st);
	for (uint32_t k = 0; k < cs->count; k++)
		state_set_ctrl(&st, ctrl_index(cs->controls[k].id), cs->controls[k].value);
	state_end(h, &st, true);
	for (uint32_t k = 0; k < cs->count; k++)
		note_own_change(h, ctrl_index(cs->controls[k].id), cs->controls[k].value);
	return 0;
}

/* ---- control events ---- */

static void queue_ctrl_event(struct emu_handle *h, int i, uint32_t changes,
			     int32_t value, uint32_t flags)
{
	const struct emu_ctrl *c = &emu_ctrls[i];
	struct v4l2_event *ev = NULL;

	/* Like the kernel's one-element queue per control: merge into a
	 * pending event for the same control. */
	for (unsigned k = 0; k < h->ev_count; k++) {
		struct v4l2_event *e = &h->events[(h->ev_head + k) % EMU_MAX_EVENTS];

		if (e->id == c->id) {
			ev = e;
			changes |= e->u.ctrl.changes;
			break;
		}
	}
	if (!ev) {
		if (h->ev_count == EMU_MAX_EVENTS) {   /* drop the oldest */
			h->ev_head = (h->ev_head + 1) % EMU_MAX_EVENTS;
			h->ev_count--;
		}
		ev = &h->events[(h->ev_head + h->ev_count) % EMU_MAX_EVENTS];
		h->ev_count++;
		memset(ev, 0, sizeof(*ev));
		ev->type = V4L2_EVENT_CTRL;
		ev->id = c->id;
		ev->sequence = h->ev_sequence++;
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ev->timestamp = ts;
	}
	ev->u.ctrl.changes = changes;
	ev->u.ctrl.type = c->type;
	if (ctrl_is_int64(c))
		ev->u.ctrl.value64 = value;
	else
		ev->u.ctrl.value = value;
	ev->u.ctrl.flags = flags;
	ev->u.ctrl.minimum = c->min;
	ev->u.ctrl.maximum = c->max;
	ev->u.ctrl.step = c->step;
	ev->u.ctrl.default_value = c->def;
}

/* Queue events for whatever changed since each subscriber last looked. */
static void refresh_events(struct emu_handle *h)
{
	struct emu_state st;
	bool any = false;

	for (unsigned i = 0; i < EMU_NUM_CTRLS; i++)
		any |= h->subs[i].active;
	if (!any)
		return;
	state_read(h, &st);
	for (unsigned i = 0; i < EMU_NUM_CTRLS; i++) {
		struct emu_sub *s = &h->subs[i];

		if (!s->active || ctrl_is_class(&emu_ctrls[i]) || !ctrl_visible(h, (int)i))
			continue;
		uint32_t flags = ctrl_cur_flags(&emu_ctrls[i], &st), changes = 0;

		if (st.ctrl[i] != s->seen_value)
			changes |= V4L2_EVENT_CTRL_CH_VALUE;
		if (flags != s->seen_flags)
			changes |= V4L2_EVENT_CTRL_CH_FLAGS;
		if (changes)
			queue_ctrl_event(h, (int)i, changes, st.ctrl[i], flags);
		s->seen_value = st.ctrl[i];
		s->seen_flags = flags;
	}
}

static int vidioc_subscribe_event(struct emu_handle *h, const struct v4l2_event_subscription *sub)
{
	if (sub->type != V4L2_EVENT_CTRL)
		return EINVAL;
	int i = ctrl_find(h, sub->id);
	struct emu_state st;

	if (i < 0)
		return EINVAL;
	refresh_events(h);   /* settle older subscriptions first */
	state_read(h, &st);
	struct emu_sub *s = &h->subs[i];

	s->active = true;
	s->flags = sub->flags;
	s->seen_value = st.ctrl[i];
	s->seen_flags = ctrl_cur_flags(&emu_ctrls[i], &st);
	if ((sub->flags & V4L2_EVENT_SUB_FL_SEND_INITIAL) && !ctrl_is_class(&emu_ctrls[i])) {
		uint32_t changes = V4L2_EVENT_CTRL_CH_FLAGS;

		if (!(emu_ctrls[i].flags & V4L2_CTRL_FLAG_WRITE_ONLY))
			changes |= V4L2_EVENT_CTRL_CH_VALUE;
		queue_ctrl_event(h, i, changes, s->seen_value, s->seen_flags);
	}
	return 0;
}

static void drop_events_for(struct emu_handle *h, uint32_t id)
{
	unsigned kept = 0;
	struct v4l2_event tmp[EMU_MAX_EVENTS];

	for (unsigned k = 0; k < h->ev_count; k++) {
		const struct v4l2_event *e = &h->events[(h->ev_head + k) % EMU_MAX_EVENTS];

		if (id == 0 || e->id != id)
			tmp[kept++] = *e;
	}
	if (id == 0)
		kept = 0;
	memcpy(h->events, tmp, sizeof(tmp[0]) * kept);
	h->ev_head = 0;
	h->ev_count = kept;
}

static int vidioc_unsubscribe_event(struct emu_handle *h, const struct v4l2_event_subscription *sub)
{
	if (sub->type == V4L2_EVENT_ALL) {
		memset(h->subs, 0, sizeof(h->subs));
		drop_events_for(h, 0);
		return 0;
	}
	if (sub->type == V4L2_EVENT_CTRL) {
		int i = ctrl_index(sub->id);

		if (i >= 0 && h->subs[i].active) {
			memset(&h->subs[i], 0, sizeof(h->subs[i]));
			drop_events_for(h, sub->id);
		}
	}
	return 0;   /* like the kernel: unsubscribing something unknown is fine */
}

static int vidioc_dqevent(struct emu_handle *h, struct v4l2_event *ev)
{
	for (;;) {
		if (h->closing)
			return EBADF;
		if (is_unplugged(h))
			return ENODEV;
		refresh_events(h);
		if (h->ev_count) {
			*ev = h->events[h->ev_head];
			h->ev_head = (h->ev_head + 1) % EMU_MAX_EVENTS;
			h->ev_count--;
			ev->pending = h->ev_count;
			return 0;
		}
		if (fd_nonblocking(h))
			return ENOENT;
		wait_step(h, 0);
	}
}

/* ---- buffers and streaming ---- */

/* Take the current format for new buffers (it stays frozen while they
 * exist: S_FMT returns EBUSY) and allocate the scratch frame. */
static int setup_buffer_format(struct emu_handle *h)
{
	struct emu_state st;

	state_read(h, &st);
	const struct emu_format *f = find_format(h->formats, st.pixelformat);
	long page = sysconf(_SC_PAGESIZE);
	size_t psz = page > 0 ? (size_t)page : 4096;

	h->pixfmt = f->fourcc;
	h->width = st.width;
	h->height = st.height;
	h->bytesperline = st.width * f->bytes_per_pixel;
	h->sizeimage = h->bytesperline * st.height;
	h->stride = (h->sizeimage + psz - 1) / psz * psz;

	uint8_t *frame = realloc(h->frame, h->sizeimage);

	if (!frame)
		return ENOMEM;
	h->frame = frame;
	return 0;
}

static int vidioc_reqbufs(struct emu_handle *h, struct v4l2_requestbuffers *rb)
{
	int err;

	if (rb->type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	if (rb->memory != V4L2_MEMORY_MMAP)
		return EINVAL;   /* USERPTR and DMABUF are not supported */
	if ((err = check_prio(h)))
		return err;
	if (other_owner(h))
		return EBUSY;
	if (h->streaming || h->fileio)
		return EBUSY;
	rb->capabilities = V4L2_BUF_CAP_SUPPORTS_MMAP;
	rb->flags = 0;
	memset(rb->reserved, 0, sizeof(rb->reserved));
	/* No V4L2_BUF_CAP_SUPPORTS_ORPHANED_BUFS: buffers that are still
	 * mmap()ed cannot be freed (and the file must not shrink under a
	 * mapping, which would SIGBUS). */
	if (h->nbufs && mapped_mask(h))
		return EBUSY;

	if (rb->count == 0) {
		free_buffers(h);
		return 0;
	}
	if ((err = acquire_ownership(h)))
		return err;
	if (h->data_fd < 0) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/self/fd/%d", h->fd);
		h->data_fd = open(path, O_RDWR | O_CLOEXEC);
		if (h->data_fd < 0) {
			err = errno;
			release_ownership(h);
			return err;
		}
	}

	uint32_t count = rb->count;

	if (count < EMU_MIN_BUFFERS)
		count = EMU_MIN_BUFFERS;
	if (count > EMU_MAX_BUFFERS)
		count = EMU_MAX_BUFFERS;

	cancel_buffers(h);
	if ((err = setup_buffer_format(h))) {
		free_buffers(h);
		return err;
	}

	/* Size the device file to hold every buffer (nothing maps it now). */
	if (ftruncate(h->data_fd, (off_t)(count * h->stride)) != 0) {
		err = errno;
		free_buffers(h);
		return err;
	}
	h->nbufs = count;
	memset(h->bufs, 0, sizeof(h->bufs));
	rb->count = count;
	return 0;
}

/* Common checks of QUERYBUF/QBUF/DQBUF. */
static int check_buffer_arg(struct emu_handle *h, const struct v4l2_buffer *b, bool need_index)
{
	if (b->type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	if (h->fileio)
		return EBUSY;   /* read() owns the queue */
	if (!h->nbufs && other_owner(h))
		return EBUSY;
	if (!h->nbufs)
		return EINVAL;
	if (need_index && b->index >= h->nbufs)
		return EINVAL;
	return 0;
}

static int vidioc_querybuf(struct emu_handle *h, struct v4l2_buffer *b)
{
	int err = check_buffer_arg(h, b, true);

	if (err)
		return err;
	fill_v4l2_buffer(h, b->index, mapped_mask(h), b);
	return 0;
}

static int vidioc_qbuf(struct emu_handle *h, struct v4l2_buffer *b)
{
	int err = check_buffer_arg(h, b, true);

	if (err)
		return err;
	if (b->memory != V4L2_MEMORY_MMAP)
		return EINVAL;
	if (b->flags & V4L2_BUF_FLAG_REQUEST_FD)
		return EBADR;    /* as vb2 does for queues without request support */
	unsigned idx = b->index;
	struct emu_buffer *eb = &h->bufs[idx];

	if (eb->state != BUF_DEQUEUED)
		return EINVAL;
	uint64_t now = now_ns();

	if (h->streaming)
		advance_stream(h, now);
	eb->state = BUF_QUEUED;
	eb->queued_ns = now;
	h->queue[(h->q_head + h->q_count) % EMU_MAX_BUFFERS] = idx;
	h->q_count++;
	fill_v4l2_buffer(h, idx, mapped_mask(h), b);
	return 0;
}

static int vidioc_dqbuf(struct emu_handle *h, struct v4l2_buffer *b)
{
	int err = check_buffer_arg(h, b, false);

	if (err)
		return err;
	if (b->memory != V4L2_MEMORY_MMAP)
		return EINVAL;
	for (;;) {
		if (h->closing)
			return EBADF;
		if (is_unplugged(h))
			return ENODEV;
		if (!h->streaming || !h->nbufs)
			return EINVAL;   /* as vb2: "streaming off, will not wait for buffers" */
		uint64_t now = now_ns();

		advance_stream(h, now);
		if (h->d_count) {
			unsigned idx = h->done[h->d_head];

			h->d_head = (h->d_head + 1) % EMU_MAX_BUFFERS;
			h->d_count--;
			h->bufs[idx].state = BUF_DEQUEUED;   /* no DONE flag once dequeued */
			fill_v4l2_buffer(h, idx, mapped_mask(h), b);
			return 0;
		}
		if (fd_nonblocking(h))
			return EAGAIN;
		wait_step(h, next_event_ns(h));
	}
}

/*
 * STREAMON: re-read videoN.timing, number the stream, seed its random draws
 * with seed + stream number, and start the sensor's frame clock.
 */
static void start_streaming(struct emu_handle *h)
{
	struct emu_state st;
	uint32_t last;

	load_timing(h);
	state_begin(h, &st);
	st.streaming = 1;
	h->stream_no = st.streams;
	if (truth_last_stream(h, &last) && last >= h->stream_no)
		h->stream_no = last + 1;
	st.streams = h->stream_no + 1;
	state_end(h, &st, true);
	h->rng = h->timing.seed + h->stream_no;
	h->ts_eof = h->timing.eof;
	h->vblank = (uint32_t)st.ctrl[ctrl_index(V4L2_CID_VBLANK)];
	h->vblank_seen_ns = st.vblank_set_ns;
	h->start_ns = now_ns();
	double delay = h->timing.startup_delay_us * 1000.0;

	if (h->timing.startup_jitter_us > 0)
		delay += rng_uniform(&h->rng) * h->timing.startup_jitter_us * 1000.0;
	h->next_start_ns = h->start_ns + (uint64_t)delay;
	h->next_start_frac = delay - floor(delay);
	h->clock_ns = h->start_ns;
	h->next_seq = 0;
	h->f_head = h->f_count = 0;
	h->streaming = true;
}

static int vidioc_streamon(struct emu_handle *h, const int *type)
{
	int err;

	if (*type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	if ((err = check_prio(h)))
		return err;
	if (h->fileio)
		return EBUSY;
	if (!h->nbufs)
		return other_owner(h) ? EBUSY : EINVAL;
	if (h->streaming)
		return 0;
	start_streaming(h);
	return 0;
}

static int vidioc_streamoff(struct emu_handle *h, const int *type)
{
	int err;

	if (*type != V4L2_BUF_TYPE_VIDEO_CAPTURE)
		return EINVAL;
	if ((err = check_prio(h)))
		return err;
	if (h->fileio)
		return EBUSY;
	if (!h->nbufs)
		return other_owner(h) ? EBUSY : 0;
	stop_streaming(h);
	return 0;
}

/* ---- dispatcher ---- */

static bool is_implemented(unsigned int request)
{
	switch (request) {
	case VIDIOC_QUERYCAP: case VIDIOC_LOG_STATUS:
	case VIDIOC_ENUMINPUT: case VIDIOC_G_INPUT: case VIDIOC_S_INPUT:
	case VIDIOC_G_PRIORITY: case VIDIOC_S_PRIORITY:
	case VIDIOC_ENUM_FMT: case VIDIOC_ENUM_FRAMESIZES: case VIDIOC_ENUM_FRAMEINTERVALS:
	case VIDIOC_G_FMT: case VIDIOC_TRY_FMT: case VIDIOC_S_FMT:
	case VIDIOC_G_PARM: case VIDIOC_S_PARM:
	case VIDIOC_QUERYCTRL: case VIDIOC_QUERY_EXT_CTRL: case VIDIOC_QUERYMENU:
	case VIDIOC_G_CTRL: case VIDIOC_S_CTRL:
	case VIDIOC_G_EXT_CTRLS: case VIDIOC_TRY_EXT_CTRLS: case VIDIOC_S_EXT_CTRLS:
	case VIDIOC_SUBSCRIBE_EVENT: case VIDIOC_UNSUBSCRIBE_EVENT: case VIDIOC_DQEVENT:
	case VIDIOC_REQBUFS: case VIDIOC_QUERYBUF: case VIDIOC_QBUF: case VIDIOC_DQBUF:
	case VIDIOC_STREAMON: case VIDIOC_STREAMOFF:
		return true;
	default:
		/* CREATE_BUFS, PREPARE_BUF, EXPBUF, cropping/selection,
		 * standards, DV timings, tuners, audio, overlay, JPEG, codec
		 * and debug ioctls: the API reports these as ENOTTY. */
		return false;
	}
}

static int dispatch(struct emu_handle *h, unsigned int request, void *arg)
{
	if (is_unplugged(h))
		return ENODEV;
	if (!is_implemented(request))
		return ENOTTY;
	if (!arg && request != VIDIOC_LOG_STATUS)
		return EFAULT;

	switch (request) {
	case VIDIOC_QUERYCAP:
		return vidioc_querycap(h, arg);
	case VIDIOC_LOG_STATUS:
		return 0;

	case VIDIOC_ENUMINPUT:
		return vidioc_enuminput(arg);
	case VIDIOC_G_INPUT:
		*(int *)arg = 0;
		return 0;
	case VIDIOC_S_INPUT: {
		int err = check_prio(h);

		if (err)
			return err;
		return *(int *)arg == 0 ? 0 : EINVAL;
	}
	case VIDIOC_G_PRIORITY:
		return vidioc_g_priority(h, arg);
	case VIDIOC_S_PRIORITY:
		return vidioc_s_priority(h, arg);

	case VIDIOC_ENUM_FMT:
		return vidioc_enum_fmt(h, arg);
	case VIDIOC_ENUM_FRAMESIZES:
		return vidioc_enum_framesizes(h, arg);
	case VIDIOC_ENUM_FRAMEINTERVALS:
		return vidioc_enum_frameintervals(h, arg);
	case VIDIOC_G_FMT:
		return vidioc_g_fmt(h, arg);
	case VIDIOC_TRY_FMT:
		return vidioc_try_fmt(h, arg);
	case VIDIOC_S_FMT:
		return vidioc_s_fmt(h, arg);
	case VIDIOC_G_PARM:
		return vidioc_g_parm(h, arg);
	case VIDIOC_S_PARM:
		return vidioc_s_parm(h, arg);

	case VIDIOC_QUERYCTRL:
		return vidioc_queryctrl(h, arg);
	case VIDIOC_QUERY_EXT_CTRL:
		return vidioc_query_ext_ctrl(h, arg);
	case VIDIOC_QUERYMENU:
		return vidioc_querymenu(h, arg);
	case VIDIOC_G_CTRL:
		return vidioc_g_ctrl(h, arg);
	case VIDIOC_S_CTRL:
		return vidioc_s_ctrl(h, arg);
	case VIDIOC_G_EXT_CTRLS:
		return vidioc_ext_ctrls(h, arg, EXT_GET);
	case VIDIOC_TRY_EXT_CTRLS:
		return vidioc_ext_ctrls(h, arg, EXT_TRY);
	case VIDIOC_S_EXT_CTRLS:
		return vidioc_ext_ctrls(h, arg, EXT_SET);

	case VIDIOC_SUBSCRIBE_EVENT:
		return vidioc_subscribe_event(h, arg);
	case VIDIOC_UNSUBSCRIBE_EVENT:
		return vidioc_unsubscribe_event(h, arg);
	case VIDIOC_DQEVENT:
		return vidioc_dqevent(h, arg);

	case VIDIOC_REQBUFS:
		return vidioc_reqbufs(h, arg);
	case VIDIOC_QUERYBUF:
		return vidioc_querybuf(h, arg);
	case VIDIOC_QBUF:
		return vidioc_qbuf(h, arg);
	case VIDIOC_DQBUF:
		return vidioc_dqbuf(h, arg);
	case VIDIOC_STREAMON:
		return vidioc_streamon(h, arg);
	case VIDIOC_STREAMOFF:
		return vidioc_streamoff(h, arg);

	default:
		return ENOTTY;
	}
}

/* ======================================================================== */
/* 9. Plugin entry points                                                   */
/* ======================================================================== */

/* Is @name "videoN" with N in 0..63 (no leading zeros)? */
static bool parse_video_name(const char *name, unsigned *index)
{
	if (strncmp(name, "video", 5) != 0)
		return false;
	const char *d = name + 5;
	size_t n = strlen(d);

	if (n < 1 || n > 2 || (n == 2 && d[0] == '0'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (d[i] < '0' || d[i] > '9')
			return false;
	unsigned v = (unsigned)atoi(d);

	if (v >= EMU_MAX_DEVICES)
		return false;
	*index = v;
	return true;
}

static void *plugin_init(int fd)
{
	char link[64], path[PATH_MAX], dir_real[PATH_MAX];
	struct stat st;
	unsigned index;

	/* Only regular files can be emulated devices (real nodes are char devices). */
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return NULL;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);

	if (n <= 0)
		return NULL;
	path[n] = '\0';

	const char *dir = getenv(EMU_ENV_DIR);

	if (!dir || !*dir)
		dir = EMU_DEFAULT_DIR;
	if (!realpath(dir, dir_real))
		return NULL;

	char *slash = strrchr(path, '/');

	if (!slash)
		return NULL;
	*slash = '\0';
	const char *base = slash + 1;

	if (strcmp(path, dir_real) != 0 || !parse_video_name(base, &index))
		return NULL;

	struct emu_handle *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->fd = fd;
	h->index = index;
	h->st_dev = st.st_dev;
	h->st_ino = st.st_ino;
	if (snprintf(h->unplug_path, sizeof(h->unplug_path), "%s/video%u.unplugged",
		     dir_real, index) >= (int)sizeof(h->unplug_path) ||
	    snprintf(h->lock_path, sizeof(h->lock_path), "%s/video%u.lock",
		     dir_real, index) >= (int)sizeof(h->lock_path) ||
	    snprintf(h->state_path, sizeof(h->state_path), "%s/video%u.state",
		     dir_real, index) >= (int)sizeof(h->state_path) ||
	    snprintf(h->timing_path, sizeof(h->timing_path), "%s/video%u.timing",
		     dir_real, index) >= (int)sizeof(h->timing_path) ||
	    snprintf(h->truth_path, sizeof(h->truth_path), "%s/video%u.truth",
		     dir_real, index) >= (int)sizeof(h->truth_path)) {
		free(h);
		return NULL;
	}
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->idle, NULL);
	h->lock_fd = -1;
	h->data_fd = -1;
	h->fileio_cur = -1;
	h->prio = V4L2_PRIORITY_DEFAULT;
	h->formats = node_formats(index);
	load_timing(h);
	h->state_fd = open_sidecar(h->state_path);
	if (h->state_fd < 0) {
		/* Not writable for us: keep the state per process, seeded from
		 * the file if it can at least be read. */
		int ro = open(h->state_path, O_RDONLY | O_CLOEXEC);

		pthread_mutex_lock(&g_lock);
		if (!g_mem_state_valid[index]) {
			struct emu_state *st = &g_mem_state[index];

			if (ro < 0 || pread(ro, st, sizeof(*st), 0) != (ssize_t)sizeof(*st))
				state_defaults(st);
			state_sanitize(st, h->formats);
			g_mem_state_valid[index] = true;
		}
		pthread_mutex_unlock(&g_lock);
		if (ro >= 0)
			close(ro);
	}

	pthread_mutex_lock(&g_lock);
	h->next = g_handles;
	g_handles = h;
	pthread_mutex_unlock(&g_lock);
	return h;
}

static void plugin_close(void *priv)
{
	struct emu_handle *h = priv;

	/* Make blocked calls in other threads (DQBUF, DQEVENT) return, and
	 * wait for them to leave before freeing the handle. */
	pthread_mutex_lock(&h->lock);
	h->closing = true;
	while (h->active_calls)
		pthread_cond_wait(&h->idle, &h->lock);
	if (h->nbufs || h->lock_fd >= 0)
		free_buffers(h);
	pthread_mutex_unlock(&h->lock);

	pthread_mutex_lock(&g_lock);
	for (struct emu_handle **pp = &g_handles; *pp; pp = &(*pp)->next) {
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	}
	while (h->pollers) {   /* a camrig_v4l2_emulator_poll() still looks at it */
		pthread_mutex_unlock(&g_lock);
		sleep_until_ns(now_ns() + 100000);
		pthread_mutex_lock(&g_lock);
	}
	pthread_mutex_unlock(&g_lock);

	if (h->data_fd >= 0)
		close(h->data_fd);
	if (h->state_fd >= 0)
		close(h->state_fd);
	pthread_cond_destroy(&h->idle);
	pthread_mutex_destroy(&h->lock);
	free(h->frame);
	free(h);
}

/* CAMRIG_V4L2_EMULATOR_DEBUG=1: log every ioctl and its result to stderr. */
static bool debug_enabled(void)
{
	static int enabled = -1;

	if (enabled < 0) {
		const char *e = getenv("CAMRIG_V4L2_EMULATOR_DEBUG");

		enabled = e && *e && strcmp(e, "0") != 0;
	}
	return enabled;
}

static void debug_log(const struct emu_handle *h, unsigned int request, const void *arg, int err)
{
	unsigned nr = _IOC_NR(request);

	if (request == VIDIOC_QBUF || request == VIDIOC_DQBUF || request == VIDIOC_QUERYBUF) {
		const struct v4l2_buffer *b = arg;

		fprintf(stderr, "camrig-emu video%u: ioctl nr %u index %u flags 0x%x seq %u -> %s\n",
			h->index, nr, b ? b->index : 0, b ? b->flags : 0, b ? b->sequence : 0,
			err ? strerror(err) : "ok");
	} else {
		fprintf(stderr, "camrig-emu video%u: ioctl nr %u (0x%08x) -> %s\n",
			h->index, nr, request, err ? strerror(err) : "ok");
	}
}

static int plugin_ioctl(void *priv, int fd, unsigned long int request, void *arg)
{
	struct emu_handle *h = priv;
	int err;

	(void)fd;
	pthread_mutex_lock(&h->lock);
	if (h->closing) {
		pthread_mutex_unlock(&h->lock);
		errno = EBADF;
		return -1;
	}
	h->active_calls++;
	/* Callers may pass a sign-extended int; the kernel ignores the upper bits. */
	err = dispatch(h, (unsigned int)request, arg);
	if (debug_enabled())
		debug_log(h, (unsigned int)request, arg, err);
	h->active_calls--;
	if (h->closing && h->active_calls == 0)
		pthread_cond_broadcast(&h->idle);
	pthread_mutex_unlock(&h->lock);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/*
 * read(): vb2-style file I/O.  The first read() takes ownership of the device
 * and starts streaming into EMU_READ_BUFFERS private buffers; each read()
 * returns bytes of the oldest captured frame (a frame may be read in several
 * pieces), blocking for the next frame unless O_NONBLOCK (then EAGAIN).
 * EBUSY while MMAP buffers exist.  It ends when the fd is closed.
 */
static int do_read(struct emu_handle *h, uint8_t *dst, size_t n, size_t *done)
{
	int err;

	*done = 0;
	if (!h->fileio) {
		if (h->nbufs || other_owner(h))
			return EBUSY;
		if ((err = acquire_ownership(h)))
			return err;
		if ((err = setup_buffer_format(h))) {
			release_ownership(h);
			return err;
		}
		h->fileio = true;
		h->fileio_cur = -1;
		h->fileio_pos = 0;
		h->nbufs = EMU_READ_BUFFERS;
		memset(h->bufs, 0, sizeof(h->bufs));
		cancel_buffers(h);
		uint64_t now = now_ns();

		for (unsigned i = 0; i < h->nbufs; i++) {
			h->bufs[i].state = BUF_QUEUED;
			h->bufs[i].queued_ns = now;
			h->queue[h->q_count++] = i;
		}
		start_streaming(h);
	}
	while (h->fileio_cur < 0) {
		if (h->closing)
			return EBADF;
		if (is_unplugged(h))
			return ENODEV;
		advance_stream(h, now_ns());
		if (h->d_count) {
			h->fileio_cur = (int)h->done[h->d_head];
			h->d_head = (h->d_head + 1) % EMU_MAX_BUFFERS;
			h->d_count--;
			h->fileio_pos = 0;
			const struct emu_buffer *b = &h->bufs[h->fileio_cur];

			render_frame(h, b->sequence, b->timestamp_ns, b->true_start_ns);
			break;
		}
		if (fd_nonblocking(h))
			return EAGAIN;
		wait_step(h, next_event_ns(h));
	}
	size_t left = h->sizeimage - h->fileio_pos;
	size_t k = n < left ? n : left;

	memcpy(dst, h->frame + h->fileio_pos, k);
	h->fileio_pos += k;
	*done = k;
	if (h->fileio_pos == h->sizeimage) {   /* frame consumed: requeue its buffer */
		unsigned idx = (unsigned)h->fileio_cur;

		advance_stream(h, now_ns());
		h->bufs[idx].state = BUF_QUEUED;
		h->bufs[idx].queued_ns = now_ns();
		h->queue[(h->q_head + h->q_count) % EMU_MAX_BUFFERS] = idx;
		h->q_count++;
		h->fileio_cur = -1;
	}
	return 0;
}

static ssize_t plugin_read(void *priv, int fd, void *buffer, size_t n)
{
	struct emu_handle *h = priv;
	size_t done = 0;
	int err;

	(void)fd;
	pthread_mutex_lock(&h->lock);
	if (h->closing) {
		pthread_mutex_unlock(&h->lock);
		errno = EBADF;
		return -1;
	}
	h->active_calls++;
	if (is_unplugged(h))
		err = ENODEV;
	else if (!buffer && n)
		err = EFAULT;
	else
		err = n ? do_read(h, buffer, n, &done) : 0;
	h->active_calls--;
	if (h->closing && h->active_calls == 0)
		pthread_cond_broadcast(&h->idle);
	pthread_mutex_unlock(&h->lock);
	if (err) {
		errno = err;
		return -1;
	}
	return (ssize_t)done;
}

static ssize_t plugin_write(void *priv, int fd, const void *buffer, size_t n)
{
	(void)priv; (void)fd; (void)buffer; (void)n;
	errno = EINVAL;
	return -1;
}

/*
 * poll() for an emulated fd, without waiting: the revents a driver's poll
 * would return for @events now (POLLPRI: a control event is pending;
 * POLLIN/POLLRDNORM: a buffer is ready; POLLERR: not streaming; on
 * unplug POLLERR | POLLHUP | POLLPRI), or -1 if @fd is not an emulated
 * device of this process.  libv4l2 does not route poll()/select(), so the
 * LD_PRELOAD shim (camrig_v4l2_sysfs_shim.c) calls this.
 */
__attribute__((visibility("default")))
int camrig_v4l2_emulator_poll(int fd, short events)
{
	struct emu_handle *h;
	int revents = 0;

	pthread_mutex_lock(&g_lock);
	for (h = g_handles; h && h->fd != fd; h = h->next)
		;
	if (h)
		h->pollers++;
	pthread_mutex_unlock(&g_lock);
	if (!h)
		return -1;

	pthread_mutex_lock(&h->lock);
	if (h->closing) {
		revents = POLLNVAL;
	} else if (is_unplugged(h)) {
		revents = POLLERR | POLLHUP | POLLPRI;
	} else {
		if (events & POLLPRI) {
			refresh_events(h);
			if (h->ev_count)
				revents |= POLLPRI;
		}
		if (events & (POLLIN | POLLRDNORM)) {
			if (!h->streaming) {
				revents |= POLLERR;   /* vb2: nothing to wait for */
			} else {
				advance_stream(h, now_ns());
				if (h->d_count || (h->fileio && h->fileio_cur >= 0))
					revents |= events & (POLLIN | POLLRDNORM);
			}
		}
	}
	pthread_mutex_unlock(&h->lock);

	pthread_mutex_lock(&g_lock);
	h->pollers--;
	pthread_mutex_unlock(&g_lock);
	return revents;
}

__attribute__((visibility("default")))
const struct libv4l_dev_ops libv4l2_plugin = {
	.init = plugin_init,
	.close = plugin_close,
	.ioctl = plugin_ioctl,
	.read = plugin_read,
	.write = plugin_write,
};
