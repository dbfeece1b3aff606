/* h5flow-config: print, as one JSON object, how the HDF5 library that C programs link was built.
 *
 * The compile-time answers (H5pubconf.h) and the run-time answers (H5get_libversion,
 * H5is_library_threadsafe) are both printed, so a mismatch between the headers a program was built
 * with and the library it loads is visible. `h5flow info` reports the same facts from the library h5py
 * loads; the test suite checks that the two agree. */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#ifdef H5_HAVE_PARALLEL
#define HAVE_PARALLEL 1
#else
#define HAVE_PARALLEL 0
#endif
#ifdef H5_HAVE_SUBFILING_VFD
#define HAVE_SUBFILING 1
#else
#define HAVE_SUBFILING 0
#endif
#ifdef H5_HAVE_THREADSAFE
#define HAVE_THREADSAFE 1
#else
#define HAVE_THREADSAFE 0
#endif

static void print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static const char *json_bool(int v) { return v ? "true" : "false"; }

int main(int argc, char **argv)
{
    unsigned maj = 0, min = 0, rel = 0;
    hbool_t  ts = 0;
    char     mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
    int      len = 0;
    char    *eol;

    MPI_Init(&argc, &argv);
    if (H5get_libversion(&maj, &min, &rel) < 0 || H5is_library_threadsafe(&ts) < 0) {
        fprintf(stderr, "h5flow-config: cannot query the HDF5 library\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Get_library_version(mpi_version, &len);
    if ((eol = strchr(mpi_version, '\n')) != NULL)
        *eol = '\0';

    printf("{\"header_version\": \"%d.%d.%d\", \"library_version\": \"%u.%u.%u\", ", H5_VERS_MAJOR,
           H5_VERS_MINOR, H5_VERS_RELEASE, maj, min, rel);
    printf("\"parallel\": %s, \"subfiling\": %s, \"threadsafe_header\": %s, \"threadsafe\": %s, ",
           json_bool(HAVE_PARALLEL), json_bool(HAVE_SUBFILING), json_bool(HAVE_THREADSAFE), json_bool(ts));
    fputs("\"mpi_library\": ", stdout);
    print_json_string(mpi_version);
    puts("}");
    MPI_Finalize();
    return 0;
}
