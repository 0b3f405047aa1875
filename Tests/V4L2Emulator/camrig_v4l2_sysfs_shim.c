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
 * Nothing else is changed.  Only the tools need it; applications that call
 * v4l2_open() directly do not.
 *
 *   LD_PRELOAD=/path/to/libcamrig-v4l2-sysfs-shim.so v4l2-ctl -w -d DEV ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAKE_UEVENT_PATH "/sys/dev/char/0:0/uevent"

static const char fake_uevent[] = "MAJOR=0\nMINOR=0\nDEVNAME=video0\n";

static int is_fake(const char *path)
{
	return path && strcmp(path, FAKE_UEVENT_PATH) == 0;
}

static FILE *fake_fopen(void)
{
	return fmemopen((void *)fake_uevent, sizeof(fake_uevent) - 1, "r");
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
