/*
 * dlock_admin.h — the administrative part of dlock's C ABI: which backends a config can reach,
 * what each one offers and which options it takes, and the parsing of durations as configs write
 * them. It is what the `dlock` command uses beyond dlock.h, so a tool of one's own can do the same.
 *
 * The conventions of dlock.h hold: functions return dlock_status, dlock_last_error() describes a
 * non-OK one, out-parameters are written only on DLOCK_OK, *_destroy accepts NULL, nothing throws.
 *
 * This header compiles as C99 and as C++.
 */
#ifndef DLOCK_DLOCK_ADMIN_H
#define DLOCK_DLOCK_ADMIN_H

#include <dlock/dlock.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- backends ------------------------------------------------------------------------------- */

/* One option a backend takes in the config's `options:` (or a DSN). Owned by the catalog. */
typedef struct dlock_backend_option {
    const char *name;
    const char *type;           /* "string", "int", "bool", "duration" or "list" */
    int required;               /* 1 if the config must set it */
    int secret;                 /* 1 if it holds a secret (also settable as `<name>_file: PATH`) */
    const char *default_value;  /* as a config would write it; NULL when there is none */
    const char *doc;            /* one line; "" when the backend gives none */
} dlock_backend_option;

/* A backend found: built into libdlock or a plugin file. Owned by the catalog; read-only.
 * The library may append fields: read `struct_size` (the library's sizeof) before a field added
 * after the one you know. */
typedef struct dlock_backend_info {
    uint32_t struct_size;
    const char *name;                     /* as `backend:` names it ("file", "redis", ...) */
    const char *path;                     /* the plugin file, or "built-in" */
    uint32_t abi_version;                 /* the plugin ABI version negotiated with it */
    uint64_t capabilities;                /* DLOCK_CAP_* bits of its default configuration */
    const char *description;              /* one paragraph; "" when the backend gives none */
    size_t option_count;
    const dlock_backend_option *options;  /* option_count entries, in the backend's order */
} dlock_backend_info;

/* The backends available to a client opened with a given config. */
typedef struct dlock_backend_catalog dlock_backend_catalog;

/* Finds every backend a client opened with `config` could use: the built-in ones, then each plugin
 * file on the search path (the config's `plugin_path`, $DLOCK_PLUGIN_PATH, then the plugin
 * directory next to libdlock; the first file of each name wins). Loads each plugin to describe it;
 * a file that cannot be loaded is listed among the failures, not an error of this call.
 * `config` follows the rule of dlock_client_open (NULL or "": $DLOCK_CONFIG, else none; a DSN; a
 * YAML file path); only its `plugin_path` is used, and no backend is created or contacted.
 * Returns DLOCK_OK with a catalog in *out_catalog (free it with dlock_backend_catalog_destroy),
 * DLOCK_CONFIG (the config does not parse), DLOCK_INVALID_ARGUMENT or DLOCK_INTERNAL. */
DLOCK_API int dlock_backend_catalog_open(const char *config, dlock_backend_catalog **out_catalog);

/* The number of backends found. */
DLOCK_API size_t dlock_backend_catalog_count(const dlock_backend_catalog *catalog);

/* The backend at `index` (0 .. count-1, built-ins first, then plugins in search order and by file
   name); NULL when out of range. */
DLOCK_API const dlock_backend_info *dlock_backend_catalog_get(const dlock_backend_catalog *catalog, size_t index);

/* The backend called `name`; NULL when the catalog has none of that name. */
DLOCK_API const dlock_backend_info *dlock_backend_catalog_find(const dlock_backend_catalog *catalog,
                                                              const char *name);

/* The plugin files that were found but could not be loaded, each as "path: reason". */
DLOCK_API size_t dlock_backend_catalog_failure_count(const dlock_backend_catalog *catalog);
/* The failure at `index`; NULL when out of range. */
DLOCK_API const char *dlock_backend_catalog_failure(const dlock_backend_catalog *catalog, size_t index);

/* Frees the catalog and everything it owns; a plugin stays loaded while a client uses it. Accepts
   NULL. */
DLOCK_API void dlock_backend_catalog_destroy(dlock_backend_catalog *catalog);

/* ---- durations ------------------------------------------------------------------------------ */

/* Parses a duration as a config writes it: digits and a unit ("250ms", "30s", "5m", "1h"), or "0";
 * with `allow_forever`, also "forever" (written as DLOCK_WAIT_FOREVER). `what` names the value in
 * the error message (e.g. "--wait"; NULL: "duration"). Returns DLOCK_OK with milliseconds in
 * *out_ms, or DLOCK_INVALID_ARGUMENT (the message says what is wrong and gives examples). */
DLOCK_API int dlock_duration_parse(const char *text, int allow_forever, const char *what, int64_t *out_ms);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLOCK_DLOCK_ADMIN_H */
