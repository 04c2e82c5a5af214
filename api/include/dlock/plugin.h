/*
 * plugin.h — the ABI between libdlock (the host) and a backend plugin (a shared object).
 *
 * A plugin exports one C symbol, dlock_plugin_negotiate. The host calls it with the newest ABI
 * version it understands; the plugin answers with a function table (dlock_plugin) of a version no
 * newer than that, or refuses and says which minimum version it needs. The table starts with
 * struct_size and version and is append-only: a field added in version N+1 goes after every field
 * of version N, so a host reads only what the plugin's version defines. The static asserts at the
 * end pin the layout of every released version.
 *
 * Every other struct with a struct_size (dlock_plugin_host, dlock_acquire_request, dlock_grant,
 * dlock_lock_info) is append-only too, and each released version has a size constant
 * (DLOCK_<STRUCT>_V1_SIZE). Its struct_size is the size the side that allocated it was built
 * with, which may be older or newer than the other side:
 *   - the host hands a plugin structs of at least the v1 size; a plugin reads a field appended
 *     after v1 only if struct_size covers it (DLOCK_STRUCT_COVERS), and takes the default of
 *     that field otherwise;
 *   - a plugin writes into an output struct (dlock_grant, dlock_lock_info) only the fields its
 *     struct_size covers; the host fills the rest with their defaults before the call.
 * Structs without struct_size (dlock_plugin_error, dlock_option_desc, dlock_option_value,
 * dlock_renewal) never change within a version of the table: a new layout is a new ABI version.
 *
 * Rules across the boundary:
 *   - only C types cross it: no C++ type, exception, allocator or thread-local state;
 *   - strings are UTF-8 and NUL-terminated, borrowed for the duration of the call;
 *   - errors: an entry returns a dlock_status (dlock.h) and, when not DLOCK_OK, writes a message
 *     into the caller's dlock_plugin_error, naming the backend, the endpoint and what to do;
 *   - time: every deadline and validity is CLOCK_MONOTONIC in nanoseconds;
 *   - nothing a plugin creates (backend, hold, thread) may outlive dlock_plugin.destroy: the host
 *     keeps the shared object loaded until the last backend made from it is destroyed.
 * The host validates names (1..1024 bytes of UTF-8, no NUL) and option types before calling a
 * plugin; the plugin maps names into its own keyspace so that distinct names never alias.
 */
#ifndef DLOCK_PLUGIN_H
#define DLOCK_PLUGIN_H

#include <dlock/dlock.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The newest plugin ABI version this header describes. */
#define DLOCK_PLUGIN_ABI_VERSION 2u

/* True if the struct at `ptr` (which starts with uint32_t struct_size) is long enough to hold
   `field` of `type`: a field appended after the version the other side was built with is read or
   written only then. */
#define DLOCK_STRUCT_COVERS(ptr, type, field)                                                      \
    ((ptr) != NULL && (size_t)(ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

/* The name of the one symbol a plugin exports. */
#define DLOCK_PLUGIN_NEGOTIATE_SYMBOL "dlock_plugin_negotiate"

/* A plugin's backend instance: one configured connection set / session, shared by a client's
   threads. Every entry taking one must be thread-safe unless noted. */
typedef struct dlock_backend dlock_backend;

/* A plugin's record of one successful acquisition (what release and renew need). */
typedef struct dlock_hold dlock_hold;

/* Where a plugin writes the reason for a non-OK status (truncated to fit, always NUL-terminated). */
typedef struct dlock_plugin_error {
    char message[1024];
} dlock_plugin_error;

/* ---- options --------------------------------------------------------------------------------- */

typedef enum dlock_option_type {
    DLOCK_OPTION_STRING = 0,
    DLOCK_OPTION_INT = 1,
    DLOCK_OPTION_BOOL = 2,
    DLOCK_OPTION_DURATION = 3, /* YAML "250ms", "30s", "5m", "1h"; handed over in milliseconds */
    DLOCK_OPTION_STRING_LIST = 4
} dlock_option_type;

#define DLOCK_OPTION_REQUIRED 1u /* config must set it (no default) */
#define DLOCK_OPTION_SECRET 2u   /* never printed (passwords) */

/* Which part of a DSN "scheme://user:password@host1,host2/path?k=v" fills an option. Query keys
   fill the options of the same name (or the defaults ttl/wait/renew/fair/reentrant). */
typedef enum dlock_dsn_part {
    DLOCK_DSN_NONE = 0,
    DLOCK_DSN_HOSTS = 1,    /* "host1,host2": a STRING gets it whole, a STRING_LIST one per host */
    DLOCK_DSN_USER = 2,
    DLOCK_DSN_PASSWORD = 3,
    DLOCK_DSN_PATH = 4,     /* a STRING gets it with its leading '/', other types without */
    DLOCK_DSN_URL = 5       /* the whole DSN less dlock's own query keys */
} dlock_dsn_part;

/* One option a backend accepts; `dlock backends --describe NAME` prints these. */
typedef struct dlock_option_desc {
    const char *name;          /* YAML key under `options:` */
    uint32_t type;             /* dlock_option_type */
    uint32_t flags;            /* DLOCK_OPTION_* bits */
    uint32_t dsn_part;         /* dlock_dsn_part */
    const char *default_value; /* in YAML syntax, NULL if none */
    const char *doc;           /* one or two sentences */
} dlock_option_desc;

/* A validated option value handed to create: one per described option, in description order. */
typedef struct dlock_option_value {
    const char *name;
    uint32_t type;                  /* dlock_option_type */
    int is_set;                     /* 0: not in the config and no default */
    const char *string_value;       /* STRING */
    int64_t int_value;              /* INT; BOOL as 0/1; DURATION in milliseconds */
    const char *const *list_values; /* STRING_LIST */
    size_t list_count;
} dlock_option_value;

/* ---- services the host offers a backend ------------------------------------------------------ */

typedef struct dlock_plugin_host {
    uint32_t struct_size;
    void *context;
    /* Logs for the user (level: 0 debug, 1 info, 2 warning, 3 error). Any thread. */
    void (*log)(void *context, int level, const char *message);
    /* Reports that a hold changed state by itself — the backend noticed its session expired, its
       key vanished, its connection dropped. `state` is a dlock_lease_state (HELD again, SUSPECT or
       LOST); `valid_until_ns` the new end of validity. `host_lease` is the cookie of the acquire
       request. Any thread, from the moment acquire registers the hold — even before acquire
       returns: a grant reported LOST (or one whose valid_until is already past) when acquire
       returns OK is given back through release and not handed out. May be called until
       hold_destroy returns for that hold; must not be called while the plugin holds a lock that
       its release or renew entries take. */
    void (*hold_state_changed)(void *context, void *host_lease, int state, int64_t valid_until_ns);
} dlock_plugin_host;

#define DLOCK_PLUGIN_HOST_V1_SIZE (offsetof(dlock_plugin_host, hold_state_changed) + sizeof(void (*)(void)))

/* ---- acquisition ----------------------------------------------------------------------------- */

typedef struct dlock_acquire_request {
    uint32_t struct_size;
    const char *name;    /* validated by the host */
    const char *owner;   /* 32 lowercase hex digits, fresh random for this acquisition */
    int64_t ttl_ms;      /* >= 1 */
    int64_t deadline_ns; /* 0: try once; INT64_MAX: no deadline; else CLOCK_MONOTONIC */
    int fair;            /* 1: FIFO if the backend can */
    void *host_lease;    /* cookie for dlock_plugin_host.hold_state_changed */
    /* -- version 2 (handed only to a table of version >= 2) -- */
    uint32_t kind;       /* dlock_hold_kind: EXCLUSIVE (the default), SHARED (only when the backend
                            reports DLOCK_CAP_SHARED) or PERMIT (only with DLOCK_CAP_SEMAPHORE) */
    uint32_t permits;    /* PERMIT: the semaphore's limit N >= 1; otherwise 0 */
} dlock_acquire_request;

#define DLOCK_ACQUIRE_REQUEST_V1_SIZE (offsetof(dlock_acquire_request, host_lease) + sizeof(void *))
#define DLOCK_ACQUIRE_REQUEST_V2_SIZE (offsetof(dlock_acquire_request, permits) + sizeof(uint32_t))

typedef struct dlock_grant {
    uint32_t struct_size;
    uint64_t fencing_token; /* 0 without DLOCK_CAP_FENCING */
    int64_t valid_until_ns; /* send time of the confirmed request + ttl - drift; INT64_MAX if the
                               hold never expires by itself */
    int64_t ttl_ms;         /* the ttl the backend granted (it may raise it to its minimum) */
} dlock_grant;

#define DLOCK_GRANT_V1_SIZE (offsetof(dlock_grant, ttl_ms) + sizeof(int64_t))

/* One lease in a batch renewal. */
typedef struct dlock_renewal {
    dlock_hold *hold;       /* in */
    int64_t ttl_ms;         /* in: extend to now + ttl */
    int status;             /* out: DLOCK_OK, DLOCK_LOST (definitely not ours any more), or
                               DLOCK_UNAVAILABLE / DLOCK_UNKNOWN / DLOCK_BACKEND (unconfirmed) */
    int64_t valid_until_ns; /* out, when status is DLOCK_OK */
} dlock_renewal;

/* ---- the function table ---------------------------------------------------------------------- */

typedef struct dlock_plugin {
    /* -- version 1 -- */
    uint32_t struct_size; /* sizeof the table as the plugin was built */
    uint32_t version;     /* the ABI version this table implements */
    const char *name;     /* the backend name: "file", "redis", ... */
    const char *description;
    const dlock_option_desc *options;
    size_t option_count;

    /* Creates a backend from validated options (one value per description, in order). Returns
       DLOCK_OK, DLOCK_CONFIG (a value is wrong: name it), DLOCK_UNAVAILABLE, DLOCK_BACKEND. */
    int (*create)(const dlock_option_value *options, size_t option_count, const dlock_plugin_host *host,
                  dlock_backend **out_backend, dlock_plugin_error *error);
    /* Destroys a backend. The host has destroyed its holds and no call is in progress. */
    void (*destroy)(dlock_backend *backend);
    /* DLOCK_CAP_* bits of this backend as configured; with NULL, those of a backend created with
       the default options (what `dlock backends` prints). */
    uint64_t (*capabilities)(dlock_backend *backend);
    /* Makes every acquire in progress on this backend, and every later one, return
       DLOCK_CANCELLED promptly. Called when the client closes. */
    void (*interrupt)(dlock_backend *backend);
    /* Acquires, blocking until request->deadline_ns. Returns DLOCK_OK with *out_hold and
       *out_grant written, or DLOCK_TIMEOUT, DLOCK_CANCELLED, DLOCK_UNAVAILABLE, DLOCK_BACKEND,
       DLOCK_UNKNOWN, DLOCK_INVALID_ARGUMENT. On any status but OK nothing is left behind. */
    int (*acquire)(dlock_backend *backend, const dlock_acquire_request *request, dlock_hold **out_hold,
                   dlock_grant *out_grant, dlock_plugin_error *error);
    /* Releases a hold, fenced by its owner token. Returns DLOCK_OK, DLOCK_LOST (it was no longer
       ours; nothing else touched) or DLOCK_UNKNOWN (may be retried). Does not free the hold. */
    int (*release)(dlock_backend *backend, dlock_hold *hold, dlock_plugin_error *error);
    /* Frees a hold (after release, or when the host gives up on it). No server call required. */
    void (*hold_destroy)(dlock_backend *backend, dlock_hold *hold);
    /* Renews a batch of holds, ideally in one round trip; writes each renewal's status. Returns
       DLOCK_OK when every status was written, else a status that applies to all of them. */
    int (*renew)(dlock_backend *backend, dlock_renewal *renewals, size_t count, dlock_plugin_error *error);
    /* Reads the state of a lock without taking it. May be NULL (DLOCK_NOT_SUPPORTED). */
    int (*inspect)(dlock_backend *backend, const char *name, dlock_lock_info *out_info,
                   dlock_plugin_error *error);

    /* -- version 2 --
       A version 2 table may report DLOCK_CAP_SEMAPHORE, DLOCK_CAP_SHARED, DLOCK_CAP_LIST and
       DLOCK_CAP_BREAK (the host ignores those bits in a version 1 table), reads
       dlock_acquire_request.kind and .permits, and acquires, renews and releases a permit or a
       shared hold through the version 1 entries like any other hold. Each entry below may be NULL
       (the host answers DLOCK_NOT_SUPPORTED); one that is set must be matched by its capability
       bit. Each fills dlock_holder_info completely (struct_size = sizeof on its side) and calls
       `visit` from the calling thread only, stopping when it returns non-zero. */

    /* Visits every current holder of the lock `name` (semaphore = 0: exclusive and shared holders)
       or of the semaphore `name` (semaphore = 1). Returns DLOCK_OK, DLOCK_UNAVAILABLE,
       DLOCK_BACKEND, DLOCK_PERMISSION. */
    int (*holders)(dlock_backend *backend, const char *name, int semaphore, dlock_holder_visitor visit,
                   void *user_data, dlock_plugin_error *error);
    /* Visits every holder of every lock and semaphore whose name starts with `prefix` (may be "").
       Returns as holders. Names the backend cannot map back to a dlock name are skipped. */
    int (*list)(dlock_backend *backend, const char *prefix, dlock_holder_visitor visit, void *user_data,
                dlock_plugin_error *error);
    /* Removes every holder of the lock or semaphore `name`, fenced: the next grant's fencing token
       is above every removed holder's. Writes the number removed. Returns DLOCK_OK,
       DLOCK_PERMISSION, DLOCK_UNAVAILABLE, DLOCK_UNKNOWN, DLOCK_BACKEND. */
    int (*break_lock)(dlock_backend *backend, const char *name, int semaphore, size_t *out_broken,
                      dlock_plugin_error *error);
} dlock_plugin;

/* The table size each ABI version requires: a table of version N is accepted if its struct_size
   is at least DLOCK_PLUGIN_V<N>_SIZE (a plugin built against a newer header is longer). */
#define DLOCK_PLUGIN_V1_SIZE (offsetof(dlock_plugin, inspect) + sizeof(void (*)(void)))
#define DLOCK_PLUGIN_V2_SIZE (offsetof(dlock_plugin, break_lock) + sizeof(void (*)(void)))

/* The exported negotiation entry point, implemented by each plugin:
 *   host_max_version: the newest ABI version the host understands (>= 1).
 * On success returns DLOCK_OK and sets *out_plugin to a table of version <= host_max_version, with
 * static storage duration. If the plugin cannot serve any version <= host_max_version it returns
 * DLOCK_NOT_SUPPORTED and sets *out_min_version to the oldest version it could serve. */
typedef int (*dlock_plugin_negotiate_fn)(uint32_t host_max_version, const dlock_plugin **out_plugin,
                                        uint32_t *out_min_version);

#if defined(__GNUC__)
#define DLOCK_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define DLOCK_PLUGIN_EXPORT
#endif

/* Plugins define this function with DLOCK_PLUGIN_EXPORT. */
DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin **out_plugin,
                                               uint32_t *out_min_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Released layouts (LP64), field by field (DLOCK_STATIC_ASSERT is defined in dlock.h). A change
   that fails one of these breaks every built plugin: append instead, under a new version. */
#if defined(__LP64__) && defined(DLOCK_STATIC_ASSERT)
/* dlock_plugin, version 1 */
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, struct_size) == 0, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, version) == 4, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, name) == 8, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, description) == 16, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, options) == 24, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, option_count) == 32, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, create) == 40, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, destroy) == 48, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, capabilities) == 56, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, interrupt) == 64, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, acquire) == 72, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, release) == 80, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, hold_destroy) == 88, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, renew) == 96, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, inspect) == 104, "plugin ABI v1 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_PLUGIN_V1_SIZE == 112, "plugin ABI v1 layout changed");
/* dlock_plugin, version 2 */
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, holders) == 112, "plugin ABI v2 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, list) == 120, "plugin ABI v2 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin, break_lock) == 128, "plugin ABI v2 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_PLUGIN_V2_SIZE == 136, "plugin ABI v2 layout changed");
/* dlock_plugin_host, version 1 */
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin_host, struct_size) == 0, "host services v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin_host, context) == 8, "host services v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin_host, log) == 16, "host services v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_plugin_host, hold_state_changed) == 24, "host services v1 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_PLUGIN_HOST_V1_SIZE == 32, "host services v1 layout changed");
/* dlock_acquire_request, version 1 */
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, struct_size) == 0, "acquire request v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, name) == 8, "acquire request v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, owner) == 16, "acquire request v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, ttl_ms) == 24, "acquire request v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, deadline_ns) == 32, "acquire request v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, fair) == 40, "acquire request v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, host_lease) == 48, "acquire request v1 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_ACQUIRE_REQUEST_V1_SIZE == 56, "acquire request v1 layout changed");
/* dlock_acquire_request, version 2 */
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, kind) == 56, "acquire request v2 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_request, permits) == 60, "acquire request v2 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_ACQUIRE_REQUEST_V2_SIZE == 64, "acquire request v2 layout changed");
/* dlock_grant, version 1 */
DLOCK_STATIC_ASSERT(offsetof(dlock_grant, struct_size) == 0, "grant v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_grant, fencing_token) == 8, "grant v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_grant, valid_until_ns) == 16, "grant v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_grant, ttl_ms) == 24, "grant v1 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_GRANT_V1_SIZE == 32, "grant v1 layout changed");
/* Fixed within a table version (no struct_size). */
DLOCK_STATIC_ASSERT(sizeof(dlock_plugin_error) == 1024, "plugin error layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_renewal, hold) == 0, "renewal layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_renewal, ttl_ms) == 8, "renewal layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_renewal, status) == 16, "renewal layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_renewal, valid_until_ns) == 24, "renewal layout changed");
DLOCK_STATIC_ASSERT(sizeof(dlock_renewal) == 32, "renewal layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_desc, name) == 0, "option description layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_desc, type) == 8, "option description layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_desc, flags) == 12, "option description layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_desc, dsn_part) == 16, "option description layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_desc, default_value) == 24, "option description layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_desc, doc) == 32, "option description layout changed");
DLOCK_STATIC_ASSERT(sizeof(dlock_option_desc) == 40, "option description layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_value, name) == 0, "option value layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_value, type) == 8, "option value layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_value, is_set) == 12, "option value layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_value, string_value) == 16, "option value layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_value, int_value) == 24, "option value layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_value, list_values) == 32, "option value layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_option_value, list_count) == 40, "option value layout changed");
DLOCK_STATIC_ASSERT(sizeof(dlock_option_value) == 48, "option value layout changed");
#endif

#endif /* DLOCK_PLUGIN_H */
