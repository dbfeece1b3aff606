/* h5flow_log — where a file named inside a container is looked for: the source files of virtual datasets,
 * the targets of external links and the prefix of external storage, in native HDF5's order
 * (H5F_prefix_open_file and H5D__build_file_prefix in HDF5 1.14), so that a container reads the same file
 * native HDF5 would read. */
#include "h5fl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *h5fl_file_extpath(const h5fl_file_t *f)
{
    const char *name = f->name ? f->name : f->o.dir;
    const char *slash = strrchr(name, '/');
    char cwd[PATH_MAX] = "";
    if (name[0] != '/' && !getcwd(cwd, sizeof cwd)) {
        h5fl_err("cannot resolve the directory of '%s': %s", name, strerror(errno));
        return NULL;
    }
    size_t dl = slash ? (size_t)(slash - name) : 0, need = strlen(cwd) + dl + 2;
    char *r = malloc(need);
    if (!r) {
        h5fl_err("out of memory");
        return NULL;
    }
    if (name[0] == '/')
        snprintf(r, need, "%.*s", dl ? (int)dl : 1, dl ? name : "/");
    else
        snprintf(r, need, "%s%s%.*s", cwd, dl ? "/" : "", (int)dl, name);
    return r;
}

char *h5fl_build_prefix(const char *env_var, const char *prop, const h5fl_file_t *f, bool *err)
{
    *err = false;
    const char *env = env_var ? getenv(env_var) : NULL;
    const char *p = env && *env ? env : prop;
    if (!p || !*p || !strcmp(p, "."))
        return NULL;
    char *r = NULL;
    if (strncmp(p, "${ORIGIN}", 9) != 0) {
        r = h5fl_strdup(p);
    } else {
        char *dir = h5fl_file_extpath(f);
        if (dir) {
            size_t need = strlen(dir) + strlen(p + 9) + 1;
            if ((r = malloc(need)))
                snprintf(r, need, "%s%s", dir, p + 9);
            free(dir);
        }
    }
    if (!r) {
        *err = true;
        if (!h5fl_err_msg()[0])
            h5fl_err("out of memory");
    }
    return r;
}

/* prefix + "/" + name, without a second slash after one that ends the prefix (H5F__build_name). */
static char *build_name(const char *prefix, const char *name)
{
    size_t pl = strlen(prefix), n = pl + strlen(name) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s%s%s", prefix, (pl == 0 || prefix[pl - 1] == '/') ? "" : "/", name);
    return out;
}

static int add(char ***list, size_t *n, char *s)
{
    char **l = s ? realloc(*list, (*n + 2) * sizeof *l) : NULL;
    if (!l) {
        free(s);
        h5fl_err("out of memory");
        return -1;
    }
    l[(*n)++] = s;
    l[*n] = NULL;
    *list = l;
    return 0;
}

char **h5fl_lookup_candidates(const char *name, const char *env_var, const char *prefix, const h5fl_file_t *f)
{
    char **list = NULL;
    size_t n = 0;
    int st = add(&list, &n, h5fl_strdup(name)); /* an absolute name as given; a relative one: last, below */
    const char *rel = name;
    if (name[0] == '/')
        rel = strrchr(name, '/') + 1;
    else if (st == 0) {
        free(list[0]);
        n = 0;
        list[0] = NULL;
    }
    const char *env = env_var ? getenv(env_var) : NULL;
    char *copy = st == 0 && env && *env ? h5fl_strdup(env) : NULL;
    for (char *entry = copy, *next; st == 0 && entry && *entry; entry = next) {
        char *colon = strchr(entry, ':');
        next = colon ? colon + 1 : NULL;
        if (colon)
            *colon = '\0';
        if (*entry)
            st = add(&list, &n, build_name(entry, rel));
    }
    free(copy);
    if (st == 0 && prefix)
        st = add(&list, &n, build_name(prefix, rel));
    char *dir = st == 0 ? h5fl_file_extpath(f) : NULL;
    if (st == 0)
        st = dir ? add(&list, &n, build_name(dir, rel)) : -1;
    free(dir);
    if (st == 0)
        st = add(&list, &n, h5fl_strdup(rel));
    if (st != 0) {
        h5fl_lookup_free(list);
        return NULL;
    }
    return list;
}

void h5fl_lookup_free(char **list)
{
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}
