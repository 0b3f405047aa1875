#include "image_kernels.h"

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
