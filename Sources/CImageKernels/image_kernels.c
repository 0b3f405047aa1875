#include "image_kernels.h"

#include <stdlib.h>
#include <string.h>

static inline uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint8_t clamp255(int value) {
    return value < 0 ? 0 : (value > 255 ? 255 : (uint8_t)value);
}

void camrig_add_noise(uint8_t *bytes, size_t count, const int16_t table[256], uint64_t *state) {
    size_t i = 0;
    while (i < count) {
        uint64_t random = splitmix64(state);
        for (int k = 0; k < 8 && i < count; k++, i++) {
            bytes[i] = clamp255((int)bytes[i] + table[random & 0xFF]);
            random >>= 8;
        }
    }
}

double camrig_squared_error(const uint8_t *a, const uint8_t *b, size_t count, size_t stride) {
    uint64_t sum = 0;
    for (size_t i = 0; i < count; i += stride) {
        int difference = (int)a[i] - (int)b[i];
        sum += (uint64_t)(difference * difference);
    }
    return (double)sum;
}

/// Each cell's mean byte: a `width` × `height` plane of cells.
static void cell_plane(uint8_t *plane, const uint8_t *image, size_t pitch, size_t width, size_t height, size_t cell_bytes, size_t cell_rows) {
    uint32_t area = (uint32_t)(cell_bytes * cell_rows);
    for (size_t y = 0; y < height; y++) {
        for (size_t x = 0; x < width; x++) {
            uint32_t sum = 0;
            for (size_t r = 0; r < cell_rows; r++) {
                const uint8_t *row = image + (y * cell_rows + r) * pitch + x * cell_bytes;
                for (size_t b = 0; b < cell_bytes; b++) sum += row[b];
            }
            plane[y * width + x] = (uint8_t)((sum + area / 2) / area);
        }
    }
}

/// A plane averaged over 4 × 4 samples.
static void quarter_plane(uint8_t *small, const uint8_t *plane, size_t width, size_t height) {
    size_t w = width / 4, h = height / 4;
    for (size_t y = 0; y < h; y++) {
        for (size_t x = 0; x < w; x++) {
            uint32_t sum = 0;
            for (size_t r = 0; r < 4; r++) {
                const uint8_t *row = plane + (y * 4 + r) * width + x * 4;
                sum += (uint32_t)row[0] + row[1] + row[2] + row[3];
            }
            small[y * w + x] = (uint8_t)((sum + 8) / 16);
        }
    }
}

/// The sum of absolute differences of `count` bytes (a loop the compiler turns into vector instructions).
static inline uint32_t row_sad(const uint8_t *restrict a, const uint8_t *restrict b, int count) {
    uint32_t sum = 0;
    for (int i = 0; i < count; i++) {
        int d = (int)a[i] - (int)b[i];
        sum += (uint32_t)(d < 0 ? -d : d);
    }
    return sum;
}

/// The motion (dx, dy) within ±radius around (cx, cy) that best matches the tile at (x0, y0) of size
/// tw × th of `reference` in `frame` (planes of width × height). A move may take part of the tile out of
/// the plane (content leaving the picture) as long as at least half of it stays in; its cost is the
/// mean absolute difference over the part inside. Returns that cost scaled by 256 (UINT64_MAX when no
/// move keeps half the tile inside, and the motion is 0).
static uint64_t best_motion(
    const uint8_t *reference, const uint8_t *frame, size_t width, size_t height, size_t x0, size_t y0, size_t tw, size_t th,
    int cx, int cy, int radius, int *best_dx, int *best_dy) {
    uint64_t best = UINT64_MAX;
    int best_cost = 0;
    *best_dx = 0;
    *best_dy = 0;
    for (int dy = cy - radius; dy <= cy + radius; dy++) {
        long top = (long)y0 + dy < 0 ? -((long)y0 + dy) : 0;
        long bottom = (long)(y0 + th) + dy > (long)height ? (long)th - ((long)(y0 + th) + dy - (long)height) : (long)th;
        if (bottom <= top) continue;
        for (int dx = cx - radius; dx <= cx + radius; dx++) {
            long left = (long)x0 + dx < 0 ? -((long)x0 + dx) : 0;
            long right = (long)(x0 + tw) + dx > (long)width ? (long)tw - ((long)(x0 + tw) + dx - (long)width) : (long)tw;
            if (right <= left) continue;
            uint64_t area = (uint64_t)(right - left) * (uint64_t)(bottom - top);
            if (2 * area < (uint64_t)tw * th) continue;
            uint64_t sad = 0;
            int span = (int)(right - left);
            for (long y = top; y < bottom; y++) {
                const uint8_t *a = reference + (y0 + (size_t)y) * width + x0 + left;
                const uint8_t *b = frame + (size_t)((long)(y0 + (size_t)y) + dy) * width + (size_t)((long)x0 + dx + left);
                sad += row_sad(a, b, span);
            }
            uint64_t cost = sad * 256 / area;
            int distance = (dx < 0 ? -dx : dx) + (dy < 0 ? -dy : dy);
            if (cost < best || (cost == best && distance < best_cost)) {
                best = cost;
                best_cost = distance;
                *best_dx = dx;
                *best_dy = dy;
            }
        }
    }
    return best;
}

size_t camrig_align_merge(
    uint8_t *out, const uint8_t *const *frames, size_t frame_count, size_t pitch, size_t row_bytes, size_t rows,
    size_t cell_bytes, size_t cell_rows, size_t tile_cells, int search_cells, double threshold_sigmas, double *sigma) {
    if (frame_count > 64) frame_count = 64;
    *sigma = 0;
    size_t width = row_bytes / cell_bytes, height = rows / cell_rows;
    size_t small_width = width / 4, small_height = height / 4;
    size_t tiles_x = tile_cells ? (width + tile_cells - 1) / tile_cells : 0, tiles_y = tile_cells ? (height + tile_cells - 1) / tile_cells : 0;
    uint8_t *planes = NULL, *smalls = NULL;
    int *motion = NULL;
    if (frame_count >= 2 && tile_cells >= 4 && small_width >= 1 && small_height >= 1) {
        planes = malloc(frame_count * width * height);
        smalls = malloc(frame_count * small_width * small_height);
        motion = calloc(tiles_x * tiles_y * frame_count * 2, sizeof(int));
    }
    if (!planes || !smalls || !motion) {
        free(planes); free(smalls); free(motion);
        for (size_t y = 0; y < rows; y++) memcpy(out + y * pitch, frames[0] + y * pitch, row_bytes);
        return 0;
    }
    for (size_t f = 0; f < frame_count; f++) {
        cell_plane(planes + f * width * height, frames[f], pitch, width, height, cell_bytes, cell_rows);
        quarter_plane(smalls + f * small_width * small_height, planes + f * width * height, width, height);
    }
    // Each tile's motion in each frame. The coarse search matches a window twice the tile's size
    // around it (a tile alone holds too few samples at a quarter of the resolution to tell its motion
    // from a look-alike's); the fine search refines that motion, and also "no motion", and keeps the
    // better of the two.
    for (size_t ty = 0; ty < tiles_y; ty++) {
        for (size_t tx = 0; tx < tiles_x; tx++) {
            size_t x0 = tx * tile_cells, y0 = ty * tile_cells;
            size_t tw = x0 + tile_cells <= width ? tile_cells : width - x0;
            size_t th = y0 + tile_cells <= height ? tile_cells : height - y0;
            size_t sx = x0 / 4, sy = y0 / 4, sw = (tw + 3) / 4, sh = (th + 3) / 4;
            size_t wx = sx >= sw / 2 ? sx - sw / 2 : 0, wy = sy >= sh / 2 ? sy - sh / 2 : 0;
            size_t wr = sx + sw + sw / 2 < small_width ? sx + sw + sw / 2 : small_width;
            size_t wb = sy + sh + sh / 2 < small_height ? sy + sh + sh / 2 : small_height;
            int *tile_motion = motion + (ty * tiles_x + tx) * frame_count * 2;
            for (size_t f = 1; f < frame_count; f++) {
                int cx = 0, cy = 0;
                if (wr > wx && wb > wy) {
                    best_motion(smalls, smalls + f * small_width * small_height, small_width, small_height, wx, wy, wr - wx, wb - wy, 0, 0,
                                search_cells / 4, &cx, &cy);
                }
                int mx, my, zx, zy;
                uint64_t moved = best_motion(planes, planes + f * width * height, width, height, x0, y0, tw, th, 4 * cx, 4 * cy, 3, &mx, &my);
                // Around no motion too, unless that search already covered it.
                if (cx != 0 || cy != 0) {
                    uint64_t still = best_motion(planes, planes + f * width * height, width, height, x0, y0, tw, th, 0, 0, 3, &zx, &zy);
                    if (still <= moved) {
                        mx = zx;
                        my = zy;
                    }
                }
                tile_motion[2 * f] = mx;
                tile_motion[2 * f + 1] = my;
            }
        }
    }
    // The noise, from the reference and the second frame once aligned: the median absolute difference of
    // a sample of their bytes is 0.6745 × √2 σ for independent normal noise of deviation σ.
    uint64_t histogram[256] = {0};
    uint64_t samples = 0;
    for (size_t r = 0; r < rows; r += 3) {
        size_t ty = r / cell_rows / tile_cells;
        for (size_t b = (r * 7) % 61; b < row_bytes; b += 61) {
            size_t tx = b / cell_bytes / tile_cells;
            if (ty >= tiles_y || tx >= tiles_x) continue;
            const int *tile_motion = motion + (ty * tiles_x + tx) * frame_count * 2;
            long rr = (long)r + (long)tile_motion[3] * (long)cell_rows;
            long bb = (long)b + (long)tile_motion[2] * (long)cell_bytes;
            if (rr < 0 || rr >= (long)rows || bb < 0 || bb >= (long)row_bytes) continue;
            int d = (int)frames[0][r * pitch + b] - (int)frames[1][(size_t)rr * pitch + (size_t)bb];
            histogram[d < 0 ? -d : d]++;
            samples++;
        }
    }
    uint64_t seen = 0;
    int median = 0;
    for (; median < 255 && samples > 0; median++) {
        seen += histogram[median];
        if (2 * seen >= samples) break;
    }
    *sigma = (double)median / (0.6745 * 1.4142135623730951);
    int threshold = (int)(threshold_sigmas * *sigma + 0.5);
    if (threshold < 3) threshold = 3;

    uint32_t reciprocal[65];
    for (size_t n = 1; n <= frame_count; n++) reciprocal[n] = (uint32_t)((65536 + n / 2) / n);
    size_t merged = 0;
    for (size_t r = 0; r < rows; r++) {
        size_t ty = r / cell_rows / tile_cells;
        for (size_t b = 0; b < row_bytes; b++) {
            size_t tx = b / cell_bytes / tile_cells;
            int reference = frames[0][r * pitch + b];
            if (ty >= tiles_y || tx >= tiles_x) {
                out[r * pitch + b] = (uint8_t)reference;
                continue;
            }
            const int *tile_motion = motion + (ty * tiles_x + tx) * frame_count * 2;
            uint32_t sum = (uint32_t)reference, n = 1;
            for (size_t f = 1; f < frame_count; f++) {
                long rr = (long)r + (long)tile_motion[2 * f + 1] * (long)cell_rows;
                long bb = (long)b + (long)tile_motion[2 * f] * (long)cell_bytes;
                if (rr < 0 || rr >= (long)rows || bb < 0 || bb >= (long)row_bytes) continue;
                int value = frames[f][(size_t)rr * pitch + (size_t)bb];
                int difference = value - reference;
                if (difference <= threshold && difference >= -threshold) {
                    sum += (uint32_t)value;
                    n++;
                }
            }
            merged += n > 1;
            out[r * pitch + b] = clamp255((int)((sum * reciprocal[n] + 32768) >> 16));
        }
    }
    free(planes);
    free(smalls);
    free(motion);
    return merged;
}
