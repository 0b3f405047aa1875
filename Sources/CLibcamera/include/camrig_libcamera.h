/*
 * CamRig's C interface to libcamera (whose API is C++). Nothing of libcamera's types crosses it: cameras,
 * formats, controls and completed frames come out as plain C values, and the Swift backend
 * (CamRigDevices/Libcamera) gives them meaning. When the package was built without libcamera's headers
 * (libcamera-dev absent), every call fails with a message saying so.
 *
 * Threads: libcamera completes requests on its own thread; completed frames wait in a queue that
 * camrig_lc_wait reads. The other calls on one camera must not run at once (the Swift backend serializes
 * them), except camrig_lc_wake, which may come from any thread.
 */
#ifndef CAMRIG_LIBCAMERA_H
#define CAMRIG_LIBCAMERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct camrig_lc_manager camrig_lc_manager;
typedef struct camrig_lc_camera camrig_lc_camera;

/* 1 when built against libcamera's headers, 0 when every call below fails. */
int camrig_lc_available(void);
/* libcamera's version string ("v0.4.0"), or the reason there is none. */
const char *camrig_lc_version(void);

/* Sends libcamera's log lines (without their ANSI colours) to `callback` from now on, instead of standard
 * error; lines libcamera logs while CamRig probes a stream role it may not have are dropped. */
void camrig_lc_set_log_callback(void (*callback)(const char *line));

/* Starts libcamera's camera manager (there is one per process): NULL with the reason in `error` when it fails. */
camrig_lc_manager *camrig_lc_manager_start(char *error, size_t error_size);
void camrig_lc_manager_stop(camrig_lc_manager *manager);
/* Ids of the cameras present now, each NUL-terminated, one after another in `ids`: the count, or -1 when
 * `size` is too small. */
int camrig_lc_manager_cameras(camrig_lc_manager *manager, char *ids, size_t size);

/* A camera's properties; absent ones are -1 (location, rotation) or 0. */
typedef struct {
    char model[128];
    int32_t location;             /* properties::Location: 0 front, 1 back, 2 external */
    int32_t rotation;             /* properties::Rotation, degrees */
    uint32_t pixel_array_width;   /* properties::PixelArraySize */
    uint32_t pixel_array_height;
    uint32_t system_device_count; /* properties::SystemDevices: the kernel nodes (dev_t) behind the camera */
    uint64_t system_devices[8];
} camrig_lc_properties;

/* Opens (but does not acquire) the camera with `id`. */
camrig_lc_camera *camrig_lc_open(camrig_lc_manager *manager, const char *id, char *error, size_t error_size);
void camrig_lc_close(camrig_lc_camera *camera);
void camrig_lc_properties_get(camrig_lc_camera *camera, camrig_lc_properties *out);

/* Stream roles, as libcamera's StreamRole. */
enum { CAMRIG_LC_ROLE_RAW = 0, CAMRIG_LC_ROLE_STILL = 1, CAMRIG_LC_ROLE_VIDEO = 2, CAMRIG_LC_ROLE_VIEWFINDER = 3 };

/* One size of one pixel format in one role's StreamFormats. */
typedef struct {
    int32_t role;
    uint32_t fourcc;   /* DRM fourcc, as libcamera's PixelFormat */
    uint64_t modifier;
    uint32_t width;
    uint32_t height;
} camrig_lc_format;

/* The formats of every role the pipeline generates a configuration for: the count written (at most `capacity`). */
int camrig_lc_formats(camrig_lc_camera *camera, camrig_lc_format *out, int capacity);

/* Control types, as libcamera's ControlType. */
enum {
    CAMRIG_LC_NONE = 0, CAMRIG_LC_BOOL = 1, CAMRIG_LC_BYTE = 2, CAMRIG_LC_UINT16 = 3, CAMRIG_LC_UINT32 = 4,
    CAMRIG_LC_INT32 = 5, CAMRIG_LC_INT64 = 6, CAMRIG_LC_FLOAT = 7, CAMRIG_LC_STRING = 8, CAMRIG_LC_RECTANGLE = 9,
    CAMRIG_LC_SIZE = 10, CAMRIG_LC_POINT = 11
};

/* A control the camera accepts, with its range. Numbers are carried as doubles (exact for every integer
 * libcamera controls use); a rectangle's minimum/maximum/default are its x, y, width, height. */
typedef struct {
    uint32_t id;
    char name[64];
    int32_t type;
    uint32_t array_size;   /* 0 for a single value, else the fixed number of elements (0 for variable) */
    int32_t is_array;
    double minimum[4];
    double maximum[4];
    double default_value[4];
    uint32_t enumerator_count;  /* the values it takes, when it lists them */
    int32_t enumerators[16];
    char enumerator_names[16][32];
} camrig_lc_control;

/* The camera's controls: the count written (at most `capacity`). */
int camrig_lc_controls(camrig_lc_camera *camera, camrig_lc_control *out, int capacity);

/* A control value to set: `count` numbers (1 for a scalar; 2 for ColourGains or FrameDurationLimits; 4 for a
 * rectangle as x, y, width, height). */
typedef struct {
    uint32_t id;
    uint32_t count;
    double values[4];
} camrig_lc_value;

/* Acquires the camera and configures one stream of `role` at the format and size, with at least
 * `buffer_count` buffers: 0, or -1 with the reason (the camera is then released). The stream's line stride
 * and frame size come back. */
int camrig_lc_configure(camrig_lc_camera *camera, int32_t role, uint32_t fourcc, uint64_t modifier, uint32_t width,
                        uint32_t height, uint32_t buffer_count, uint32_t *stride, uint32_t *frame_size, char *error,
                        size_t error_size);

/* FrameDurationLimits as the camera lists them now (µs; a pipeline fits them to the configured mode):
 * 0, or -1 when it lists none. */
int camrig_lc_frame_duration_limits(camrig_lc_camera *camera, int64_t *minimum, int64_t *maximum);
/* ScalerCrop's largest rectangle (x, y, width, height) as the camera lists it now: 0, or -1 without one. */
int camrig_lc_scaler_crop_maximum(camrig_lc_camera *camera, int32_t rectangle[4]);
/* Configures the camera at this format (acquiring it for the moment), reads FrameDurationLimits for that
 * mode and releases the camera: 0, or -1 when the camera cannot be had or lists no limits. */
int camrig_lc_probe_frame_duration_limits(camrig_lc_camera *camera, int32_t role, uint32_t fourcc, uint64_t modifier,
                                          uint32_t width, uint32_t height, int64_t *minimum, int64_t *maximum);

/* Controls for the next request queued (merged with any not yet sent). */
int camrig_lc_set_controls(camrig_lc_camera *camera, const camrig_lc_value *values, int count, char *error, size_t error_size);

/* Allocates the buffers (the pipeline's own, or memory-backed ones when the pipeline exports none, as
 * libcamera's virtual cameras on a machine without a DMA heap), one request per buffer, and starts the
 * camera: the number of buffers, or -1 with the reason. `memory_backed` says which kind. */
int camrig_lc_start(camrig_lc_camera *camera, int *memory_backed, char *error, size_t error_size);
/* Queues buffer `index`'s request (reused), with the controls set since the last one. */
int camrig_lc_queue(camrig_lc_camera *camera, uint32_t index, char *error, size_t error_size);

/* A completed request. Absent metadata is -1 (times, temperature) or NaN (gains, position). */
typedef struct {
    uint32_t index;
    int32_t status;            /* the request's: 0 complete, 2 cancelled */
    int32_t buffer_status;     /* the buffer's FrameMetadata status: 0 success, 1 error, 2 cancelled (set by
                                  pipelines that fill buffers from a kernel device; libcamera 0.4's virtual
                                  pipeline sets it only when it cancels a frame, which also cancels the
                                  request, and leaves a new buffer's status unset otherwise) */
    uint64_t sequence;         /* the buffer's sequence number */
    int64_t sensor_timestamp;  /* controls::SensorTimestamp, ns */
    int64_t buffer_timestamp;  /* the buffer's own timestamp, ns */
    int64_t frame_duration;    /* controls::FrameDuration, µs */
    int64_t exposure_time;     /* controls::ExposureTime, µs */
    double analogue_gain;
    double colour_gains[2];
    int64_t colour_temperature;
    double lens_position;
    /* The FrameDurationLimits the request carried (its first value, µs), -1 when none. */
    int64_t requested_frame_duration;
    const uint8_t *data;       /* the frame's bytes in the buffer when its planes lie one after another, else NULL */
    size_t length;
} camrig_lc_frame;

/* Waits up to `timeout_ms` for a completed request: 1 with `frame` filled, 0 on timeout, -1 once stopped. */
int camrig_lc_wait(camrig_lc_camera *camera, int timeout_ms, camrig_lc_frame *frame);
/* Makes a camrig_lc_wait under way return 0 at once (as on a timeout). Any thread. */
void camrig_lc_wake(camrig_lc_camera *camera);
/* Copies buffer `index`'s planes one after another into `destination`: the bytes copied. */
size_t camrig_lc_copy(camrig_lc_camera *camera, uint32_t index, uint8_t *destination, size_t capacity);
/* Stops the camera (pending requests complete as cancelled) and wakes camrig_lc_wait. */
void camrig_lc_stop(camrig_lc_camera *camera);
/* After camrig_lc_stop, once no frame's bytes are in use: frees the buffers and releases the camera. */
void camrig_lc_release(camrig_lc_camera *camera);

#ifdef __cplusplus
}
#endif

#endif
