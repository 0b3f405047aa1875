#ifndef CAMRIG_IMAGE_KERNELS_H
#define CAMRIG_IMAGE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/// Adds noise to `count` bytes: each byte moves by `table[r]` for a random byte `r` drawn from the
/// SplitMix64 generator whose state is `*state` (advanced), and is clamped to 0...255. A table of the
/// quantiles of a normal distribution gives normally distributed noise.
void camrig_add_noise(uint8_t *bytes, size_t count, const int16_t table[256], uint64_t *state);

/// Aligns `frame_count - 1` images to the reference (`frames[0]`) tile by tile and merges them into
/// `out` (laid out as the frames, `pitch` bytes per row): each byte becomes the mean of the reference's
/// and every other frame's byte, taken from where its tile's content moved to, within `threshold_sigmas` noise
/// deviations of the reference (at least 3 levels). The noise deviation is estimated from the reference
/// and the second frame once aligned, and stored in `*sigma`.
///
/// The images are `rows` rows of `row_bytes` bytes, `pitch` bytes apart, made of cells of `cell_bytes`
/// bytes by `cell_rows` rows that repeat across the image (YUYV: 4 by 1; RGB: 3 by 1; grey: 1 by 1;
/// a Bayer mosaic: 2 by 2); motion is found and applied in whole cells. Each tile of `tile_cells` by
/// `tile_cells` cells is matched over ±`search_cells` cells on images averaged over 4 by 4 cells (with a
/// window twice the tile's size), then refined by ±3 cells at full resolution around that motion and
/// around no motion, the better kept (mean absolute difference of each cell's mean; the smaller motion
/// wins a tie; a move may take up to half the tile out of the picture). Samples a motion takes out of
/// the picture are left out. Returns how many bytes took more than the reference.
size_t camrig_align_merge(
    uint8_t *out, const uint8_t *const *frames, size_t frame_count, size_t pitch, size_t row_bytes, size_t rows,
    size_t cell_bytes, size_t cell_rows, size_t tile_cells, int search_cells, double threshold_sigmas, double *sigma);

/// The sum of squared differences of `count` samples of `a` and `b`, taken every `stride` bytes.
double camrig_squared_error(const uint8_t *a, const uint8_t *b, size_t count, size_t stride);

/// Splits `rows` rows of YUYV (`width` pixels, even, each row `pitch` bytes apart) into the planes of a
/// full-range 4:2:2 JPEG: `y` (width × rows), `u` and `v` (width/2 × rows), stretching BT.601 video range
/// (16–235 luma, 16–240 chroma) to 0–255.
void camrig_yuyv_to_jpeg_planes(const uint8_t *yuyv, size_t pitch, size_t width, size_t rows, uint8_t *y, uint8_t *u, uint8_t *v);

/// Packs 4:2:0 planar YUV into YUYV (4:2:2): `height` rows of `width` pixels (even), luma rows `luma_pitch`
/// apart; chroma rows `chroma_pitch` apart, each shared by two luma rows, with U and V samples `chroma_step`
/// bytes apart along a row (2 for NV12's interleaved U, V; 1 for YU12's separate planes). Output rows are
/// `out_pitch` apart.
void camrig_yuv420_to_yuyv(const uint8_t *luma, size_t luma_pitch, const uint8_t *u, const uint8_t *v, size_t chroma_pitch,
                           size_t chroma_step, size_t width, size_t height, uint8_t *out, size_t out_pitch);

#endif
