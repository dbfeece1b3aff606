/* h5flow-iotest CASEFILE: run every case of CASEFILE (see iotest.h) under MPI. */
#include "iotest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_result(const iot_case *c, const iot_result *r)
{
    printf("RESULT index=%d wall=%.6f fsize=%.0f write-phase-min=%.6f write-phase-max=%.6f creat-min=%.6f "
           "creat-max=%.6f write-min=%.6f write-max=%.6f read-phase-min=%.6f read-phase-max=%.6f "
           "read-min=%.6f read-max=%.6f checked=%llu\n",
           c->index, r->wall, r->fsize, r->min[0], r->max[0], r->min[1], r->max[1], r->min[2], r->max[2],
           r->min[3], r->max[3], r->min[4], r->max[4], r->checked);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    iot_env env = {MPI_COMM_WORLD, 0, 1};
    MPI_Comm_rank(env.comm, &env.rank);
    MPI_Comm_size(env.comm, &env.size);
    if (argc != 2) {
        if (env.rank == 0)
            fprintf(stderr, "usage: h5flow-iotest CASEFILE\n(one case per line; written by "
                            "`h5flow bench iotest`, see native/benchmarks/iotest/iotest.h)\n");
        MPI_Finalize();
        return 2;
    }
    FILE *in = fopen(argv[1], "r");
    if (in == NULL) {
        if (env.rank == 0)
            fprintf(stderr, "h5flow-iotest: cannot open case file %s\n", argv[1]);
        MPI_Finalize();
        return 2;
    }
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    if (env.rank == 0) {
        printf("HDF5 %u.%u.%u\n", maj, min, rel);
        fflush(stdout);
    }
    char line[PATH_MAX + 1024], err[512];
    int lineno = 0, status = 0;
    while (status == 0 && fgets(line, sizeof(line), in) != NULL) {
        ++lineno;
        if (line[0] == '\n' || line[0] == '#')
            continue;
        iot_case c;
        if (iot_parse_case(line, lineno, &c, err, sizeof(err)) != 0) {
            if (env.rank == 0)
                fprintf(stderr, "h5flow-iotest: %s: %s\n", argv[1], err);
            status = 2;
            break;
        }
        if (c.op == IOT_OP_IOTEST && c.prows * c.pcols != (unsigned)env.size) {
            if (env.rank == 0)
                fprintf(stderr, "h5flow-iotest: case %d: process grid %u x %u needs %u ranks, running on %d\n",
                        c.index, c.prows, c.pcols, c.prows * c.pcols, env.size);
            status = 2;
            break;
        }
        if (strcmp(c.vfd, "subfiling") == 0 && provided != MPI_THREAD_MULTIPLE) {
            if (env.rank == 0)
                fprintf(stderr, "h5flow-iotest: case %d: the subfiling driver needs MPI_THREAD_MULTIPLE\n",
                        c.index);
            status = 2;
            break;
        }
        iot_result r;
        memset(&r, 0, sizeof(r));
        if (c.op == IOT_OP_FILECREATE)
            status = iot_run_filecreate(&env, &c, &r);
        else if (c.op == IOT_OP_OBJSCAN)
            status = iot_run_objscan(&env, &c, &r);
        else
            status = iot_run_iotest(&env, &c, &r);
        if (status != 0) {
            if (env.rank == 0)
                fprintf(stderr, "h5flow-iotest: case %d: verification failed: the data read back differs "
                                "from the data written\n", c.index);
            break;
        }
        if (env.rank == 0)
            print_result(&c, &r);
    }
    fclose(in);
    MPI_Finalize();
    return status;
}
