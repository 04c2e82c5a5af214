/* Compiles dlock_admin.h as C99 (-std=c99 -pedantic -Werror) and calls it from C: the backend
 * catalog lists the built-in `file` backend with its options, and durations parse. Exits non-zero
 * on the first failure. */
#include <dlock/dlock_admin.h>

#include <stdio.h>
#include <string.h>

#include "c_check.h"

int main(void) {
    dlock_backend_catalog *catalog = NULL;
    const dlock_backend_info *file;
    int64_t ms = 0;

    /* "" follows dlock_client_open: $DLOCK_CONFIG (set empty for this test), else no config. */
    CHECK(dlock_backend_catalog_open("", &catalog) == DLOCK_OK);
    if (!catalog) return 1;
    CHECK(dlock_backend_catalog_count(catalog) >= 1);
    file = dlock_backend_catalog_find(catalog, "file");
    CHECK(file != NULL);
    if (file) {
        CHECK(file == dlock_backend_catalog_get(catalog, 0));
        CHECK(file->struct_size >= sizeof *file);
        CHECK(strcmp(file->path, "built-in") == 0);
        CHECK(file->option_count >= 1 && strcmp(file->options[0].name, "directory") == 0);
        CHECK((file->capabilities & DLOCK_CAP_FENCING) != 0);
    }
    dlock_backend_catalog_destroy(catalog);

    CHECK(dlock_duration_parse("30s", 0, "ttl", &ms) == DLOCK_OK && ms == 30000);
    CHECK(dlock_duration_parse("30", 0, "ttl", &ms) == DLOCK_INVALID_ARGUMENT && ms == 30000);
    CHECK(strstr(dlock_last_error(), "ttl: `30` has no unit") != NULL);
    return failures == 0 ? 0 : 1;
}
