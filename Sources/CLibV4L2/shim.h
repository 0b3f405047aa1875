// What Swift needs from libv4l2 and <linux/videodev2.h> but cannot import directly: the VIDIOC_*
// request codes (function-like macros) and libv4l2's variadic v4l2_open/v4l2_ioctl.
#ifndef CAMRIG_CLIBV4L2_SHIM_H
#define CAMRIG_CLIBV4L2_SHIM_H

#include <errno.h>
#include <fcntl.h>
#include <libv4l2.h>
#include <linux/videodev2.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

/// Opens a device through libv4l2 (so plugins apply) with its format conversion disabled: a rig uses
/// exactly the formats the device delivers, never ones libv4lconvert emulates in software.
static inline int camrig_v4l2_open(const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0) return -1;
    if (v4l2_fd_open(fd, V4L2_DISABLE_CONVERSION) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}
static inline int camrig_v4l2_close(int fd) { return v4l2_close(fd); }

/// Retries on EINTR, as every V4L2 program must.
static inline int camrig_v4l2_ioctl(int fd, unsigned long request, void *argument) {
    int result;
    do {
        result = v4l2_ioctl(fd, request, argument);
    } while (result == -1 && errno == EINTR);
    return result;
}

static inline void *camrig_v4l2_mmap(size_t length, int fd, int64_t offset) {
    return v4l2_mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);
}
static inline int camrig_v4l2_munmap(void *start, size_t length) { return v4l2_munmap(start, length); }
static inline int camrig_map_failed(void *address) { return address == MAP_FAILED; }

static const unsigned long CAMRIG_VIDIOC_QUERYCAP = VIDIOC_QUERYCAP;
static const unsigned long CAMRIG_VIDIOC_ENUM_FMT = VIDIOC_ENUM_FMT;
static const unsigned long CAMRIG_VIDIOC_ENUM_FRAMESIZES = VIDIOC_ENUM_FRAMESIZES;
static const unsigned long CAMRIG_VIDIOC_ENUM_FRAMEINTERVALS = VIDIOC_ENUM_FRAMEINTERVALS;
static const unsigned long CAMRIG_VIDIOC_G_FMT = VIDIOC_G_FMT;
static const unsigned long CAMRIG_VIDIOC_S_FMT = VIDIOC_S_FMT;
static const unsigned long CAMRIG_VIDIOC_G_PARM = VIDIOC_G_PARM;
static const unsigned long CAMRIG_VIDIOC_S_PARM = VIDIOC_S_PARM;
static const unsigned long CAMRIG_VIDIOC_QUERY_EXT_CTRL = VIDIOC_QUERY_EXT_CTRL;
static const unsigned long CAMRIG_VIDIOC_QUERYMENU = VIDIOC_QUERYMENU;
static const unsigned long CAMRIG_VIDIOC_G_EXT_CTRLS = VIDIOC_G_EXT_CTRLS;
static const unsigned long CAMRIG_VIDIOC_S_EXT_CTRLS = VIDIOC_S_EXT_CTRLS;
static const unsigned long CAMRIG_VIDIOC_REQBUFS = VIDIOC_REQBUFS;
static const unsigned long CAMRIG_VIDIOC_QUERYBUF = VIDIOC_QUERYBUF;
static const unsigned long CAMRIG_VIDIOC_QBUF = VIDIOC_QBUF;
static const unsigned long CAMRIG_VIDIOC_DQBUF = VIDIOC_DQBUF;
static const unsigned long CAMRIG_VIDIOC_STREAMON = VIDIOC_STREAMON;
static const unsigned long CAMRIG_VIDIOC_STREAMOFF = VIDIOC_STREAMOFF;

static const uint32_t CAMRIG_V4L2_CTRL_FLAG_NEXT_CTRL = V4L2_CTRL_FLAG_NEXT_CTRL;
static const uint32_t CAMRIG_V4L2_CTRL_FLAG_NEXT_COMPOUND = V4L2_CTRL_FLAG_NEXT_COMPOUND;
static const uint32_t CAMRIG_V4L2_CTRL_WHICH_CUR_VAL = V4L2_CTRL_WHICH_CUR_VAL;

#endif
