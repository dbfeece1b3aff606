/* Generated from the declarations of Hdf5Settings (h5flow.transports.hdf5.settings) by
 * `python -m h5flow.settings_gen`: do not edit; tests/test_settings.py checks that it matches. */
#ifndef H5FLOW_CONFIG_TABLE_H
#define H5FLOW_CONFIG_TABLE_H

#include <stddef.h>

typedef enum { H5FL_BOOL, H5FL_INT, H5FL_BYTES, H5FL_SECONDS, H5FL_FLOAT, H5FL_CHOICE, H5FL_PATTERN, H5FL_STRING } h5fl_kind;
typedef enum { H5FL_PRODUCER, H5FL_CONSUMER, H5FL_BOTH } h5fl_side;
typedef struct { const char *value, *reason; } h5fl_refusal;
typedef struct {
    const char *name; /* the settings field */
    const char *xml; /* its XML attribute */
    const char *alias; /* another accepted attribute name, or NULL */
    h5fl_kind kind;
    h5fl_side side;
    double minimum, maximum; /* int, bytes, seconds, float */
    const char *const *choices; /* choice: lower case, in declared order */
    size_t n_choices;
    const char *pattern; /* pattern: a POSIX extended regular expression the whole value matches */
    const char *accepted; /* what the error message says is accepted */
    const h5fl_refusal *refused; /* values refused everywhere, with their reason */
    size_t n_refused;
    const h5fl_refusal *c_refused; /* values the C library refuses, with the reason */
    size_t n_c_refused;
} h5fl_setting;

static const char *const H5FL_CHOICES_queue_policy[] = {"block", "discard"};
static const char *const H5FL_CHOICES_dead_consumer[] = {"wait", "drop", "error"};
static const char *const H5FL_CHOICES_layout[] = {"n-1", "n-n", "log"};
static const h5fl_refusal H5FL_C_REFUSED_layout[] = {
    {"log", "the C library writes the layouts n-n and n-1; layout=\"log\" needs the h5flow_log connector, which only the Python producer drives: give n-n or n-1, or write from Python"}
};
static const char *const H5FL_CHOICES_driver[] = {"mpio", "subfiling"};
static const h5fl_refusal H5FL_C_REFUSED_driver[] = {
    {"subfiling", "driver=\"subfiling\" is not offered by the C library; use driver=\"mpio\" or leave the attribute out, or write subfiling from Python"}
};
static const char *const H5FL_CHOICES_keep[] = {"released", "all"};
static const char *const H5FL_CHOICES_map_reads[] = {"auto", "true", "false"};
static const char *const H5FL_CHOICES_vol_stack[] = {"none", "async", "cache", "cache,async", "async,cache"};

static const h5fl_setting H5FL_SETTINGS[] = {
    {"queue_limit", "queue_limit", NULL, H5FL_INT, H5FL_PRODUCER, 0.0, 4.611686018427388e+18, NULL, 0, NULL,
     "accepted: an integer >= 0",
     NULL, 0, NULL, 0},
    {"queue_policy", "queue_policy", NULL, H5FL_CHOICE, H5FL_PRODUCER, -1e+308, 1e+308, H5FL_CHOICES_queue_policy, 2, NULL,
     "accepted: block, discard",
     NULL, 0, NULL, 0},
    {"group", "group", NULL, H5FL_PATTERN, H5FL_CONSUMER, -1e+308, 1e+308, NULL, 0, "^([A-Za-z0-9_-]+)$",
     "a consumer group name is letters, digits, '-' and '_' only",
     NULL, 0, NULL, 0},
    {"heartbeat", "heartbeat", NULL, H5FL_SECONDS, H5FL_BOTH, 0.05, 3600.0, NULL, 0, NULL,
     "accepted: a number of seconds from 0.05 to 3600",
     NULL, 0, NULL, 0},
    {"dead_consumer", "dead_consumer", NULL, H5FL_CHOICE, H5FL_PRODUCER, -1e+308, 1e+308, H5FL_CHOICES_dead_consumer, 3, NULL,
     "wait (the default): keep waiting for a consumer group that stopped beating, saying so (restarting it resumes); drop: go on without it (the producer fails at its end, naming the steps it never took); error: stop the stream; accepted: wait, drop, error",
     NULL, 0, NULL, 0},
    {"poll_min", "poll_min", NULL, H5FL_SECONDS, H5FL_BOTH, 1e-05, 60.0, NULL, 0, NULL,
     "accepted: a number of seconds from 1e-05 to 60",
     NULL, 0, NULL, 0},
    {"poll_max", "poll_max", NULL, H5FL_SECONDS, H5FL_BOTH, 1e-05, 60.0, NULL, 0, NULL,
     "accepted: a number of seconds from 1e-05 to 60",
     NULL, 0, NULL, 0},
    {"method", "method", NULL, H5FL_PATTERN, H5FL_BOTH, -1e+308, 1e+308, NULL, 0, "^([sS].*)$",
     "h5flow only streams (one staged file per step, read while the producer runs); SENSEI's default non-streaming method, read after the writer finished, is not offered; accepted: a value starting with 's': stream, s, sc (a second character 'c' asks for collective transfers)",
     NULL, 0, NULL, 0},
    {"collective", "collective", NULL, H5FL_BOOL, H5FL_PRODUCER, -1e+308, 1e+308, NULL, 0, NULL,
     "accepted: 0, 1, true, false",
     NULL, 0, NULL, 0},
    {"layout", "layout", NULL, H5FL_CHOICE, H5FL_PRODUCER, -1e+308, 1e+308, H5FL_CHOICES_layout, 3, NULL,
     "n-n (the default): one file per producer rank, n-1: one shared file per step, log: one logical file per step written through the h5flow_log connector; accepted: n-1, n-n, log",
     NULL, 0, H5FL_C_REFUSED_layout, 1},
    {"driver", "driver", NULL, H5FL_CHOICE, H5FL_PRODUCER, -1e+308, 1e+308, H5FL_CHOICES_driver, 2, NULL,
     "accepted: mpio, subfiling",
     NULL, 0, H5FL_C_REFUSED_driver, 1},
    {"quota_bytes", "quota", NULL, H5FL_BYTES, H5FL_PRODUCER, 0.0, 4.611686018427388e+18, NULL, 0, NULL,
     "accepted: a byte count, optionally with a unit: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 512MiB, 2GiB, 100MB; 0 = unlimited",
     NULL, 0, NULL, 0},
    {"keep", "keep", NULL, H5FL_CHOICE, H5FL_BOTH, -1e+308, 1e+308, H5FL_CHOICES_keep, 2, NULL,
     "accepted: released, all",
     NULL, 0, NULL, 0},
    {"raw_reads", "raw_reads", NULL, H5FL_BOOL, H5FL_CONSUMER, -1e+308, 1e+308, NULL, 0, NULL,
     "accepted: 0, 1, true, false",
     NULL, 0, NULL, 0},
    {"read_threads", "read_threads", NULL, H5FL_INT, H5FL_CONSUMER, 1.0, 4.611686018427388e+18, NULL, 0, NULL,
     "accepted: an integer >= 1",
     NULL, 0, NULL, 0},
    {"map_reads", "map_reads", NULL, H5FL_CHOICE, H5FL_CONSUMER, -1e+308, 1e+308, H5FL_CHOICES_map_reads, 3, NULL,
     "auto (the default): map where the stream lies on tmpfs or ramfs; true: map on any local file system; false: always copy; accepted: auto, true, false",
     NULL, 0, NULL, 0},
    {"async_write", "async_write", NULL, H5FL_BOOL, H5FL_PRODUCER, -1e+308, 1e+308, NULL, 0, NULL,
     "accepted: 0, 1, true, false",
     NULL, 0, NULL, 0},
    {"vol_stack", "vol_stack", NULL, H5FL_CHOICE, H5FL_PRODUCER, -1e+308, 1e+308, H5FL_CHOICES_vol_stack, 5, NULL,
     "none (the default): native HDF5; async: h5flow_async; cache: h5flow_cache; cache,async and async,cache: both, the first on top; accepted: none, async, cache, cache,async, async,cache",
     NULL, 0, NULL, 0},
    {"async_max_mem", "async_max_mem", NULL, H5FL_BYTES, H5FL_PRODUCER, 1048576.0, 4.611686018427388e+18, NULL, 0, NULL,
     "accepted: a byte count, optionally with a unit: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 512MiB, 2GiB, 100MB, at least 1MiB",
     NULL, 0, NULL, 0},
    {"cache_path", "cache_path", NULL, H5FL_PATTERN, H5FL_PRODUCER, -1e+308, 1e+308, NULL, 0, "^([^;{}=]*)$",
     "a directory path without ';', '{', '}' or '='",
     NULL, 0, NULL, 0},
    {"cache_capacity", "cache_capacity", NULL, H5FL_BYTES, H5FL_PRODUCER, 0.0, 4.611686018427388e+18, NULL, 0, NULL,
     "accepted: a byte count, optionally with a unit: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 512MiB, 2GiB, 100MB; 0 = h5flow_cache's default",
     NULL, 0, NULL, 0},
};
/* attributes read by hand in config.c besides the table's */
static const char *const H5FL_EXTRA_ATTRS[] = {"file_name"};

#endif
