/* Soft links (docs/FORMAT.md "Links"): a soft link is a directory holding one file, @softlink, whose
 * bytes are the link's target path. A directory is used (rather than a file beside the objects) so that
 * a link and an object of the same name collide in mkdir(2), and moves and deletions of links are the
 * same renames and removals as those of objects. */
#include "h5fl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define H5FL_SOFT_MAX 65536 /* bytes of a soft link's target that are read back */

char *h5fl_softlink_read(const char *dir)
{
    char *p = h5fl_join(dir, H5FL_SOFT_FILE);
    void *buf = NULL;
    size_t len = 0;
    int st = p ? h5fl_read_file(p, &buf, &len) : -1;
    free(p);
    if (st != 0)
        return NULL;
    if (len == 0 || len > H5FL_SOFT_MAX || memchr(buf, '\0', len)) {
        h5fl_err("soft link file %s/" H5FL_SOFT_FILE " is damaged (empty, too long or holding a NUL byte)",
                 dir);
        free(buf);
        return NULL;
    }
    char *s = malloc(len + 1);
    if (!s) {
        h5fl_err("out of memory");
        free(buf);
        return NULL;
    }
    memcpy(s, buf, len);
    s[len] = '\0';
    free(buf);
    return s;
}

int h5fl_softlink_create(const char *dir, const char *path, const char *target, bool sync)
{
    size_t len = strlen(target);
    if (len == 0 || len > H5FL_SOFT_MAX) {
        h5fl_err("cannot create soft link '%s': its target must be 1 to %d bytes long", path, H5FL_SOFT_MAX);
        return -1;
    }
    if (mkdir(dir, 0755) != 0) {
        if (errno != EEXIST || h5fl_dir_type(dir, false) != H5I_BADID) {
            h5fl_err(errno == EEXIST ? "cannot create soft link '%s': a link with this name already exists"
                                     : "cannot create soft link '%s': %s",
                     path, strerror(errno));
            return -1;
        } /* else a creation that never completed: take it over */
    }
    return h5fl_write_file_atomic(dir, H5FL_SOFT_FILE, target, len, sync);
}
