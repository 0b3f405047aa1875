/*
 * camrig_v4l2_sysfs_shim.c - LD_PRELOAD helper for v4l2-ctl / v4l2-compliance.
 *
 * Both tools decide what kind of device a path is before opening it:
 * mi_media_detect_type() stat()s the path and reads
 * /sys/dev/char/<major>:<minor>/uevent of its st_rdev, looking for
 * "DEVNAME=videoN".  An emulated device is a regular file (st_rdev 0:0), for
 * which no such sysfs file exists, so the tools give up with "Unable to
 * detect what device ... is" before libv4l2 (and the emulator plugin) is
 * ever reached.
 *
 * This shim answers the read of /sys/dev/char/0:0/uevent - which no real
 * device has - with "DEVNAME=video0", so the tools treat the path as a video
 * node and open it with v4l2_open() (with -w), where the plugin takes over.
 * The tools also issue a few plain ioctl() calls on the fd (e.g. v4l2-ctl
 * validates "--set-fmt-video pixelformat=..." that way); on a real node these
 * reach the driver, here they would reach a plain file.  So ioctl() is routed
 * through v4l2_ioctl(), which hands fds that libv4l2 does not manage straight
 * to the kernel, unchanged.
 *
 * Waiting: libv4l2 does not route select()/poll()/epoll, so on an emulated
 * node they would see a regular file (always readable, never POLLPRI, and
 * epoll_ctl() refuses it).  The shim answers select(), pselect(), poll(),
 * ppoll() and epoll_ctl()/epoll_wait()/epoll_pwait() for emulated fds the
 * way a driver's poll would: readable when a buffer is ready (or, as vb2,
 * with POLLERR when not streaming), exceptional (POLLPRI) when a control
 * event is pending.  It asks the loaded plugin, through the function
 * camrig_v4l2_emulator_poll() it exports, and re-checks every millisecond
 * until the timeout; other fds in the same call are waited on as usual.
 * epoll is level-triggered only for emulated fds (EPOLLET/EPOLLONESHOT are
 * ignored for them).
 *
 * Names of emulated formats: libv4lconvert describes the formats it adds
 * (V4L2_FMT_FLAG_EMULATED: BGR3, YU12, YV12, and RGB3 where the device lacks
 * it) by their fourcc, e.g. "BGR3", where the kernel would say "24-bit BGR
 * 8-8-8"; v4l2-compliance -w fails every device whose formats libv4lconvert
 * extends for that.  v4l2_ioctl(VIDIOC_ENUM_FMT) here gives those formats
 * the kernel's description.  Nothing else about them changes.
 *
 * Only the tools need this shim; applications that use v4l2_open() and
 * v4l2_ioctl() (as the libv4l2 API requires) do not.
 *
 *   LD_PRELOAD=/path/to/libcamrig-v4l2-sysfs-shim.so v4l2-ctl -w -d DEV ...
 *
 * Optional: with CAMRIG_V4L2_SHIM_NO_CONVERSION=1 in the environment,
 * v4l2_open() is replaced by open() + v4l2_fd_open(fd, V4L2_DISABLE_CONVERSION),
 * so libv4l2 passes every call straight to the plugin instead of adding its
 * emulated formats (BGR3, YU12, YV12), merged frame sizes and emulated
 * V4L2_CAP_READWRITE.  That shows the plugin's own behaviour, e.g. to
 * v4l2-compliance -w.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <libv4l2.h>
#include <linux/videodev2.h>

#define FAKE_UEVENT_PATH "/sys/dev/char/0:0/uevent"

static const char fake_uevent[] = "MAJOR=0\nMINOR=0\nDEVNAME=video0\n";

static int is_fake(const char *path)
{
	return path && strcmp(path, FAKE_UEVENT_PATH) == 0;
}

/* An fd reading as the fake uevent file (for open()-based readers). */
static int fake_fd(void)
{
	int fd = memfd_create("camrig-fake-uevent", MFD_CLOEXEC);

	if (fd < 0)
		return -1;
	if (write(fd, fake_uevent, sizeof(fake_uevent) - 1) != (ssize_t)(sizeof(fake_uevent) - 1) ||
	    lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* libstdc++'s ifstream reads through fileno(), so the FILE needs a real fd. */
static FILE *fake_fopen(void)
{
	int fd = fake_fd();
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;

	if (!f && fd >= 0)
		close(fd);
	return f;
}

#define DEFINE_OPEN(name)							\
__attribute__((visibility("default")))						\
int name(const char *path, int flags, ...)					\
{										\
	static int (*real)(const char *, int, ...);				\
	mode_t mode = 0;							\
										\
	if (flags & (O_CREAT | O_TMPFILE)) {					\
		va_list ap;							\
		va_start(ap, flags);						\
		mode = (mode_t)va_arg(ap, int);					\
		va_end(ap);							\
	}									\
	if (is_fake(path))							\
		return fake_fd();						\
	if (!real)								\
		real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);	\
	return real(path, flags, mode);						\
}

DEFINE_OPEN(open)
DEFINE_OPEN(open64)

__attribute__((visibility("default")))
FILE *fopen(const char *path, const char *mode)
{
	static FILE *(*real_fopen)(const char *, const char *);

	if (is_fake(path))
		return fake_fopen();
	if (!real_fopen)
		real_fopen = (FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen");
	return real_fopen(path, mode);
}

__attribute__((visibility("default")))
FILE *fopen64(const char *path, const char *mode)
{
	static FILE *(*real_fopen64)(const char *, const char *);

	if (is_fake(path))
		return fake_fopen();
	if (!real_fopen64)
		real_fopen64 = (FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen64");
	return real_fopen64(path, mode);
}

__attribute__((visibility("default")))
int v4l2_open(const char *file, int oflag, ...)
{
	static int (*real_v4l2_open)(const char *, int, ...);
	static int (*real_v4l2_fd_open)(int, int);
	const char *nc = getenv("CAMRIG_V4L2_SHIM_NO_CONVERSION");
	mode_t mode = 0;

	if (oflag & (O_CREAT | O_TMPFILE)) {
		va_list ap;

		va_start(ap, oflag);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	if (!real_v4l2_open)
		real_v4l2_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "v4l2_open");
	if (!nc || strcmp(nc, "1") != 0)
		return real_v4l2_open(file, oflag, mode);

	if (!real_v4l2_fd_open)
		real_v4l2_fd_open = (int (*)(int, int))dlsym(RTLD_NEXT, "v4l2_fd_open");
	int fd = open(file, oflag, mode);

	if (fd < 0)
		return -1;
	if (real_v4l2_fd_open(fd, V4L2_DISABLE_CONVERSION) < 0) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/* The kernel's descriptions (v4l_fill_fmtdesc()) of libv4lconvert's
 * destination formats. */
static const char *kernel_description(uint32_t fourcc)
{
	switch (fourcc) {
	case V4L2_PIX_FMT_RGB24:
		return "24-bit RGB 8-8-8";
	case V4L2_PIX_FMT_BGR24:
		return "24-bit BGR 8-8-8";
	case V4L2_PIX_FMT_YUV420:
		return "Planar YUV 4:2:0";
	case V4L2_PIX_FMT_YVU420:
		return "Planar YVU 4:2:0";
	default:
		return NULL;
	}
}

__attribute__((visibility("default")))
int v4l2_ioctl(int fd, unsigned long request, ...)
{
	static int (*real_v4l2_ioctl)(int, unsigned long, ...);
	va_list ap;
	void *arg;

	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real_v4l2_ioctl)
		real_v4l2_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "v4l2_ioctl");
	int r = real_v4l2_ioctl(fd, request, arg);

	if (r == 0 && (unsigned int)request == VIDIOC_ENUM_FMT && arg) {
		struct v4l2_fmtdesc *d = arg;
		const char *name = kernel_description(d->pixelformat);

		if ((d->flags & V4L2_FMT_FLAG_EMULATED) && name)
			snprintf((char *)d->description, sizeof(d->description), "%s", name);
	}
	return r;
}

__attribute__((visibility("default")))
int ioctl(int fd, unsigned long request, ...)
{
	static int (*real_v4l2_ioctl)(int, unsigned long, ...);
	va_list ap;
	void *arg;

	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real_v4l2_ioctl)
		real_v4l2_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_DEFAULT, "v4l2_ioctl");
	if (!real_v4l2_ioctl)   /* libv4l2 not loaded: behave like libc */
		return (int)syscall(SYS_ioctl, fd, request, arg);
	return real_v4l2_ioctl(fd, request, arg);
}

/* ------------------------------------------------------------------------ */
/* Waiting on emulated fds                                                  */
/* ------------------------------------------------------------------------ */

#define PLUGIN_NAME "/libcamrig-v4l2-emulator.so"
#define WAIT_STEP_NS 1000000LL          /* re-check emulated fds every 1 ms */

typedef int (*emu_poll_fn)(int fd, short events);

static int find_plugin(struct dl_phdr_info *info, size_t size, void *data)
{
	size_t n = strlen(info->dlpi_name), k = strlen(PLUGIN_NAME);

	(void)size;
	if (n < k || strcmp(info->dlpi_name + n - k, PLUGIN_NAME) != 0)
		return 0;
	snprintf(data, PATH_MAX, "%s", info->dlpi_name);
	return 1;
}

/* The plugin's camrig_v4l2_emulator_poll(), once libv4l2 has loaded it. */
static emu_poll_fn plugin_poll(void)
{
	static emu_poll_fn fn;
	char path[PATH_MAX];

	if (fn)
		return fn;
	if (dl_iterate_phdr(find_plugin, path) != 1)
		return NULL;
	void *h = dlopen(path, RTLD_NOLOAD | RTLD_NOW);   /* the plugin stays loaded (-z nodelete) */

	if (h)
		fn = (emu_poll_fn)dlsym(h, "camrig_v4l2_emulator_poll");
	return fn;
}

static bool is_emulated(emu_poll_fn fn, int fd)
{
	return fn && fd >= 0 && fn(fd, 0) >= 0;
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int real_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
	static int (*real)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);

	if (!real)
		real = (int (*)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))
			dlsym(RTLD_NEXT, "ppoll");
	return real(fds, n, t, mask);
}

/*
 * ppoll() over fds of which some are emulated: those are asked, the others
 * polled for real, every WAIT_STEP_NS until something is ready or @timeout
 * (NULL: none) passes.  Sets *handled = false (and does nothing) if no fd
 * is emulated.
 */
static int emu_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		     const sigset_t *mask, bool *handled)
{
	emu_poll_fn fn = plugin_poll();
	nfds_t i;

	*handled = false;
	if (!fn)
		return 0;
	for (i = 0; i < n && !is_emulated(fn, fds[i].fd); i++)
		;
	if (i == n)
		return 0;
	*handled = true;

	struct pollfd *real = malloc(sizeof(*real) * (n ? n : 1));
	bool *emu = malloc(sizeof(*emu) * (n ? n : 1));

	if (!real || !emu) {
		free(real);
		free(emu);
		errno = ENOMEM;
		return -1;
	}
	for (i = 0; i < n; i++) {
		emu[i] = is_emulated(fn, fds[i].fd);
		real[i] = fds[i];
		if (emu[i])
			real[i].fd = -1;   /* ignored by the kernel */
	}
	int64_t deadline = timeout ? mono_ns() + timeout->tv_sec * 1000000000LL + timeout->tv_nsec : INT64_MAX;
	int result;

	for (;;) {
		int count = 0;

		for (i = 0; i < n; i++) {
			if (!emu[i])
				continue;
			int r = fn(fds[i].fd, fds[i].events);

			if (r < 0)
				r = POLLNVAL;   /* closed meanwhile */
			fds[i].revents = (short)(r & (fds[i].events | POLLERR | POLLHUP | POLLNVAL));
			count += fds[i].revents != 0;
		}
		int64_t left = deadline - mono_ns();
		int64_t wait = count || left <= 0 ? 0 : left < WAIT_STEP_NS ? left : WAIT_STEP_NS;
		struct timespec ts = { (time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL) };
		int r = real_ppoll(real, n, &ts, mask);

		if (r < 0) {
			result = -1;
			break;
		}
		for (i = 0; i < n; i++) {
			if (emu[i])
				continue;
			fds[i].revents = real[i].revents;
			count += fds[i].revents != 0;
		}
		if (count || deadline - mono_ns() <= 0) {
			result = count;
			break;
		}
	}
	int err = errno;

	free(real);
	free(emu);
	errno = err;
	return result;
}

__attribute__((visibility("default")))
int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask)
{
	bool handled;
	int r = emu_ppoll(fds, n, timeout, mask, &handled);

	return handled ? r : real_ppoll(fds, n, timeout, mask);
}

__attribute__((visibility("default")))
int poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
	struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };

	return ppoll(fds, n, timeout_ms < 0 ? NULL : &ts, NULL);
}

/* select()/pselect() as the kernel maps them onto poll. */
#define SEL_IN  (POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR)
#define SEL_OUT (POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR)
#define SEL_EX  (POLLPRI)

static int emu_pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
		       const sigset_t *mask, bool *handled)
{
	emu_poll_fn fn = plugin_poll();
	struct pollfd *fds;
	nfds_t n = 0;
	bool any = false;

	*handled = false;
	if (!fn || nfds <= 0 || nfds > FD_SETSIZE)
		return 0;
	for (int fd = 0; fd < nfds; fd++)
		if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) &&
		    is_emulated(fn, fd))
			any = true;
	if (!any)
		return 0;
	if (!(fds = calloc((size_t)nfds, sizeof(*fds)))) {
		*handled = true;
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (r && FD_ISSET(fd, r))
			ev |= POLLIN | POLLRDNORM;
		if (w && FD_ISSET(fd, w))
			ev |= POLLOUT | POLLWRNORM;
		if (e && FD_ISSET(fd, e))
			ev |= POLLPRI;
		if (ev) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	int res = emu_ppoll(fds, n, timeout, mask, handled);

	*handled = true;
	if (res >= 0) {
		int count = 0;

		for (nfds_t i = 0; i < n; i++) {
			if (fds[i].revents & POLLNVAL) {
				free(fds);
				errno = EBADF;
				return -1;
			}
		}
		if (r)
			FD_ZERO(r);
		if (w)
			FD_ZERO(w);
		if (e)
			FD_ZERO(e);
		for (nfds_t i = 0; i < n; i++) {
			short ev = fds[i].events, rv = fds[i].revents;

			if ((ev & POLLIN) && (rv & SEL_IN)) {
				FD_SET(fds[i].fd, r);
				count++;
			}
			if ((ev & POLLOUT) && (rv & SEL_OUT)) {
				FD_SET(fds[i].fd, w);
				count++;
			}
			if ((ev & POLLPRI) && (rv & SEL_EX)) {
				FD_SET(fds[i].fd, e);
				count++;
			}
		}
		res = count;
	}
	int err = errno;

	free(fds);
	errno = err;
	return res;
}

__attribute__((visibility("default")))
int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
	    const sigset_t *mask)
{
	static int (*real)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
	bool handled;
	int res = emu_pselect(nfds, r, w, e, timeout, mask, &handled);

	if (handled)
		return res;
	if (!real)
		real = (int (*)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *))
			dlsym(RTLD_NEXT, "pselect");
	return real(nfds, r, w, e, timeout, mask);
}

__attribute__((visibility("default")))
int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	static int (*real)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	struct timespec ts;
	bool handled;
	int64_t start = mono_ns();

	if (tv) {
		ts.tv_sec = tv->tv_sec;
		ts.tv_nsec = tv->tv_usec * 1000L;
	}
	int res = emu_pselect(nfds, r, w, e, tv ? &ts : NULL, NULL, &handled);

	if (handled) {
		if (tv) {   /* Linux: the timeout is updated with the time not slept */
			int64_t left = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec - (mono_ns() - start);

			if (left < 0)
				left = 0;
			tv->tv_sec = (time_t)(left / 1000000000LL);
			tv->tv_usec = (suseconds_t)(left % 1000000000LL / 1000);
		}
		return res;
	}
	if (!real)
		real = (int (*)(int, fd_set *, fd_set *, fd_set *, struct timeval *))dlsym(RTLD_NEXT, "select");
	return real(nfds, r, w, e, tv);
}

/* ---- epoll: emulated fds are kept here, per epoll fd ---- */

#define EPOLL_MAX 64

struct ep_entry {
	int epfd, fd;
	struct epoll_event ev;
};

static struct ep_entry ep_entries[EPOLL_MAX];
static int ep_count;
static pthread_mutex_t ep_lock = PTHREAD_MUTEX_INITIALIZER;

static int ep_find(int epfd, int fd)
{
	for (int i = 0; i < ep_count; i++)
		if (ep_entries[i].epfd == epfd && (fd < 0 || ep_entries[i].fd == fd))
			return i;
	return -1;
}

static void ep_forget(int epfd)
{
	int i;

	pthread_mutex_lock(&ep_lock);
	while ((i = ep_find(epfd, -1)) >= 0)
		ep_entries[i] = ep_entries[--ep_count];
	pthread_mutex_unlock(&ep_lock);
}

__attribute__((visibility("default")))
int epoll_create1(int flags)
{
	static int (*real)(int);

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "epoll_create1");
	int fd = real(flags);

	if (fd >= 0)
		ep_forget(fd);   /* entries of an earlier epoll fd with this number */
	return fd;
}

__attribute__((visibility("default")))
int epoll_create(int size)
{
	static int (*real)(int);

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "epoll_create");
	int fd = real(size);

	if (fd >= 0)
		ep_forget(fd);
	return fd;
}

__attribute__((visibility("default")))
int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	static int (*real)(int, int, int, struct epoll_event *);
	emu_poll_fn fn = plugin_poll();

	if (!real)
		real = (int (*)(int, int, int, struct epoll_event *))dlsym(RTLD_NEXT, "epoll_ctl");
	if (!is_emulated(fn, fd))
		return real(epfd, op, fd, ev);

	int err = 0;

	pthread_mutex_lock(&ep_lock);
	int i = ep_find(epfd, fd);

	switch (op) {
	case EPOLL_CTL_ADD:
		if (i >= 0)
			err = EEXIST;
		else if (ep_count == EPOLL_MAX)
			err = ENOSPC;
		else if (!ev)
			err = EFAULT;
		else
			ep_entries[ep_count++] = (struct ep_entry){ epfd, fd, *ev };
		break;
	case EPOLL_CTL_MOD:
		if (i < 0)
			err = ENOENT;
		else if (!ev)
			err = EFAULT;
		else
			ep_entries[i].ev = *ev;
		break;
	case EPOLL_CTL_DEL:
		if (i < 0)
			err = ENOENT;
		else
			ep_entries[i] = ep_entries[--ep_count];
		break;
	default:
		err = EINVAL;
	}
	pthread_mutex_unlock(&ep_lock);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/* Ready emulated entries of @epfd, into out[0..max). */
static int ep_ready(int epfd, struct epoll_event *out, int max, bool *any)
{
	emu_poll_fn fn = plugin_poll();
	int k = 0;

	*any = false;
	pthread_mutex_lock(&ep_lock);
	for (int i = 0; i < ep_count && k < max; i++) {
		if (ep_entries[i].epfd != epfd)
			continue;
		*any = true;
		uint32_t want = ep_entries[i].ev.events;
		int r = fn ? fn(ep_entries[i].fd, (short)(want & (EPOLLIN | EPOLLRDNORM | EPOLLPRI))) : -1;

		if (r < 0)
			continue;   /* closed: the kernel drops closed fds too */
		uint32_t got = (uint32_t)r & (want | EPOLLERR | EPOLLHUP);

		if (got) {
			out[k].events = got;
			out[k].data = ep_entries[i].ev.data;
			k++;
		}
	}
	pthread_mutex_unlock(&ep_lock);
	return k;
}

__attribute__((visibility("default")))
int epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout_ms, const sigset_t *mask)
{
	static int (*real)(int, struct epoll_event *, int, int, const sigset_t *);
	bool any;

	if (!real)
		real = (int (*)(int, struct epoll_event *, int, int, const sigset_t *))dlsym(RTLD_NEXT, "epoll_pwait");
	if (max <= 0)
		return real(epfd, events, max, timeout_ms, mask);
	int k = ep_ready(epfd, events, max, &any);

	if (!any)
		return real(epfd, events, max, timeout_ms, mask);
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : mono_ns() + timeout_ms * 1000000LL;

	for (;;) {
		int64_t left = deadline - mono_ns();
		int wait = k || left <= 0 ? 0 : (int)(WAIT_STEP_NS / 1000000);
		int r = k < max ? real(epfd, events + k, max - k, wait, mask) : 0;

		if (r < 0)
			return k ? k : -1;
		k += r;
		if (k || deadline - mono_ns() <= 0)
			return k;
		k = ep_ready(epfd, events, max, &any);
	}
}

__attribute__((visibility("default")))
int epoll_wait(int epfd, struct epoll_event *events, int max, int timeout_ms)
{
	return epoll_pwait(epfd, events, max, timeout_ms, NULL);
}
