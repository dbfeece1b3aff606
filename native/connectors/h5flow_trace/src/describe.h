/* h5flow_trace: short descriptions of datatypes, dataspaces and property lists (docs/TRACE.md). */
#ifndef H5FT_DESCRIBE_H
#define H5FT_DESCRIBE_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

/* "f64le", "i32be", "vlen-str", "compound(24)", ... into buf; "" for an invalid id. */
void h5ft_type_str(hid_t type, char *buf, size_t len);

typedef struct h5ft_sel {
    uint64_t npoints, nblocks;
    unsigned ndims;
    char shape[160];
} h5ft_sel;

/* Points and blocks of the selection of space, its rank and "AxBxC" dims. */
void h5ft_space_sel(hid_t space, h5ft_sel *out);

/* JSON of a dataset creation property list / a file access property list into buf (truncated to len). */
void h5ft_dcpl_json(hid_t dcpl, char *buf, size_t len);
void h5ft_fapl_json(hid_t fapl, char *buf, size_t len);

#endif
