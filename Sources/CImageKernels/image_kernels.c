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

size_t camrig_merge_frames(uint8_t *out, const uint8_t *const *frames, size_t frame_count, size_t count, int threshold) {
    // Division by 1...frame_count as a multiply: (sum * reciprocal[n] + 2^15) >> 16.
    uint32_t reciprocal[65];
    if (frame_count > 64) frame_count = 64;
    for (size_t n = 1; n <= frame_count; n++) reciprocal[n] = (uint32_t)((65536 + n / 2) / n);
    size_t merged = 0;
    for (size_t i = 0; i < count; i++) {
        int reference = frames[0][i];
        uint32_t sum = (uint32_t)reference;
        uint32_t n = 1;
        for (size_t f = 1; f < frame_count; f++) {
            int value = frames[f][i];
            int difference = value - reference;
            if (difference <= threshold && difference >= -threshold) {
                sum += (uint32_t)value;
                n++;
            }
        }
        merged += n > 1;
        out[i] = clamp255((int)((sum * reciprocal[n] + 32768) >> 16));
    }
    return merged;
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

/// The motion (dx, dy) within ±radius around (cx, cy) that best matches the tile at (x0, y0) of size
/// tw × th of `reference` in `frame` (planes of width × height); moves leaving the plane are skipped.
static void best_motion(
    const uint8_t *reference, const uint8_t *frame, size_t width, size_t height, size_t x0, size_t y0, size_t tw, size_t th,
    int cx, int cy, int radius, int *best_dx, int *best_dy) {
    uint64_t best = UINT64_MAX;
    int best_cost = 0;
    *best_dx = cx;
    *best_dy = cy;
    for (int dy = cy - radius; dy <= cy + radius; dy++) {
        if ((long)y0 + dy < 0 || (long)(y0 + th) + dy > (long)height) continue;
        for (int dx = cx - radius; dx <= cx + radius; dx++) {
            if ((long)x0 + dx < 0 || (long)(x0 + tw) + dx > (long)width) continue;
            uint64_t sad = 0;
            for (size_t y = 0; y < th; y++) {
                const uint8_t *a = reference + (y0 + y) * width + x0;
                const uint8_t *b = frame + (size_t)((long)(y0 + y) + dy) * width + (size_t)((long)x0 + dx);
                for (size_t x = 0; x < tw; x++) {
                    int d = (int)a[x] - (int)b[x];
                    sad += (uint64_t)(d < 0 ? -d : d);
                }
            }
            int cost = (dx < 0 ? -dx : dx) + (dy < 0 ? -dy : dy);
            if (sad < best || (sad == best && cost < best_cost)) {
                best = sad;
                best_cost = cost;
                *best_dx = dx;
                *best_dy = dy;
            }
        }
    }
    if (best == UINT64_MAX) {
        *best_dx = 0;
        *best_dy = 0;
    }
}

size_t camrig_align_merge(
    uint8_t *out, const uint8_t *const *frames, size_t frame_count, size_t pitch, size_t row_bytes, size_t rows,
    size_t cell_bytes, size_t cell_rows, size_t tile_cells, int search_cells, int threshold) {
    if (frame_count > 64) frame_count = 64;
    size_t width = row_bytes / cell_bytes, height = rows / cell_rows;
    size_t small_width = width / 4, small_height = height / 4;
    if (frame_count < 2 || tile_cells < 4 || small_width < 1 || small_height < 1) {
        for (size_t y = 0; y < rows; y++) memcpy(out + y * pitch, frames[0] + y * pitch, row_bytes);
        return 0;
    }
    uint8_t *planes = malloc(frame_count * width * height);
    uint8_t *smalls = malloc(frame_count * small_width * small_height);
    int *motion = malloc(sizeof(int) * 2 * frame_count);
    if (!planes || !smalls || !motion) {
        free(planes); free(smalls); free(motion);
        for (size_t y = 0; y < rows; y++) memcpy(out + y * pitch, frames[0] + y * pitch, row_bytes);
        return 0;
    }
    for (size_t f = 0; f < frame_count; f++) {
        cell_plane(planes + f * width * height, frames[f], pitch, width, height, cell_bytes, cell_rows);
        quarter_plane(smalls + f * small_width * small_height, planes + f * width * height, width, height);
    }
    uint32_t reciprocal[65];
    for (size_t n = 1; n <= frame_count; n++) reciprocal[n] = (uint32_t)((65536 + n / 2) / n);
    size_t merged = 0;
    for (size_t ty = 0; ty < height; ty += tile_cells) {
        size_t th = ty + tile_cells <= height ? tile_cells : height - ty;
        for (size_t tx = 0; tx < width; tx += tile_cells) {
            size_t tw = tx + tile_cells <= width ? tile_cells : width - tx;
            motion[0] = motion[1] = 0;
            for (size_t f = 1; f < frame_count; f++) {
                int cx = 0, cy = 0;
                size_t sx = tx / 4, sy = ty / 4, sw = tw / 4, sh = th / 4;
                if (sw > 0 && sh > 0 && sx + sw <= small_width && sy + sh <= small_height) {
                    best_motion(smalls, smalls + f * small_width * small_height, small_width, small_height, sx, sy, sw, sh, 0, 0,
                                search_cells / 4, &cx, &cy);
                }
                best_motion(planes, planes + f * width * height, width, height, tx, ty, tw, th, 4 * cx, 4 * cy, 3,
                            &motion[2 * f], &motion[2 * f + 1]);
            }
            // The tile's bytes: the reference's and every frame's within the threshold, at its motion.
            for (size_t r = ty * cell_rows; r < (ty + th) * cell_rows; r++) {
                for (size_t b = tx * cell_bytes; b < (tx + tw) * cell_bytes; b++) {
                    int reference = frames[0][r * pitch + b];
                    uint32_t sum = (uint32_t)reference, n = 1;
                    for (size_t f = 1; f < frame_count; f++) {
                        long rr = (long)r + (long)motion[2 * f + 1] * (long)cell_rows;
                        long bb = (long)b + (long)motion[2 * f] * (long)cell_bytes;
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
        }
    }
    free(planes);
    free(smalls);
    free(motion);
    return merged;
}
