/* fgcore/q4.h - the byte layout of 4-bit group quantization (codec
 * int4_group64, tensor dtypes FG_DTYPE_Q4_ROWS / FG_DTYPE_Q4_COLS).
 *
 * A logical [rows, cols] tensor of reals is cut into groups of 64 values along
 * one dimension: along dimension 0 a group is 64 consecutive rows of one
 * column (weights, stored [out, in]); along dimension 1 it is 64 consecutive
 * values of one row (the KV cache, grouped along the head dimension).  A last
 * partial group holds the remaining values only.
 *
 * Per group: mn = min, mx = max over its values; scale = (mx - mn) / 15, both
 * stored as fp16; each value x becomes q = round((x - mn) / scale) clamped to
 * 0..15 (q = 0 when scale is 0, so a constant group decodes exactly to mn);
 * it decodes as q * scale + mn (in fp32, from the fp16 scale and min).
 * Rounding: mn is the largest fp16 <= min and scale the smallest fp16 with
 * mn + 15 * scale >= max (min and max clamped to ±65504 first, so finite values
 * beyond it saturate like infinities), and q = (x - mn) * (1 / scale) computed
 * in fp32 from these stored values, rounded to nearest with ties to even.
 * Non-finite inputs: NaN values are ignored when finding min and max and
 * encode as q = 0; +inf/-inf clamp the group's range to the fp16 limits
 * (±65504).  A group of only NaNs encodes mn = 0, scale = 0.
 *
 * Bytes, in this order:
 *   data:   the q values of the tensor in row-major order, two per byte, element
 *           e = r * cols + c in byte e / 2, even e in the high nibble; rounded
 *           up to a multiple of 64 bytes (padding zero);
 *   params: per group a pair (scale, mn) of fp16, groups in row-major order of
 *           the group grid [grid_rows, grid_cols]: dimension 0 grouping gives a
 *           grid of [ceil(rows / 64), cols], dimension 1 [rows, ceil(cols / 64)].
 */
#ifndef FGCORE_Q4_H
#define FGCORE_Q4_H

#include <stdint.h>

#define FG_Q4_GROUP 64

static inline uint64_t fg_q4_data_bytes(uint64_t rows, uint64_t cols)
{
	return ((rows * cols + 1) / 2 + 63) & ~(uint64_t)63;
}

static inline uint64_t fg_q4_grid_rows(uint64_t rows, int group_dim)
{
	return group_dim == 0 ? (rows + FG_Q4_GROUP - 1) / FG_Q4_GROUP : rows;
}

static inline uint64_t fg_q4_grid_cols(uint64_t cols, int group_dim)
{
	return group_dim == 0 ? cols : (cols + FG_Q4_GROUP - 1) / FG_Q4_GROUP;
}

/* The q value of element e (row-major index) in the data bytes. */
static inline unsigned fg_q4_nibble(const uint8_t *data, uint64_t e)
{
	return e & 1 ? data[e / 2] & 15u : data[e / 2] >> 4u;
}

/* Total encoded bytes: data, then 4 bytes (scale, min) per group. */
static inline uint64_t fg_q4_bytes(uint64_t rows, uint64_t cols, int group_dim)
{
	return fg_q4_data_bytes(rows, cols) +
	       4 * fg_q4_grid_rows(rows, group_dim) * fg_q4_grid_cols(cols, group_dim);
}

#endif
