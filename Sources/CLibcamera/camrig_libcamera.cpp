// CamRig's C interface over libcamera's C++ API (see include/camrig_libcamera.h).
#include "camrig_libcamera.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#if __has_include(<libcamera/libcamera.h>)
#define CAMRIG_HAS_LIBCAMERA 1
#endif

namespace {
void fail(char *error, size_t size, const char *format, ...) __attribute__((format(printf, 3, 4)));
void fail(char *error, size_t size, const char *format, ...)
{
    if (!error || size == 0)
        return;
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(error, size, format, arguments);
    va_end(arguments);
}
} // namespace

#ifndef CAMRIG_HAS_LIBCAMERA

// Built without libcamera-dev: the backend exists and says why it has no cameras.
static const char *const kMissing =
    "this camrig-agent was built without libcamera (libcamera-dev was not installed when it was built)";
extern "C" {
int camrig_lc_available(void) { return 0; }
void camrig_lc_set_log_callback(void (*)(const char *)) {}
const char *camrig_lc_version(void) { return kMissing; }
camrig_lc_manager *camrig_lc_manager_start(char *error, size_t size) { fail(error, size, "%s", kMissing); return nullptr; }
void camrig_lc_manager_stop(camrig_lc_manager *) {}
int camrig_lc_manager_cameras(camrig_lc_manager *, char *, size_t) { return 0; }
camrig_lc_camera *camrig_lc_open(camrig_lc_manager *, const char *, char *error, size_t size) { fail(error, size, "%s", kMissing); return nullptr; }
void camrig_lc_close(camrig_lc_camera *) {}
void camrig_lc_properties_get(camrig_lc_camera *, camrig_lc_properties *out) { memset(out, 0, sizeof(*out)); }
int camrig_lc_formats(camrig_lc_camera *, camrig_lc_format *, int) { return 0; }
int camrig_lc_controls(camrig_lc_camera *, camrig_lc_control *, int) { return 0; }
int camrig_lc_configure(camrig_lc_camera *, int32_t, uint32_t, uint64_t, uint32_t, uint32_t, uint32_t, uint32_t *, uint32_t *, char *error, size_t size) { fail(error, size, "%s", kMissing); return -1; }
int camrig_lc_set_controls(camrig_lc_camera *, const camrig_lc_value *, int, char *error, size_t size) { fail(error, size, "%s", kMissing); return -1; }
int camrig_lc_frame_duration_limits(camrig_lc_camera *, int64_t *, int64_t *) { return -1; }
int camrig_lc_scaler_crop_maximum(camrig_lc_camera *, int32_t *) { return -1; }
int camrig_lc_probe_frame_duration_limits(camrig_lc_camera *, int32_t, uint32_t, uint64_t, uint32_t, uint32_t, int64_t *, int64_t *) { return -1; }
int camrig_lc_start(camrig_lc_camera *, int *, char *error, size_t size) { fail(error, size, "%s", kMissing); return -1; }
int camrig_lc_queue(camrig_lc_camera *, uint32_t, char *error, size_t size) { fail(error, size, "%s", kMissing); return -1; }
int camrig_lc_wait(camrig_lc_camera *, int, camrig_lc_frame *) { return -1; }
void camrig_lc_wake(camrig_lc_camera *) {}
size_t camrig_lc_copy(camrig_lc_camera *, uint32_t, uint8_t *, size_t) { return 0; }
void camrig_lc_stop(camrig_lc_camera *) {}
void camrig_lc_release(camrig_lc_camera *) {}
}

#else

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libcamera/libcamera.h>

using namespace libcamera;

namespace {
// libcamera's log, a line at a time, to CamRig's callback.
thread_local bool probing = false;
std::atomic<void (*)(const char *)> logCallback{ nullptr };

class LogLines : public std::streambuf
{
protected:
    // libcamera writes a line from the thread that logs it, unlocked: each thread gathers its own.
    int overflow(int c) override
    {
        thread_local std::string line;
        if (c == '\n') {
            if (!probing && logCallback.load())
                logCallback.load()(line.c_str());
            line.clear();
        } else if (c != EOF) {
            line.push_back(static_cast<char>(c));
        }
        return c;
    }
};

LogLines logLines;
std::ostream logStream(&logLines);

// Marks the calling thread as probing while it lives.
struct Probing {
    Probing() { probing = true; }
    ~Probing() { probing = false; }
};
} // namespace

struct camrig_lc_manager {
    std::unique_ptr<CameraManager> manager;
};

namespace {

// One buffer's bytes as this process sees them.
struct BufferView {
    std::vector<std::pair<void *, size_t>> mappings;  // each mapped fd, once
    std::vector<std::pair<const uint8_t *, size_t>> planes;
    const uint8_t *contiguous = nullptr;  // when the planes lie one after another
    size_t contiguousLength = 0;
};

// How many planes a memory-backed buffer of this format has (the layout libcamera's formats use).
int planeCount(uint32_t fourcc)
{
    switch (fourcc) {
    case formats::NV12.fourcc(): case formats::NV21.fourcc(): case formats::NV16.fourcc(): case formats::NV61.fourcc():
        return 2;
    case formats::YUV420.fourcc(): case formats::YVU420.fourcc():
        return 3;
    default:
        return 1;
    }
}

double number(const ControlValue &value, size_t index = 0)
{
    if (value.isNone())
        return NAN;
    switch (value.type()) {
    case ControlTypeBool:
        return value.isArray() ? value.get<Span<const bool>>()[index] : value.get<bool>();
    case ControlTypeByte:
        return value.isArray() ? value.get<Span<const uint8_t>>()[index] : value.get<uint8_t>();
    case ControlTypeInteger32:
        return value.isArray() ? value.get<Span<const int32_t>>()[index] : value.get<int32_t>();
    case ControlTypeInteger64:
        return value.isArray() ? value.get<Span<const int64_t>>()[index] : value.get<int64_t>();
    case ControlTypeFloat:
        return value.isArray() ? value.get<Span<const float>>()[index] : value.get<float>();
    default:
        return NAN;
    }
}

void numbers(const ControlValue &value, double out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = NAN;
    if (value.isNone())
        return;
    if (value.type() == ControlTypeRectangle && !value.isArray()) {
        Rectangle r = value.get<Rectangle>();
        out[0] = r.x, out[1] = r.y, out[2] = r.width, out[3] = r.height;
        return;
    }
    if (value.type() == ControlTypeSize && !value.isArray()) {
        Size s = value.get<Size>();
        out[0] = s.width, out[1] = s.height;
        return;
    }
    size_t count = value.isArray() ? std::min<size_t>(value.numElements(), 4) : 1;
    for (size_t i = 0; i < count; i++)
        out[i] = number(value, i);
}

// A ControlValue of the control's own type from the numbers given.
std::optional<ControlValue> controlValue(const ControlId &id, const camrig_lc_value &value)
{
    size_t count = value.count;
    if (count == 0 || count > 4)
        return std::nullopt;
    bool array = id.isArray();
    switch (id.type()) {
    case ControlTypeBool:
        return ControlValue(value.values[0] != 0);
    case ControlTypeByte:
        return ControlValue(static_cast<uint8_t>(value.values[0]));
    case ControlTypeInteger32:
        if (array) {
            std::vector<int32_t> v(value.values, value.values + count);
            return ControlValue(Span<const int32_t>(v));
        }
        return ControlValue(static_cast<int32_t>(std::llround(value.values[0])));
    case ControlTypeInteger64:
        if (array) {
            std::vector<int64_t> v;
            for (size_t i = 0; i < count; i++)
                v.push_back(std::llround(value.values[i]));
            return ControlValue(Span<const int64_t>(v));
        }
        return ControlValue(static_cast<int64_t>(std::llround(value.values[0])));
    case ControlTypeFloat:
        if (array) {
            std::vector<float> v(value.values, value.values + count);
            return ControlValue(Span<const float>(v));
        }
        return ControlValue(static_cast<float>(value.values[0]));
    case ControlTypeRectangle:
        if (count != 4)
            return std::nullopt;
        return ControlValue(Rectangle(static_cast<int>(value.values[0]), static_cast<int>(value.values[1]),
                                      static_cast<unsigned int>(value.values[2]), static_cast<unsigned int>(value.values[3])));
    default:
        return std::nullopt;
    }
}
} // namespace

struct camrig_lc_camera {
    std::shared_ptr<Camera> camera;
    bool acquired = false;
    std::unique_ptr<CameraConfiguration> configuration;
    Stream *stream = nullptr;
    uint32_t fourcc = 0;
    uint32_t stride = 0, frameSize = 0, height = 0;

    std::unique_ptr<FrameBufferAllocator> allocator;
    std::vector<std::unique_ptr<FrameBuffer>> ownBuffers;  // memory-backed, when the pipeline exports none
    std::vector<int> ownFds;
    std::vector<FrameBuffer *> buffers;
    std::vector<BufferView> views;
    std::vector<std::unique_ptr<Request>> requests;

    // Set when libcamera could not stop the camera (it vanished): the pipeline may still hold the
    // requests and buffers, so they are never freed.
    bool mayBeHeld = false;

    std::mutex lock;  // guards everything below
    std::condition_variable completed;
    std::deque<camrig_lc_frame> frames;
    bool running = false;
    bool woken = false;
    std::map<unsigned int, ControlValue> pending;

    void onRequestCompleted(Request *request);
    void freeBuffers();
};

void camrig_lc_camera::onRequestCompleted(Request *request)
{
    // Every handle of a camera hears all its completions: only this handle's requests are its frames.
    if (request->cookie() >= requests.size() || requests[request->cookie()].get() != request)
        return;
    camrig_lc_frame frame{};
    frame.index = static_cast<uint32_t>(request->cookie());
    frame.status = request->status() == Request::RequestCancelled ? 2 : 0;
    frame.sensor_timestamp = frame.buffer_timestamp = frame.frame_duration = frame.exposure_time = -1;
    frame.colour_temperature = frame.requested_frame_duration = -1;
    frame.analogue_gain = frame.colour_gains[0] = frame.colour_gains[1] = frame.lens_position = NAN;
    if (!request->buffers().empty()) {
        const FrameBuffer *buffer = request->buffers().begin()->second;
        const FrameMetadata &metadata = buffer->metadata();
        frame.buffer_status = metadata.status == FrameMetadata::FrameSuccess ? 0 : metadata.status == FrameMetadata::FrameError ? 1 : 2;
        frame.sequence = metadata.sequence;
        frame.buffer_timestamp = static_cast<int64_t>(metadata.timestamp);
        if (frame.index < views.size()) {
            const BufferView &view = views[frame.index];
            frame.data = view.contiguous;
            frame.length = view.contiguousLength;
            // A compressed single-plane frame fills only part of its buffer.
            if (view.planes.size() == 1 && !metadata.planes().empty() && metadata.planes()[0].bytesused > 0)
                frame.length = std::min<size_t>(frame.length, metadata.planes()[0].bytesused);
        }
    }
    const ControlList &metadata = request->metadata();
    if (auto v = metadata.get(controls::SensorTimestamp))
        frame.sensor_timestamp = *v;
    if (auto v = metadata.get(controls::FrameDuration))
        frame.frame_duration = *v;
    if (auto v = metadata.get(controls::ExposureTime))
        frame.exposure_time = *v;
    if (auto v = metadata.get(controls::AnalogueGain))
        frame.analogue_gain = *v;
    if (auto v = metadata.get(controls::ColourGains)) {
        frame.colour_gains[0] = (*v)[0];
        frame.colour_gains[1] = (*v)[1];
    }
    if (auto v = metadata.get(controls::ColourTemperature))
        frame.colour_temperature = *v;
    if (auto v = metadata.get(controls::LensPosition))
        frame.lens_position = *v;
    const ControlList &asked = request->controls();
    if (auto v = asked.get(controls::FrameDurationLimits))
        frame.requested_frame_duration = (*v)[0];
    {
        std::lock_guard<std::mutex> guard(lock);
        frames.push_back(frame);
    }
    completed.notify_all();
}

void camrig_lc_camera::freeBuffers()
{
    if (mayBeHeld)
        return;
    requests.clear();
    for (BufferView &view : views)
        for (auto &[address, length] : view.mappings)
            munmap(address, length);
    views.clear();
    buffers.clear();
    ownBuffers.clear();
    for (int fd : ownFds)
        close(fd);
    ownFds.clear();
    if (allocator && stream)
        allocator->free(stream);
    allocator.reset();
}

extern "C" {

int camrig_lc_available(void) { return 1; }

void camrig_lc_set_log_callback(void (*callback)(const char *line))
{
    logCallback.store(callback);
    logSetStream(&logStream, false);
}

const char *camrig_lc_version(void)
{
    static std::string version = CameraManager::version();
    return version.c_str();
}

camrig_lc_manager *camrig_lc_manager_start(char *error, size_t size)
{
    auto manager = std::make_unique<CameraManager>();
    int result = manager->start();
    if (result < 0) {
        fail(error, size, "libcamera's camera manager did not start: %s", strerror(-result));
        return nullptr;
    }
    auto handle = new camrig_lc_manager;
    handle->manager = std::move(manager);
    return handle;
}

void camrig_lc_manager_stop(camrig_lc_manager *manager)
{
    if (!manager)
        return;
    manager->manager->stop();
    delete manager;
}


int camrig_lc_manager_cameras(camrig_lc_manager *manager, char *ids, size_t size)
{
    size_t used = 0;
    int count = 0;
    for (const std::shared_ptr<Camera> &camera : manager->manager->cameras()) {
        const std::string &id = camera->id();
        if (used + id.size() + 1 > size)
            return -1;
        memcpy(ids + used, id.c_str(), id.size() + 1);
        used += id.size() + 1;
        count++;
    }
    return count;
}

camrig_lc_camera *camrig_lc_open(camrig_lc_manager *manager, const char *id, char *error, size_t size)
{
    std::shared_ptr<Camera> camera = manager->manager->get(id);
    if (!camera) {
        fail(error, size, "libcamera has no camera '%s' (unplugged?)", id);
        return nullptr;
    }
    auto handle = new camrig_lc_camera;
    handle->camera = camera;
    camera->requestCompleted.connect(handle, &camrig_lc_camera::onRequestCompleted);
    return handle;
}

void camrig_lc_close(camrig_lc_camera *camera)
{
    if (!camera)
        return;
    camrig_lc_stop(camera);
    camrig_lc_release(camera);
    camera->camera->requestCompleted.disconnect(camera);
    delete camera;
}

void camrig_lc_properties_get(camrig_lc_camera *camera, camrig_lc_properties *out)
{
    memset(out, 0, sizeof(*out));
    out->location = out->rotation = -1;
    const ControlList &properties = camera->camera->properties();
    if (auto model = properties.get(properties::Model))
        snprintf(out->model, sizeof(out->model), "%s", model->c_str());
    if (auto location = properties.get(properties::Location))
        out->location = *location;
    if (auto rotation = properties.get(properties::Rotation))
        out->rotation = *rotation;
    if (auto array = properties.get(properties::PixelArraySize)) {
        out->pixel_array_width = array->width;
        out->pixel_array_height = array->height;
    }
    if (auto devices = properties.get(properties::SystemDevices)) {
        for (int64_t device : *devices) {
            if (out->system_device_count == 8)
                break;
            out->system_devices[out->system_device_count++] = static_cast<uint64_t>(device);
        }
    }
}

int camrig_lc_formats(camrig_lc_camera *camera, camrig_lc_format *out, int capacity)
{
    int count = 0;
    Probing quiet;
    const StreamRole roles[] = { StreamRole::Raw, StreamRole::StillCapture, StreamRole::VideoRecording, StreamRole::Viewfinder };
    for (int role = 0; role < 4; role++) {
        std::unique_ptr<CameraConfiguration> configuration = camera->camera->generateConfiguration({ roles[role] });
        if (!configuration || configuration->empty())
            continue;
        const StreamFormats formats = configuration->at(0).formats();
        for (const PixelFormat &format : formats.pixelformats()) {
            for (const Size &size : formats.sizes(format)) {
                // Only what the pipeline takes as it is: StreamFormats lists standard sizes within a range, and
                // a pipeline may adjust some of them to another size.
                StreamConfiguration &stream = configuration->at(0);
                stream.pixelFormat = format;
                stream.size = size;
                if (configuration->validate() != CameraConfiguration::Valid)
                    continue;
                if (count == capacity)
                    return count;
                out[count++] = camrig_lc_format{ role, format.fourcc(), format.modifier(), size.width, size.height };
            }
        }
    }
    return count;
}

int camrig_lc_controls(camrig_lc_camera *camera, camrig_lc_control *out, int capacity)
{
    int count = 0;
    for (const auto &[id, info] : camera->camera->controls()) {
        if (count == capacity)
            break;
        camrig_lc_control &control = out[count++];
        memset(&control, 0, sizeof(control));
        control.id = id->id();
        snprintf(control.name, sizeof(control.name), "%s", id->name().c_str());
        control.type = id->type();
        control.is_array = id->isArray();
        // A variable-length array has libcamera's dynamic extent as its size: 0 here.
        control.array_size = id->size() <= 64 ? static_cast<uint32_t>(id->size()) : 0;
        numbers(info.min(), control.minimum);
        numbers(info.max(), control.maximum);
        numbers(info.def(), control.default_value);
        for (const ControlValue &value : info.values()) {
            if (control.enumerator_count == 16 || value.type() != ControlTypeInteger32 || value.isArray())
                continue;
            int32_t number = value.get<int32_t>();
            control.enumerators[control.enumerator_count] = number;
#if LIBCAMERA_VERSION_MAJOR > 0 || LIBCAMERA_VERSION_MINOR >= 4
            auto name = id->enumerators().find(number);
            if (name != id->enumerators().end())
                snprintf(control.enumerator_names[control.enumerator_count], 32, "%s", name->second.c_str());
#endif
            control.enumerator_count++;
        }
    }
    return count;
}

int camrig_lc_configure(camrig_lc_camera *camera, int32_t role, uint32_t fourcc, uint64_t modifier, uint32_t width,
                        uint32_t height, uint32_t buffer_count, uint32_t *stride, uint32_t *frame_size, char *error,
                        size_t size)
{
    {
        std::lock_guard<std::mutex> guard(camera->lock);
        if (camera->running) {
            fail(error, size, "is streaming");
            return -1;
        }
    }
    camera->freeBuffers();
    camera->stream = nullptr;
    camera->configuration.reset();
    if (!camera->acquired) {
        int result = camera->camera->acquire();
        if (result < 0) {
            fail(error, size, "cannot be acquired (another program is using it?): %s", strerror(-result));
            return -1;
        }
        camera->acquired = true;
    }
    // A configuration that fails leaves the camera released, for other programs.
    struct ReleaseUnlessKept {
        camrig_lc_camera *camera;
        bool keep = false;
        ~ReleaseUnlessKept()
        {
            if (!keep && camera->acquired) {
                camera->camera->release();
                camera->acquired = false;
            }
        }
    } release{ camera };
    const StreamRole roles[] = { StreamRole::Raw, StreamRole::StillCapture, StreamRole::VideoRecording, StreamRole::Viewfinder };
    if (role < 0 || role > 3) {
        fail(error, size, "has no stream role %d", role);
        return -1;
    }
    std::unique_ptr<CameraConfiguration> configuration = camera->camera->generateConfiguration({ roles[role] });
    if (!configuration || configuration->empty()) {
        fail(error, size, "its pipeline makes no stream for this role");
        return -1;
    }
    StreamConfiguration &stream = configuration->at(0);
    const PixelFormat asked(fourcc, modifier);
    stream.pixelFormat = asked;
    stream.size = Size(width, height);
    // At least what is asked for (a pipeline's own count may be smaller, as 2 for a raw stream).
    if (buffer_count > stream.bufferCount)
        stream.bufferCount = buffer_count;
    if (configuration->validate() == CameraConfiguration::Invalid) {
        fail(error, size, "its pipeline refused %s", stream.toString().c_str());
        return -1;
    }
    if (stream.pixelFormat != asked || stream.size != Size(width, height)) {
        fail(error, size, "asked for %s-%ux%u, its pipeline chose %s", asked.toString().c_str(), width, height,
             stream.toString().c_str());
        return -1;
    }
    int result = camera->camera->configure(configuration.get());
    if (result < 0) {
        fail(error, size, "its pipeline could not be configured: %s", strerror(-result));
        return -1;
    }
    camera->stream = stream.stream();
    camera->fourcc = fourcc;
    camera->stride = stream.stride;
    camera->frameSize = stream.frameSize;
    camera->height = height;
    *stride = stream.stride;
    *frame_size = stream.frameSize;
    camera->configuration = std::move(configuration);
    release.keep = true;
    return 0;
}

int camrig_lc_frame_duration_limits(camrig_lc_camera *camera, int64_t *minimum, int64_t *maximum)
{
    const ControlInfoMap &controls = camera->camera->controls();
    auto limits = controls.find(&controls::FrameDurationLimits);
    if (limits == controls.end() || limits->second.min().isNone() || limits->second.max().isNone())
        return -1;
    *minimum = limits->second.min().get<int64_t>();
    *maximum = limits->second.max().get<int64_t>();
    return 0;
}

int camrig_lc_scaler_crop_maximum(camrig_lc_camera *camera, int32_t rectangle[4])
{
    const ControlInfoMap &controls = camera->camera->controls();
    auto crop = controls.find(&controls::ScalerCrop);
    if (crop == controls.end() || crop->second.max().isNone() || crop->second.max().type() != ControlTypeRectangle)
        return -1;
    Rectangle r = crop->second.max().get<Rectangle>();
    rectangle[0] = r.x, rectangle[1] = r.y, rectangle[2] = static_cast<int32_t>(r.width), rectangle[3] = static_cast<int32_t>(r.height);
    return 0;
}

int camrig_lc_probe_frame_duration_limits(camrig_lc_camera *camera, int32_t role, uint32_t fourcc, uint64_t modifier,
                                          uint32_t width, uint32_t height, int64_t *minimum, int64_t *maximum)
{
    uint32_t stride = 0, frameSize = 0;
    if (camrig_lc_configure(camera, role, fourcc, modifier, width, height, 0, &stride, &frameSize, nullptr, 0) < 0)
        return -1;
    int result = camrig_lc_frame_duration_limits(camera, minimum, maximum);
    camrig_lc_release(camera);
    return result;
}

int camrig_lc_set_controls(camrig_lc_camera *camera, const camrig_lc_value *values, int count, char *error, size_t size)
{
    const ControlIdMap &ids = camera->camera->controls().idmap();
    std::map<unsigned int, ControlValue> parsed;
    for (int i = 0; i < count; i++) {
        auto id = ids.find(values[i].id);
        if (id == ids.end() || camera->camera->controls().find(values[i].id) == camera->camera->controls().end()) {
            fail(error, size, "has no control with id %u", values[i].id);
            return -1;
        }
        std::optional<ControlValue> value = controlValue(*id->second, values[i]);
        if (!value) {
            fail(error, size, "cannot set control %s from %u number(s)", id->second->name().c_str(), values[i].count);
            return -1;
        }
        parsed[values[i].id] = *value;
    }
    std::lock_guard<std::mutex> guard(camera->lock);
    for (auto &[id, value] : parsed)
        camera->pending[id] = value;
    return 0;
}

int camrig_lc_start(camrig_lc_camera *camera, int *memory_backed, char *error, size_t size)
{
    if (!camera->stream) {
        fail(error, size, "is not configured");
        return -1;
    }
    camera->freeBuffers();
    *memory_backed = 0;
    camera->allocator = std::make_unique<FrameBufferAllocator>(camera->camera);
    int allocated = camera->allocator->allocate(camera->stream);
    uint32_t bufferCount = camera->stream->configuration().bufferCount;
    if (allocated > 0) {
        for (const std::unique_ptr<FrameBuffer> &buffer : camera->allocator->buffers(camera->stream))
            camera->buffers.push_back(buffer.get());
    } else {
        // No buffers from the pipeline (libcamera's virtual cameras allocate from a DMA heap, which not every
        // machine has): memory-backed ones, which a pipeline that fills buffers in software maps as well.
        camera->allocator.reset();
        *memory_backed = 1;
        int planes = planeCount(camera->fourcc);
        size_t first = planes == 1 ? camera->frameSize : static_cast<size_t>(camera->stride) * camera->height;
        for (uint32_t i = 0; i < bufferCount; i++) {
            int fd = memfd_create("camrig-libcamera-buffer", MFD_CLOEXEC);
            if (fd < 0 || ftruncate(fd, camera->frameSize) < 0) {
                int reason = errno;
                if (fd >= 0)
                    close(fd);
                camera->freeBuffers();
                fail(error, size, "has no buffers: its pipeline exported none (%s) and memory could not be had: %s",
                     strerror(-allocated), strerror(reason));
                return -1;
            }
            camera->ownFds.push_back(fd);
            std::vector<FrameBuffer::Plane> layout;
            size_t rest = camera->frameSize - first;
            size_t offsets[3] = { 0, first, first + rest / 2 };
            size_t lengths[3] = { first, planes == 2 ? rest : rest / 2, rest - rest / 2 };
            for (int p = 0; p < planes; p++) {
                FrameBuffer::Plane plane;
                plane.fd = SharedFD(fd);
                plane.offset = static_cast<unsigned int>(offsets[p]);
                plane.length = static_cast<unsigned int>(lengths[p]);
                layout.push_back(plane);
            }
            camera->ownBuffers.push_back(std::make_unique<FrameBuffer>(layout));
            camera->buffers.push_back(camera->ownBuffers.back().get());
        }
    }
    for (size_t index = 0; index < camera->buffers.size(); index++) {
        FrameBuffer *buffer = camera->buffers[index];
        BufferView view;
        // Planes of one memory object (their descriptors may differ, each a duplicate) share one mapping.
        auto object = [](int fd) {
            struct stat status {};
            fstat(fd, &status);
            return std::make_pair(static_cast<uint64_t>(status.st_dev), static_cast<uint64_t>(status.st_ino));
        };
        std::map<std::pair<uint64_t, uint64_t>, std::pair<void *, size_t>> mapped;
        std::map<std::pair<uint64_t, uint64_t>, int> descriptors;
        for (const FrameBuffer::Plane &plane : buffer->planes()) {
            size_t end = static_cast<size_t>(plane.offset) + plane.length;
            auto key = object(plane.fd.get());
            auto &entry = mapped[key];
            entry.second = std::max(entry.second, end);
            descriptors[key] = plane.fd.get();
        }
        bool ok = true;
        for (auto &[key, entry] : mapped) {
            void *address = mmap(nullptr, entry.second, PROT_READ | PROT_WRITE, MAP_SHARED, descriptors[key], 0);
            if (address == MAP_FAILED) {
                ok = false;
                break;
            }
            entry.first = address;
            view.mappings.push_back({ address, entry.second });
        }
        if (!ok) {
            camera->views.push_back(std::move(view));
            camera->freeBuffers();
            fail(error, size, "its buffers cannot be mapped: %s", strerror(errno));
            return -1;
        }
        bool contiguous = true;
        const uint8_t *next = nullptr;
        for (const FrameBuffer::Plane &plane : buffer->planes()) {
            const uint8_t *start = static_cast<const uint8_t *>(mapped[object(plane.fd.get())].first) + plane.offset;
            if (next && start != next)
                contiguous = false;
            next = start + plane.length;
            view.planes.push_back({ start, plane.length });
        }
        if (contiguous && !view.planes.empty()) {
            view.contiguous = view.planes.front().first;
            view.contiguousLength = static_cast<size_t>(next - view.contiguous);
        }
        camera->views.push_back(std::move(view));
        std::unique_ptr<Request> request = camera->camera->createRequest(index);
        if (!request || request->addBuffer(camera->stream, buffer) < 0) {
            camera->freeBuffers();
            fail(error, size, "cannot make its requests");
            return -1;
        }
        camera->requests.push_back(std::move(request));
    }
    ControlList initial(camera->camera->controls());
    {
        std::lock_guard<std::mutex> guard(camera->lock);
        for (auto &[id, value] : camera->pending)
            initial.set(id, value);
        camera->pending.clear();
        camera->frames.clear();
        camera->running = true;
    }
    int result = camera->camera->start(&initial);
    if (result < 0) {
        std::lock_guard<std::mutex> guard(camera->lock);
        camera->running = false;
        camera->freeBuffers();
        fail(error, size, "did not start: %s", strerror(-result));
        return -1;
    }
    return static_cast<int>(camera->buffers.size());
}

int camrig_lc_queue(camrig_lc_camera *camera, uint32_t index, char *error, size_t size)
{
    if (index >= camera->requests.size()) {
        fail(error, size, "has no buffer %u", index);
        return -1;
    }
    Request *request = camera->requests[index].get();
    request->reuse(Request::ReuseBuffers);
    // A buffer's status counts as the pipeline's verdict when the request completes, and a cancelled one
    // cancels the whole request. libcamera 0.4 leaves it uninitialised in a new FrameBuffer and never resets
    // it, and its virtual pipeline never sets it: left alone, a buffer that happened to read as cancelled
    // (or was cancelled once by a stop) would cancel every request it rides on. Pipelines that do set it
    // (every kernel-backed one, as a buffer is dequeued) overwrite this.
    for (auto &[stream, buffer] : request->buffers())
        const_cast<FrameMetadata &>(buffer->metadata()).status = FrameMetadata::FrameSuccess;
    {
        std::lock_guard<std::mutex> guard(camera->lock);
        if (!camera->running) {
            fail(error, size, "is not streaming");
            return -1;
        }
        for (auto &[id, value] : camera->pending)
            request->controls().set(id, value);
        camera->pending.clear();
    }
    int result = camera->camera->queueRequest(request);
    if (result < 0) {
        fail(error, size, "refused a request: %s", strerror(-result));
        return -1;
    }
    return 0;
}

int camrig_lc_wait(camrig_lc_camera *camera, int timeout_ms, camrig_lc_frame *frame)
{
    std::unique_lock<std::mutex> guard(camera->lock);
    camera->completed.wait_for(guard, std::chrono::milliseconds(timeout_ms),
                               [camera] { return !camera->frames.empty() || !camera->running || camera->woken; });
    camera->woken = false;
    if (!camera->frames.empty()) {
        *frame = camera->frames.front();
        camera->frames.pop_front();
        return 1;
    }
    return camera->running ? 0 : -1;
}

void camrig_lc_wake(camrig_lc_camera *camera)
{
    {
        std::lock_guard<std::mutex> guard(camera->lock);
        camera->woken = true;
    }
    camera->completed.notify_all();
}

size_t camrig_lc_copy(camrig_lc_camera *camera, uint32_t index, uint8_t *destination, size_t capacity)
{
    if (index >= camera->views.size())
        return 0;
    size_t used = 0;
    for (auto &[start, length] : camera->views[index].planes) {
        size_t n = std::min(length, capacity - used);
        memcpy(destination + used, start, n);
        used += n;
    }
    return used;
}

void camrig_lc_stop(camrig_lc_camera *camera)
{
    {
        std::lock_guard<std::mutex> guard(camera->lock);
        if (!camera->running)
            return;
    }
    if (camera->camera->stop() < 0)
        camera->mayBeHeld = true;
    {
        std::lock_guard<std::mutex> guard(camera->lock);
        camera->running = false;
        camera->frames.clear();
    }
    camera->completed.notify_all();
}

void camrig_lc_release(camrig_lc_camera *camera)
{
    camera->freeBuffers();
    camera->configuration.reset();
    camera->stream = nullptr;
    if (camera->acquired) {
        camera->camera->release();
        camera->acquired = false;
    }
}

} // extern "C"

#endif
