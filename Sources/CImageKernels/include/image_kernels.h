#ifndef CAMRIG_IMAGE_KERNELS_H
#define CAMRIG_IMAGE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/// Adds noise to `count` bytes: each byte moves by `table[r]` for a random byte `r` drawn from the
/// SplitMix64 generator whose state is `*state` (advanced), and is clamped to 0...255. A table of the
/// quantiles of a normal distribution gives normally distributed noise.
void camrig_add_noise(uint8_t *bytes, size_t count, const int16_t table[256], uint64_t *state);

/// Merges `frame_count` images of `count` bytes into `out`, byte by byte: the mean of the reference
/// (`frames[0]`) and every other frame's byte within `threshold` of it. Bytes that differ by more
/// (something moved) keep the reference's value alone. Returns how many bytes took more than the reference.
size_t camrig_merge_frames(uint8_t *out, const uint8_t *const *frames, size_t frame_count, size_t count, int threshold);

/// The sum of squared differences of `count` samples of `a` and `b`, taken every `stride` bytes.
double camrig_squared_error(const uint8_t *a, const uint8_t *b, size_t count, size_t stride);

#endif
