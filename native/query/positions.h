#ifndef H5FLOW_QUERY_POSITIONS_H
#define H5FLOW_QUERY_POSITIONS_H
#include <stdint.h>

int64_t h5flow_query_positions(const uint8_t *mask, int64_t n, int64_t base, int64_t *out, int64_t cap);

int64_t h5flow_query_segments(int64_t nseg, const int64_t *kind, const int64_t *src, const int64_t *len,
                              const int64_t *base, int64_t *out, int64_t cap, int64_t *ends);

#endif
