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
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <libv4l2.h>

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
