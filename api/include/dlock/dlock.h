/*
 * dlock.h — the stable C ABI of dlock: clients, leases, acquire options, inspection and errors.
 *
 * A client is one configured backend (file, redis, redlock, zookeeper, etcd, sql) chosen by a YAML
 * config or a DSN at run time. acquire() returns a lease: proof that this process holds the named
 * lock until it is released or lost. Every backend honours the same contract:
 *   - never reports success without the lock; a failed or timed-out acquire leaves nothing behind;
 *   - release is owner-only and idempotent, fenced by the lease's random owner token;
 *   - a lease's state moves HELD -> SUSPECT -> LOST (or RELEASED); the lost callback fires once;
 *   - every duration is measured on CLOCK_MONOTONIC, never on the wall clock.
 *
 * Conventions of this header:
 *   - Functions return dlock_status (0 = DLOCK_OK). DLOCK_TIMEOUT ("not acquired in time") is an
 *     ordinary outcome, not a failure. On any other non-OK status, dlock_last_error() describes it.
 *   - Out-parameters are written only on DLOCK_OK.
 *   - Strings are UTF-8 and NUL-terminated. Strings passed in are borrowed for the call; strings
 *     returned are owned by the object they came from and live as long as it does.
 *   - Structs crossing the ABI start with struct_size and have an _INIT macro; fields are only ever
 *     appended. Each released version has a size constant (DLOCK_<STRUCT>_V1_SIZE, ...); the
 *     library accepts any struct_size from the oldest version's on, reads only the input fields a
 *     caller's struct_size covers (the rest take their defaults), and writes only the output bytes
 *     it covers. The layout of every released version is pinned by the static asserts at the end.
 *   - *_destroy / *_close accept NULL. No function lets a C++ exception escape.
 *   - Clients are thread-safe. A lease may be used from any thread, but not from two at once.
 *
 * This header compiles as C99 and as C++.
 */
#ifndef DLOCK_DLOCK_H
#define DLOCK_DLOCK_H

#include <stddef.h>
#include <stdint.h>

/* libdlock is built with hidden visibility; only what this header declares is exported. */
#if defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions ------------------------------------------------------------------------------- */

/* DLOCK_VERSION_MAJOR, _MINOR, _PATCH and DLOCK_VERSION_STRING of these headers, generated from
   the build's project version. */
#include <dlock/version.h>

/* The library's version as "MAJOR.MINOR.PATCH" (static storage): DLOCK_VERSION_STRING of the
   headers libdlock was built with, which may be newer than the caller's. */
DLOCK_API const char *dlock_version(void);

/* ---- status codes --------------------------------------------------------------------------- */

typedef enum dlock_status {
    DLOCK_OK = 0,
    /* The lock was not acquired within the wait: an ordinary outcome. */
    DLOCK_TIMEOUT = 1,
    /* A name, option or argument is malformed; the message names which and why. */
    DLOCK_INVALID_ARGUMENT = 2,
    /* The configuration (YAML, DSN, backend options) is invalid; the message gives where. */
    DLOCK_CONFIG = 3,
    /* The backend plugin could not be found, loaded or negotiated with, or misbehaved. */
    DLOCK_PLUGIN = 4,
    /* The backend does not offer this operation or capability. */
    DLOCK_NOT_SUPPORTED = 5,
    /* The backend could not be reached (connection refused, timed out, no quorum). */
    DLOCK_UNAVAILABLE = 6,
    /* The backend answered with an error (read-only replica, out of memory, wrong type of key...).
       Never reported as "held". A refusal for lack of permission is DLOCK_PERMISSION. */
    DLOCK_BACKEND = 7,
    /* A transport failure left the outcome unknown. For release: safe to retry. */
    DLOCK_UNKNOWN = 8,
    /* The lease was lost (expired, or taken by another holder). For release: ALREADY_LOST —
       nothing belonging to another holder was touched. */
    DLOCK_LOST = 9,
    /* The client was closed while the call waited, or the acquire's cancel token was cancelled. */
    DLOCK_CANCELLED = 10,
    /* Out of memory, or another failure inside dlock itself. */
    DLOCK_INTERNAL = 11,
    /* The server refused the operation to this identity (etcd PermissionDenied, PostgreSQL 42501,
       Redis NOPERM, ZooKeeper NOAUTH): the lock or its prefix belongs to another role or tenant, or
       the identity lacks a privilege dlock needs. Never reported as "held". Appended after
       DLOCK_INTERNAL; a caller built before it sees an unknown status (not DLOCK_BACKEND). */
    DLOCK_PERMISSION = 12
} dlock_status;

/* A short constant name for a status ("DLOCK_TIMEOUT"); "DLOCK_<unknown>" for other values. */
DLOCK_API const char *dlock_status_name(int status);

/* The detail of the last non-OK status returned to this thread: names the backend, the endpoint,
   and what to do. Owned by the library, valid until the next dlock call on this thread. Never NULL
   (an empty string when there was no error). */
DLOCK_API const char *dlock_last_error(void);

/* ---- capabilities --------------------------------------------------------------------------- */

/* Bits of dlock_client_capabilities(). */
#define DLOCK_CAP_FENCING ((uint64_t)1 << 0)       /* leases carry a strictly increasing fencing token */
#define DLOCK_CAP_FAIR ((uint64_t)1 << 1)          /* waiters are served first come, first served */
#define DLOCK_CAP_PUSH_WAIT ((uint64_t)1 << 2)     /* waiters are woken by the backend, never poll */
#define DLOCK_CAP_TTL ((uint64_t)1 << 3)           /* leases expire after their ttl unless renewed */
#define DLOCK_CAP_SESSION_BOUND ((uint64_t)1 << 4) /* locks are released when the holder dies */
#define DLOCK_CAP_QUORUM ((uint64_t)1 << 5)        /* survives the loss of a minority of servers */
#define DLOCK_CAP_REENTRANT ((uint64_t)1 << 6)     /* acquire with reentrant=1 counts holds per name */
#define DLOCK_CAP_SEMAPHORE ((uint64_t)1 << 7)     /* acquire with permits=N takes one of N permits */
#define DLOCK_CAP_SHARED ((uint64_t)1 << 8)        /* acquire with shared=1 holds a lock shared */
#define DLOCK_CAP_LIST ((uint64_t)1 << 9)          /* dlock_list enumerates the held locks */
#define DLOCK_CAP_BREAK ((uint64_t)1 << 10)        /* dlock_break force-releases a lock, fenced */

/* ---- clients -------------------------------------------------------------------------------- */

typedef struct dlock_client dlock_client;

/* Opens a client from a config path or a DSN.
 *
 * `config` is one of:
 *   - NULL or "": the file named by $DLOCK_CONFIG if set, else the embedded default (the `file`
 *     backend in $XDG_RUNTIME_DIR/dlock, or /tmp/dlock-<uid> without it);
 *   - a DSN, recognised by "<scheme>://" (e.g. "redis://:pw@127.0.0.1:6379/0?ttl=30s");
 *   - otherwise the path of a YAML config file.
 * Loads the backend plugin and creates the backend; does not wait for servers to answer unless the
 * backend connects eagerly. Returns DLOCK_OK, DLOCK_CONFIG, DLOCK_PLUGIN, DLOCK_UNAVAILABLE,
 * DLOCK_BACKEND, DLOCK_PERMISSION or DLOCK_INTERNAL. */
DLOCK_API int dlock_client_open(const char *config, dlock_client **out_client);

/* Opens a client from YAML text. `origin` names the text in error messages (may be NULL). */
DLOCK_API int dlock_client_open_yaml(const char *yaml_text, const char *origin, dlock_client **out_client);

/* Closes a client: acquires waiting in other threads return DLOCK_CANCELLED, an inspect, holders,
 * list or break running in another thread is let finish (close waits for it; one begun after the
 * close returns DLOCK_CANCELLED), every lease still
 * held is released (its state becomes RELEASED, or LOST if the backend had lost it), the lease
 * keeper stops and the backend is destroyed. Lease handles stay valid until destroyed. Must not be
 * called from a lost callback. Accepts NULL. */
DLOCK_API void dlock_client_close(dlock_client *client);

/* The backend's name ("file", "redis", ...). */
DLOCK_API const char *dlock_client_backend(const dlock_client *client);

/* The backend's DLOCK_CAP_* bits, as configured (a redlock client has QUORUM, a file one does not). */
DLOCK_API uint64_t dlock_client_capabilities(const dlock_client *client);

/* ---- acquire -------------------------------------------------------------------------------- */

/* Sentinels for durations in dlock_acquire_options. */
#define DLOCK_DEFAULT (-1)                 /* take the value from the lock's policy or the config defaults */
#define DLOCK_WAIT_FOREVER INT64_MAX       /* wait_ms: wait until acquired or the client closes */

typedef struct dlock_lease dlock_lease;

/* Called once when a lease becomes LOST, from the client's callback thread (or, when registered on
   a lease already lost, from the registering thread). The callback thread is not the one that
   renews leases: a callback may block (re-acquire with a wait, say) without any lease of the
   client missing a renewal, though the client's later callbacks wait for it. Must not destroy the
   lease or close the client; may call any other dlock function. */
typedef void (*dlock_lost_callback)(dlock_lease *lease, void *user_data);

/* ---- cancellation --------------------------------------------------------------------------- */

/* A cancel handle for waits, given to acquire in dlock_acquire_options.cancel (version 2 of that
 * struct). Cancelling it makes every acquire waiting with it return DLOCK_CANCELLED, and every
 * later acquire given it return DLOCK_CANCELLED at once; other waits, on the same client or not,
 * go on. A token stays cancelled.
 * Thread-safe: cancel from any thread, a watchdog or a lost callback included. */
typedef struct dlock_cancel_token dlock_cancel_token;

/* Creates a token, not cancelled. Returns DLOCK_OK, DLOCK_INVALID_ARGUMENT or DLOCK_INTERNAL. */
DLOCK_API int dlock_cancel_token_create(dlock_cancel_token **out_token);

/* Cancels the token (idempotent). Accepts NULL. */
DLOCK_API void dlock_cancel_token_cancel(dlock_cancel_token *token);

/* 1 once the token is cancelled, else 0 (also for NULL). */
DLOCK_API int dlock_cancel_token_is_cancelled(const dlock_cancel_token *token);

/* Frees the token. No acquire may be using it any more. Accepts NULL. */
DLOCK_API void dlock_cancel_token_destroy(dlock_cancel_token *token);

typedef struct dlock_acquire_options {
    uint32_t struct_size;  /* sizeof(dlock_acquire_options) of the caller's header */
    int64_t wait_ms;       /* 0 = try once; N = give up after N ms; DLOCK_WAIT_FOREVER; DLOCK_DEFAULT */
    int64_t ttl_ms;        /* lease length, >= 1; DLOCK_DEFAULT */
    int renew;             /* 1 = the keeper renews the lease until release; 0 = no; DLOCK_DEFAULT */
    int fair;              /* 1 = FIFO among waiters where the backend can; 0 = no; DLOCK_DEFAULT */
    int reentrant;         /* 1 = a name this client already holds reentrantly is held again (hold
                              count); 0 = a second acquire contends like any other; DLOCK_DEFAULT */
    dlock_lost_callback on_lost; /* may be NULL */
    void *on_lost_user_data;
    /* -- version 2 -- */
    dlock_cancel_token *cancel;  /* NULL, or a token whose cancel ends this wait with DLOCK_CANCELLED */
    /* -- version 3 -- */
    uint32_t permits;      /* 0 = `name` is a lock; N >= 1 = take one of the N permits of the
                              semaphore `name` (needs DLOCK_CAP_SEMAPHORE). A semaphore and a lock
                              of the same name are different objects. Every client of one
                              semaphore must give the same N: where the backend stores the limit,
                              a different N is refused with DLOCK_INVALID_ARGUMENT naming both. */
    int shared;            /* 0 = hold the lock exclusively; 1 = hold it shared: any number of
                              shared holders at once, or one exclusive holder (needs
                              DLOCK_CAP_SHARED); DLOCK_DEFAULT = 0. Not with permits != 0. */
} dlock_acquire_options;

#define DLOCK_ACQUIRE_OPTIONS_INIT                                                                 \
    { sizeof(dlock_acquire_options), DLOCK_DEFAULT, DLOCK_DEFAULT, DLOCK_DEFAULT, DLOCK_DEFAULT,   \
      DLOCK_DEFAULT, NULL, NULL, NULL, 0, 0 }

/* The size of dlock_acquire_options in each version: version 1 up to on_lost_user_data. Any
   struct_size is accepted: fields it does not cover take their defaults (cancel: NULL). */
#define DLOCK_ACQUIRE_OPTIONS_V1_SIZE (offsetof(dlock_acquire_options, on_lost_user_data) + sizeof(void *))
/* Version 2 (up to cancel). */
#define DLOCK_ACQUIRE_OPTIONS_V2_SIZE (offsetof(dlock_acquire_options, cancel) + sizeof(void *))
/* Version 3 (up to shared; permits 0 and shared 0 when not covered). */
#define DLOCK_ACQUIRE_OPTIONS_V3_SIZE (offsetof(dlock_acquire_options, shared) + sizeof(int))

/* Acquires the lock `name` (1..1024 bytes of valid UTF-8, no NUL; every other byte sequence is a
 * distinct name, `/` and `..` included). `options` may be NULL (all defaults).
 * Blocks until acquired, the wait runs out (DLOCK_TIMEOUT), or the client closes or options->cancel
 * is cancelled (DLOCK_CANCELLED).
 * A wait with a cancel token is run as a series of waits of at most 250 ms each, the token checked
 * between them, so it ends within 250 ms of the cancel plus one attempt. The price, on that wait
 * only: one acquire attempt per 250 ms while it waits, and on a FAIR backend its place in the queue
 * is taken anew at each slice (a cancellable waiter is served in order only within a slice). A
 * grant that arrives after the cancel is given back, and DLOCK_CANCELLED returned.
 * Returns DLOCK_OK with a new lease in *out_lease (destroy it with dlock_lease_destroy), or
 * DLOCK_TIMEOUT, DLOCK_INVALID_ARGUMENT, DLOCK_UNAVAILABLE, DLOCK_BACKEND, DLOCK_UNKNOWN,
 * DLOCK_CANCELLED, DLOCK_PERMISSION, DLOCK_PLUGIN or DLOCK_INTERNAL. On any status but OK nothing
 * is left behind.
 * A grant that is no lock any more when the backend's answer arrives — its validity already over
 * (the reply took longer than the ttl), or reported LOST before acquire returned — is given back
 * and retried while the wait allows, then answered DLOCK_TIMEOUT; the same holds for a reentrant
 * acquire of a hold whose validity ran out. */
DLOCK_API int dlock_acquire(dlock_client *client, const char *name, const dlock_acquire_options *options,
                            dlock_lease **out_lease);

/* ---- leases --------------------------------------------------------------------------------- */

typedef enum dlock_lease_state {
    DLOCK_LEASE_HELD = 0,     /* confirmed held until valid_until */
    DLOCK_LEASE_SUSPECT = 1,  /* renewal is failing; may still be held until valid_until */
    DLOCK_LEASE_LOST = 2,     /* no longer held: expired, taken, or the session ended */
    DLOCK_LEASE_RELEASED = 3  /* released by this process */
} dlock_lease_state;

/* The lock's name. */
DLOCK_API const char *dlock_lease_name(const dlock_lease *lease);

/* The owner token: 128 random bits fresh for this acquisition, as 32 lowercase hex digits. */
DLOCK_API const char *dlock_lease_owner(const dlock_lease *lease);

/* The fencing token, strictly increasing per name across all holders; 0 when the backend has no
   DLOCK_CAP_FENCING. Pass it to the resources the lock protects so they can refuse stale writers. */
DLOCK_API uint64_t dlock_lease_fencing_token(const dlock_lease *lease);

/* The end of validity on CLOCK_MONOTONIC, in nanoseconds (clock_gettime(CLOCK_MONOTONIC)): the
   send time of the last confirmed acquire or renew + ttl - drift. INT64_MAX for leases that never
   expire on their own (session-bound backends such as `file`). */
DLOCK_API int64_t dlock_lease_valid_until(const dlock_lease *lease);

/* The current state. Moves to LOST by itself (keeper, backend notice, or valid_until passing). */
DLOCK_API dlock_lease_state dlock_lease_state_get(const dlock_lease *lease);

/* Registers the callback fired once when the lease becomes LOST (replacing the one given to
   acquire). If the lease is already LOST and its callback has not fired, calls it before returning.
   If the previous callback of this lease is running, waits for it to return first (unless called
   from that callback), so its user_data may be freed once this returns. Returns DLOCK_OK. */
DLOCK_API int dlock_lease_on_lost(dlock_lease *lease, dlock_lost_callback callback, void *user_data);

/* Extends the lease by its ttl now, whatever the keeper does. Returns DLOCK_OK (valid_until moved),
   DLOCK_LOST (also, without asking the backend, once valid_until has passed: a lease whose validity
   ended is never brought back), DLOCK_UNAVAILABLE/DLOCK_UNKNOWN (could not confirm: the lease is SUSPECT),
   DLOCK_CANCELLED (client closed) or DLOCK_INVALID_ARGUMENT (released). For backends without
   DLOCK_CAP_TTL this confirms the lease is still held. */
DLOCK_API int dlock_lease_renew(dlock_lease *lease);

/* Releases the lock. Owner-only and idempotent. Returns
 *   DLOCK_OK      released (or already released by an earlier call);
 *   DLOCK_LOST    ALREADY_LOST: it had expired or been taken; nothing of the new holder's was touched.
 *                 Decided by validity: a release made once valid_until has passed answers this even
 *                 if the backend still had the lock (another client may have held it meanwhile);
 *   DLOCK_UNKNOWN the backend could not be reached: the lease is still owned and the call is safe
 *                 to retry (it becomes LOST at valid_until if never confirmed). A retry of a release
 *                 whose first attempt was sent while the lease was valid answers DLOCK_OK when the
 *                 lock is found no longer ours (unless it finds proof that the first attempt did not
 *                 run: our own expired hold still there, or a break's tombstone): that attempt may
 *                 be what removed it. */
DLOCK_API int dlock_lease_release(dlock_lease *lease);

/* Frees the lease handle, releasing the lock first if still held (best effort). Accepts NULL. */
DLOCK_API void dlock_lease_destroy(dlock_lease *lease);

/* ---- inspection ----------------------------------------------------------------------------- */

typedef struct dlock_lock_info {
    uint32_t struct_size;         /* sizeof(dlock_lock_info) of the caller's header */
    int held;                     /* 1 if some process holds the lock now */
    char holder[64];              /* the holder's owner token (hex) if known and held, else "" */
    uint64_t fencing_token;       /* the last fencing token issued for the name; 0 if none/unknown */
    int64_t ttl_left_ms;          /* time until the holder's lease expires; -1 if no ttl or unknown */
} dlock_lock_info;

#define DLOCK_LOCK_INFO_INIT { sizeof(dlock_lock_info), 0, { 0 }, 0, -1 }

/* The size of dlock_lock_info in version 1 (up to ttl_left_ms): the smallest struct_size
   dlock_inspect accepts. */
#define DLOCK_LOCK_INFO_V1_SIZE (offsetof(dlock_lock_info, ttl_left_ms) + sizeof(int64_t))

/* Reads who holds `name` now without taking it. Writes only the first out_info->struct_size bytes
   of *out_info (struct_size itself is left as it is): a caller built against an older, shorter
   dlock_lock_info gets the fields it knows and nothing beyond. Returns DLOCK_OK,
   DLOCK_INVALID_ARGUMENT (also when out_info->struct_size < DLOCK_LOCK_INFO_V1_SIZE),
   DLOCK_NOT_SUPPORTED, DLOCK_UNAVAILABLE, DLOCK_BACKEND or DLOCK_PERMISSION. */
DLOCK_API int dlock_inspect(dlock_client *client, const char *name, dlock_lock_info *out_info);

/* How a holder holds what it holds. */
typedef enum dlock_hold_kind {
    DLOCK_HOLD_EXCLUSIVE = 0, /* a lock, held exclusively */
    DLOCK_HOLD_SHARED = 1,    /* a lock, held shared */
    DLOCK_HOLD_PERMIT = 2     /* one permit of a semaphore */
} dlock_hold_kind;

/* One current holder, as dlock_holders and dlock_list report it. Appended to like every struct
   with a struct_size; a visitor reads only the fields struct_size covers. */
typedef struct dlock_holder_info {
    uint32_t struct_size;    /* sizeof(dlock_holder_info) of the side that filled it */
    const char *name;        /* the lock's or semaphore's name; valid during the visit only */
    uint32_t kind;           /* dlock_hold_kind */
    uint32_t permits;        /* PERMIT: the semaphore's limit as the backend stores it (0 unknown) */
    char holder[64];         /* the holder's owner token (hex) if known, else "" */
    uint64_t fencing_token;  /* this holder's fencing token; 0 if none/unknown */
    int64_t ttl_left_ms;     /* time until this holder's lease expires; -1 if no ttl or unknown */
} dlock_holder_info;

#define DLOCK_HOLDER_INFO_V1_SIZE (offsetof(dlock_holder_info, ttl_left_ms) + sizeof(int64_t))

/* Called once per holder. Return 0 to go on, anything else to stop the enumeration (the call that
   enumerates then returns DLOCK_OK). Must not call into the same client. */
typedef int (*dlock_holder_visitor)(const dlock_holder_info *info, void *user_data);

/* Reports every current holder of the lock `name` (exclusive or shared holders), or with
   semaphore = 1 every permit holder of the semaphore `name`; none when it is free. Returns
   DLOCK_OK, DLOCK_INVALID_ARGUMENT, DLOCK_NOT_SUPPORTED, DLOCK_UNAVAILABLE, DLOCK_BACKEND or
   DLOCK_PERMISSION. */
DLOCK_API int dlock_holders(dlock_client *client, const char *name, int semaphore, dlock_holder_visitor visit,
                            void *user_data);

/* ---- administration ------------------------------------------------------------------------- */

/* Reports every holder of every lock and semaphore whose name starts with `prefix` ("" or NULL:
   all of this client's keyspace), in no particular order; needs DLOCK_CAP_LIST. A snapshot read
   once: holders that come and go during the call may or may not appear. Returns as dlock_holders. */
DLOCK_API int dlock_list(dlock_client *client, const char *prefix, dlock_holder_visitor visit, void *user_data);

/* An administrator's forced release of every holder of the lock `name` (semaphore = 0) or of every
   permit of the semaphore `name` (semaphore = 1), whoever holds them; needs DLOCK_CAP_BREAK. The
   broken holders' leases become LOST (at their next renewal at the latest) and the next holder's
   fencing token is higher than any broken one's. For a lock (exclusive or shared) a resource that
   checks tokens therefore refuses the broken holders' writes. The permits of a semaphore draw their
   tokens from one counter per name, so tokens do not order permits against each other: a resource
   refuses a broken permit holder's write only once N newer permits have written (docs/guide.md).
   A backend that issues no tokens (no DLOCK_CAP_FENCING) says on its page how its break is fenced.
   *out_broken (may be NULL) receives how many holds were removed (0: it was
   free). Returns DLOCK_OK, DLOCK_INVALID_ARGUMENT, DLOCK_NOT_SUPPORTED, DLOCK_PERMISSION (this
   identity may not remove other holders' locks), DLOCK_UNAVAILABLE, DLOCK_UNKNOWN or
   DLOCK_BACKEND. */
DLOCK_API int dlock_break(dlock_client *client, const char *name, int semaphore, size_t *out_broken);

/* ---- logging -------------------------------------------------------------------------------- */

/* Levels of dlock's log lines. Which lines are emitted at all is set by $DLOCK_LOG (debug, info,
   warn, error or off; read at the first line logged; default warn). */
typedef enum dlock_log_level {
    DLOCK_LOG_DEBUG = 0,
    DLOCK_LOG_INFO = 1,
    DLOCK_LOG_WARN = 2,
    DLOCK_LOG_ERROR = 3
} dlock_log_level;

/* Receives one log line: a dlock_log_level and the text, without a newline, timestamp or level.
   A backend plugin's line starts with its backend's name ("zookeeper: ..."). `message` is
   borrowed for the call. */
typedef void (*dlock_log_handler)(int level, const char *message, void *user_data);

/* Sends every log line of dlock in this process — the core's and every plugin's, of every client —
 * to `handler` instead of stderr; NULL restores stderr. Lines never hold a password, token or key.
 * Thread safety: may be called from any thread, before or after clients are opened. The handler
 * is called from whichever thread logs (one inside a dlock call, the lease keeper, a plugin's own
 * thread), one line at a time: calls never overlap. Once this function returns, the previous
 * handler is not running and is never called again, so its user_data may be freed.
 * Re-entrancy: the handler must not call any dlock function (it may run while dlock holds a
 * client's internal lock) and should return quickly: the logging thread waits for it.
 * Returns DLOCK_OK, or DLOCK_INVALID_ARGUMENT when called from inside a handler (nothing changed). */
DLOCK_API int dlock_set_log_handler(dlock_log_handler handler, void *user_data);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Released layouts (LP64), one line per field of every released version, in the manner of ONNX
   Runtime's versioned C API. A change that fails one of these breaks every program built against
   an older header: append a field instead, and pin it here under its version. */
#if defined(__cplusplus)
#define DLOCK_STATIC_ASSERT static_assert
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define DLOCK_STATIC_ASSERT _Static_assert
#endif
#if defined(__LP64__) && defined(DLOCK_STATIC_ASSERT)
/* dlock_acquire_options, version 1 */
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, struct_size) == 0, "acquire options v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, wait_ms) == 8, "acquire options v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, ttl_ms) == 16, "acquire options v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, renew) == 24, "acquire options v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, fair) == 28, "acquire options v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, reentrant) == 32, "acquire options v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, on_lost) == 40, "acquire options v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, on_lost_user_data) == 48, "acquire options v1 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_ACQUIRE_OPTIONS_V1_SIZE == 56, "acquire options v1 layout changed");
/* dlock_acquire_options, version 2 */
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, cancel) == 56, "acquire options v2 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_ACQUIRE_OPTIONS_V2_SIZE == 64, "acquire options v2 layout changed");
/* dlock_acquire_options, version 3 */
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, permits) == 64, "acquire options v3 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_acquire_options, shared) == 68, "acquire options v3 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_ACQUIRE_OPTIONS_V3_SIZE == 72, "acquire options v3 layout changed");
/* dlock_lock_info, version 1 */
DLOCK_STATIC_ASSERT(offsetof(dlock_lock_info, struct_size) == 0, "lock info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_lock_info, held) == 4, "lock info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_lock_info, holder) == 8, "lock info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_lock_info, fencing_token) == 72, "lock info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_lock_info, ttl_left_ms) == 80, "lock info v1 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_LOCK_INFO_V1_SIZE == 88, "lock info v1 layout changed");
/* dlock_holder_info, version 1 */
DLOCK_STATIC_ASSERT(offsetof(dlock_holder_info, struct_size) == 0, "holder info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_holder_info, name) == 8, "holder info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_holder_info, kind) == 16, "holder info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_holder_info, permits) == 20, "holder info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_holder_info, holder) == 24, "holder info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_holder_info, fencing_token) == 88, "holder info v1 layout changed");
DLOCK_STATIC_ASSERT(offsetof(dlock_holder_info, ttl_left_ms) == 96, "holder info v1 layout changed");
DLOCK_STATIC_ASSERT(DLOCK_HOLDER_INFO_V1_SIZE == 104, "holder info v1 layout changed");
#endif

#endif /* DLOCK_DLOCK_H */
