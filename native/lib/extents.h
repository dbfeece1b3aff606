/* libh5flow internals: the extents document of an n-n rank file (docs/STREAM.md, "Raw reads"). */
#ifndef H5FLOW_EXTENTS_H
#define H5FLOW_EXTENTS_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

typedef struct h5fl_extent {
    char path[400]; /* <mesh>/<association>/<array> */
    char dtype[8];  /* as numpy spells it: "<f8" */
    uint64_t rows, ncomp, offset, nbytes;
    int has_offset;
} h5fl_extent;

/* Where HDF5 put `dset`'s raw data (call before closing it). */
void h5fl_extent_of(h5fl_extent *e, hid_t dset, const char *mesh, const char *assoc, const char *name,
                    const char *dtype, uint64_t rows, uint64_t ncomp);
/* rank-<r>.extents.json beside the closed `rank_file` (rank-<r>.h5), then both made read-only (0400); 0 or an
 * errno value. */
int h5fl_write_extents(const char *rank_file, const h5fl_extent *ext, size_t n);

#endif
