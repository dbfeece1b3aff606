/* h5flow_async: the VOL class and the plugin entry points. */
#include "h5fpt.h"

#include <H5PLextern.h>
#include <pthread.h>

#define H5FA_NAME "h5flow_async"
#define H5FA_VALUE 312 /* in the 256-511 range HDF5 reserves for testing new connectors */

static const h5fpt_desc_t desc = {
    .name = H5FA_NAME,
    .value = H5FA_VALUE,
    .conn_version = 1,
    .cap_flags = 0,
};

static H5VL_class_t cls;
static pthread_once_t cls_once = PTHREAD_ONCE_INIT;
static int cls_ok;

static void build_class(void) { cls_ok = h5fpt_class_init(&cls, &desc) >= 0; }

__attribute__((visibility("default"))) H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_VOL; }

__attribute__((visibility("default"))) const void *H5PLget_plugin_info(void)
{
    pthread_once(&cls_once, build_class);
    return cls_ok ? &cls : NULL;
}
