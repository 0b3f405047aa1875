#include "image_kernels.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

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
    // Every (draw, byte value) pair's result, built once per thread and table: the loop below is then a
    // load and a store a byte with no call in it, which keeps a build without optimization (a debug
    // build renders 720p at 60 fps with this) within a few times an optimized one.
    static __thread uint8_t noisy[256][256];
    static __thread int16_t built[256];
    static __thread int ready = 0;
    int same = ready;
    for (int draw = 0; same && draw < 256; draw++) same = built[draw] == table[draw];
    if (!same) {
        for (int draw = 0; draw < 256; draw++) {
            built[draw] = table[draw];
            for (int value = 0; value < 256; value++) noisy[draw][value] = clamp255(value + table[draw]);
        }
        ready = 1;
    }
    uint8_t *p = bytes;
    uint8_t *whole = bytes + (count & ~(size_t)7);
    while (p < whole) {
        uint64_t z = splitmix64(state);
        p[0] = noisy[z & 0xFF][p[0]];
        p[1] = noisy[(z >> 8) & 0xFF][p[1]];
        p[2] = noisy[(z >> 16) & 0xFF][p[2]];
        p[3] = noisy[(z >> 24) & 0xFF][p[3]];
        p[4] = noisy[(z >> 32) & 0xFF][p[4]];
        p[5] = noisy[(z >> 40) & 0xFF][p[5]];
        p[6] = noisy[(z >> 48) & 0xFF][p[6]];
        p[7] = noisy[z >> 56][p[7]];
        p += 8;
    }
    if (p < bytes + count) {
        uint64_t z = splitmix64(state);
        for (; p < bytes + count; p++, z >>= 8) *p = noisy[z & 0xFF][*p];
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

/// The sum of absolute differences of `count` bytes, 16 at a time with SSE2's or NEON's absolute
/// differences where the target has them (intrinsics are inlined even in a build without optimization,
/// where the motion search spends most of its time here), then one at a time.
static inline uint32_t row_sad(const uint8_t *restrict a, const uint8_t *restrict b, int count) {
    uint32_t sum = 0;
    int i = 0;
#if defined(__SSE2__)
    __m128i total = _mm_setzero_si128();
    for (; i + 16 <= count; i += 16) {
        total = _mm_add_epi64(total, _mm_sad_epu8(_mm_loadu_si128((const __m128i *)(a + i)), _mm_loadu_si128((const __m128i *)(b + i))));
    }
    sum = (uint32_t)(_mm_cvtsi128_si64(total) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(total, total)));
#elif defined(__ARM_NEON)
    uint32x4_t total = vdupq_n_u32(0);
    for (; i + 16 <= count; i += 16) {
        total = vpadalq_u16(total, vpaddlq_u8(vabdq_u8(vld1q_u8(a + i), vld1q_u8(b + i))));
    }
    sum = vaddvq_u32(total);
#endif
    for (; i < count; i++) {
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
    // Tile by tile along each row: each frame's source row and the bytes its motion keeps in the
    // picture are worked out once per tile row, so the loop over bytes has no division or call in it.
    size_t merged = 0;
    size_t tile_bytes = cell_bytes * tile_cells;
    const uint8_t *source[64];
    long shift[64], low[64], high[64];
    for (size_t r = 0; r < rows; r++) {
        size_t ty = r / cell_rows / tile_cells;
        const uint8_t *reference_row = frames[0] + r * pitch;
        uint8_t *out_row = out + r * pitch;
        for (size_t tx = 0, start = 0; start < row_bytes; tx++, start += tile_bytes) {
            size_t end = start + tile_bytes < row_bytes ? start + tile_bytes : row_bytes;
            if (ty >= tiles_y || tx >= tiles_x) {
                memcpy(out_row + start, reference_row + start, end - start);
                continue;
            }
            const int *tile_motion = motion + (ty * tiles_x + tx) * frame_count * 2;
            size_t used = 0;
            for (size_t f = 1; f < frame_count; f++) {
                long rr = (long)r + (long)tile_motion[2 * f + 1] * (long)cell_rows;
                if (rr < 0 || rr >= (long)rows) continue;
                long moved = (long)tile_motion[2 * f] * (long)cell_bytes;
                long first = (long)start > -moved ? (long)start : -moved;
                long last = (long)end < (long)row_bytes - moved ? (long)end : (long)row_bytes - moved;
                if (last <= first) continue;
                source[used] = frames[f] + (size_t)rr * pitch;
                shift[used] = moved;
                low[used] = first;
                high[used] = last;
                used++;
            }
            for (size_t b = start; b < end; b++) {
                int reference = reference_row[b];
                uint32_t sum = (uint32_t)reference, n = 1;
                for (size_t u = 0; u < used; u++) {
                    if ((long)b < low[u] || (long)b >= high[u]) continue;
                    int value = source[u][(long)b + shift[u]];
                    int difference = value - reference;
                    if (difference <= threshold && difference >= -threshold) {
                        sum += (uint32_t)value;
                        n++;
                    }
                }
                merged += n > 1;
                uint32_t mean = (sum * reciprocal[n] + 32768) >> 16;
                out_row[b] = (uint8_t)(mean > 255 ? 255 : mean);
            }
        }
    }
    free(planes);
    free(smalls);
    free(motion);
    return merged;
}

void camrig_yuyv_to_jpeg_planes(const uint8_t *yuyv, size_t pitch, size_t width, size_t rows, uint8_t *y, uint8_t *u, uint8_t *v) {
    uint8_t luma[256], chroma[256];
    for (int value = 0; value < 256; value++) {
        int l = (value - 16) * 255 / 219;
        int c = (value - 128) * 255 / 224 + 128;
        luma[value] = (uint8_t)(l < 0 ? 0 : l > 255 ? 255 : l);
        chroma[value] = (uint8_t)(c < 0 ? 0 : c > 255 ? 255 : c);
    }
    size_t pairs = width / 2;
    for (size_t row = 0; row < rows; row++) {
        const uint8_t *line = yuyv + row * pitch;
        uint8_t *yl = y + row * width, *ul = u + row * pairs, *vl = v + row * pairs;
        for (size_t pair = 0; pair < pairs; pair++) {
            yl[2 * pair] = luma[line[4 * pair]];
            ul[pair] = chroma[line[4 * pair + 1]];
            yl[2 * pair + 1] = luma[line[4 * pair + 2]];
            vl[pair] = chroma[line[4 * pair + 3]];
        }
    }
}

void camrig_yuv420_to_yuyv(const uint8_t *luma, size_t luma_pitch, const uint8_t *u, const uint8_t *v, size_t chroma_pitch,
                           size_t chroma_step, size_t width, size_t height, uint8_t *out, size_t out_pitch) {
    size_t pairs = width / 2;
    for (size_t row = 0; row < height; row++) {
        const uint8_t *y = luma + row * luma_pitch;
        const uint8_t *ur = u + (row / 2) * chroma_pitch, *vr = v + (row / 2) * chroma_pitch;
        uint8_t *line = out + row * out_pitch;
        for (size_t pair = 0; pair < pairs; pair++) {
            line[4 * pair] = y[2 * pair];
            line[4 * pair + 1] = ur[pair * chroma_step];
            line[4 * pair + 2] = y[2 * pair + 1];
            line[4 * pair + 3] = vr[pair * chroma_step];
        }
    }
}
