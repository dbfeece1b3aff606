/* Name escaping: injective, never a layout name, never a path separator or a dot entry. */
#include "h5fl.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static void roundtrip(const char *name, const char *want)
{
    char esc[NAME_MAX + 1], back[NAME_MAX + 1];
    h5fl_err_clear();
    CHECK(h5fl_escape(name, esc, sizeof esc) == 0);
    if (want)
        CHECK(!strcmp(esc, want));
    CHECK(esc[0] != '@' && esc[0] != '.' && !strchr(esc, '/'));
    CHECK(strcmp(esc, ".") && strcmp(esc, ".."));
    CHECK(h5fl_unescape(esc, back, sizeof back) == 0);
    CHECK(!strcmp(back, name));
}

int main(void)
{
    roundtrip("data", "data");
    roundtrip("..", "%2E.");
    roundtrip(".", "%2E");
    roundtrip(".hidden", "%2Ehidden");
    roundtrip("a.b", "a.b");
    roundtrip("@group", "%40group");
    roundtrip("@attr.x", "%40attr.x");
    roundtrip("100%", "100%25");
    roundtrip("sp ace", "sp%20ace");
    roundtrip("back\\slash", "back%5Cslash");
    roundtrip("caf\xc3\xa9", "caf%C3%A9");
    roundtrip("\x01\x7f", "%01%7F");

    /* distinct names never collide */
    char e1[NAME_MAX + 1], e2[NAME_MAX + 1];
    h5fl_escape("%41", e1, sizeof e1);
    h5fl_escape("A", e2, sizeof e2);
    CHECK(strcmp(e1, e2) != 0);

    /* rejections: empty, too long */
    char esc[NAME_MAX + 1], back[NAME_MAX + 1];
    h5fl_err_clear();
    CHECK(h5fl_escape("", esc, sizeof esc) == -1);
    CHECK(strstr(h5fl_err_msg(), "empty") != NULL);
    char longname[400];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    h5fl_err_clear();
    CHECK(h5fl_escape(longname, esc, sizeof esc) == -1);
    CHECK(strstr(h5fl_err_msg(), "too long") != NULL);
    memset(longname, '/', 100); /* 100 slashes escape to 300 bytes: too long as well */
    longname[100] = '\0';
    h5fl_err_clear();
    CHECK(h5fl_escape(longname, esc, sizeof esc) == -1);

    /* the layout's own files and non-canonical escapes are not user names */
    CHECK(h5fl_unescape("@group", back, sizeof back) == -1);
    CHECK(h5fl_unescape("@log.1.0.idx", back, sizeof back) == -1);
    CHECK(h5fl_unescape(".", back, sizeof back) == -1);
    CHECK(h5fl_unescape("%41", back, sizeof back) == -1); /* 'A' is never escaped */
    CHECK(h5fl_unescape("%00", back, sizeof back) == -1);
    CHECK(h5fl_unescape("%4", back, sizeof back) == -1);
    CHECK(h5fl_unescape("", back, sizeof back) == -1);

    /* CRC32C check value */
    CHECK(h5fl_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(h5fl_crc32c_portable(0, "123456789", 9) == 0xE3069283u);
    { /* the fast path (hardware, 3 streams) equals the table code at every length, alignment and split */
        static uint8_t big[3 * 8192 * 2 + 100];
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof big; i++) {
            x = x * 1103515245u + 12345u;
            big[i] = (uint8_t)(x >> 16);
        }
        size_t lens[] = {0, 1, 7, 8, 9, 63, 4096, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 6 * 8192 + 17,
                         sizeof big - 8};
        for (size_t a = 0; a < 8; a++)
            for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
                uint32_t want = h5fl_crc32c_portable(0, big + a, lens[k]);
                CHECK(h5fl_crc32c(0, big + a, lens[k]) == want);
                size_t half = lens[k] / 3; /* incremental = one shot */
                CHECK(h5fl_crc32c(h5fl_crc32c(0, big + a, half), big + a + half, lens[k] - half) == want);
            }
    }

    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        printf("test_names: OK\n");
    return failures != 0;
}
