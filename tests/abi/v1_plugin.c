/*
 * A backend plugin written and built against the frozen version-1 headers (tests/abi/v1), as a
 * plugin shipped for dlock 0.1.0 would be: one in-memory lock table per process, shared by every
 * backend (client) made from it, so two clients contend; session-bound leases, fencing tokens. Today's libdlock must load it through `plugin_path` and run it unchanged.
 * Backend name: "abi_v1" (file libdlock-abi_v1.so).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep, strdup, pthread_condattr_setclock */

#include <dlock/plugin.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DLOCK_PLUGIN_V1_SIZE
#error "v1_plugin.c must be compiled against the frozen v1 headers of tests/abi/v1, not today's"
#endif
_Static_assert(sizeof(dlock_plugin) == 112, "the frozen v1 table is 112 bytes");

struct entry {
    char *name;
    int held;
    char owner[33];
    uint64_t fence; /* the last fencing token issued for the name */
    struct entry *next;
};

/* The process's lock table. */
static pthread_mutex_t table_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed; /* on CLOCK_MONOTONIC; a lock was released or a backend interrupted */
static pthread_once_t changed_once = PTHREAD_ONCE_INIT;
static struct entry *entries;
static int backends; /* live backends; the table is freed with the last (no hold outlives it) */

struct dlock_backend {
    int interrupted; /* under table_mutex */
};

static void init_changed(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&changed, &attr);
    pthread_condattr_destroy(&attr);
}

struct dlock_hold {
    struct entry *entry;
    char owner[33];
};

static void set_error(dlock_plugin_error *error, const char *message) {
    if (error) snprintf(error->message, sizeof error->message, "%s", message);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct entry *find_or_add(const char *name) {
    struct entry *e;
    for (e = entries; e; e = e->next)
        if (strcmp(e->name, name) == 0) return e;
    e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->name = strdup(name);
    if (!e->name) {
        free(e);
        return NULL;
    }
    e->next = entries;
    entries = e;
    return e;
}

static int v1_create(const dlock_option_value *options, size_t option_count, const dlock_plugin_host *host,
                     dlock_backend **out_backend, dlock_plugin_error *error) {
    struct dlock_backend *b;
    (void)options;
    (void)option_count;
    (void)host;
    b = calloc(1, sizeof *b);
    if (!b) {
        set_error(error, "abi_v1: out of memory");
        return DLOCK_INTERNAL;
    }
    pthread_once(&changed_once, init_changed);
    pthread_mutex_lock(&table_mutex);
    ++backends;
    pthread_mutex_unlock(&table_mutex);
    *out_backend = b;
    return DLOCK_OK;
}

static void v1_destroy(dlock_backend *b) {
    pthread_mutex_lock(&table_mutex);
    if (--backends == 0) {
        while (entries) {
            struct entry *next = entries->next;
            free(entries->name);
            free(entries);
            entries = next;
        }
    }
    pthread_mutex_unlock(&table_mutex);
    free(b);
}

/* Bits 7 to 10 meant nothing in version 1; a plugin of then may have set them (they are set here,
   as a careless one would): they now mean SEMAPHORE, SHARED, LIST and BREAK, which a version 1 table
   cannot offer, so the host must ignore them. */
#define V1_UNDEFINED_BITS ((uint64_t)0xf << 7)

static uint64_t v1_capabilities(dlock_backend *b) {
    (void)b;
    return DLOCK_CAP_FENCING | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_SESSION_BOUND | V1_UNDEFINED_BITS;
}

static void v1_interrupt(dlock_backend *b) {
    pthread_mutex_lock(&table_mutex);
    b->interrupted = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&table_mutex);
}

static int v1_acquire(dlock_backend *b, const dlock_acquire_request *request, dlock_hold **out_hold,
                      dlock_grant *out_grant, dlock_plugin_error *error) {
    struct entry *e;
    struct dlock_hold *h;
    int status = DLOCK_OK;
    pthread_mutex_lock(&table_mutex);
    e = find_or_add(request->name);
    while (status == DLOCK_OK && e && e->held) {
        if (b->interrupted) {
            set_error(error, "abi_v1: the client is closing");
            status = DLOCK_CANCELLED;
        } else if (request->deadline_ns == 0 || now_ns() >= request->deadline_ns) {
            set_error(error, "abi_v1: the lock is held");
            status = DLOCK_TIMEOUT;
        } else if (request->deadline_ns == INT64_MAX) {
            pthread_cond_wait(&changed, &table_mutex);
        } else {
            struct timespec until;
            until.tv_sec = request->deadline_ns / 1000000000;
            until.tv_nsec = request->deadline_ns % 1000000000;
            pthread_cond_timedwait(&changed, &table_mutex, &until);
        }
    }
    if (status == DLOCK_OK && b->interrupted) {
        set_error(error, "abi_v1: the client is closing");
        status = DLOCK_CANCELLED;
    }
    h = status == DLOCK_OK && e ? calloc(1, sizeof *h) : NULL;
    if (status == DLOCK_OK && !h) {
        set_error(error, "abi_v1: out of memory");
        status = DLOCK_INTERNAL;
    }
    if (status == DLOCK_OK) {
        e->held = 1;
        snprintf(e->owner, sizeof e->owner, "%s", request->owner);
        h->entry = e;
        snprintf(h->owner, sizeof h->owner, "%s", request->owner);
        out_grant->fencing_token = ++e->fence;
        out_grant->valid_until_ns = INT64_MAX;
        out_grant->ttl_ms = request->ttl_ms;
        *out_hold = h;
    }
    pthread_mutex_unlock(&table_mutex);
    return status;
}

static int v1_release(dlock_backend *b, dlock_hold *h, dlock_plugin_error *error) {
    int status = DLOCK_OK;
    (void)b;
    pthread_mutex_lock(&table_mutex);
    if (!h->entry->held || strcmp(h->entry->owner, h->owner) != 0) {
        set_error(error, "abi_v1: not held by this owner");
        status = DLOCK_LOST;
    } else {
        h->entry->held = 0;
        h->entry->owner[0] = '\0';
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&table_mutex);
    return status;
}

static void v1_hold_destroy(dlock_backend *b, dlock_hold *h) {
    (void)b;
    pthread_mutex_lock(&table_mutex);
    if (h->entry->held && strcmp(h->entry->owner, h->owner) == 0) { /* session-bound: freed = released */
        h->entry->held = 0;
        h->entry->owner[0] = '\0';
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&table_mutex);
    free(h);
}

static int v1_renew(dlock_backend *b, dlock_renewal *renewals, size_t count, dlock_plugin_error *error) {
    size_t i;
    (void)b;
    (void)error;
    pthread_mutex_lock(&table_mutex);
    for (i = 0; i < count; ++i) {
        const struct dlock_hold *h = renewals[i].hold;
        const int ours = h->entry->held && strcmp(h->entry->owner, h->owner) == 0;
        renewals[i].status = ours ? DLOCK_OK : DLOCK_LOST;
        renewals[i].valid_until_ns = INT64_MAX;
    }
    pthread_mutex_unlock(&table_mutex);
    return DLOCK_OK;
}

/* Writes every field of the v1 dlock_lock_info: a host newer than this plugin hands over a longer
   struct and must not depend on the plugin knowing the rest. */
static int v1_inspect(dlock_backend *b, const char *name, dlock_lock_info *out_info, dlock_plugin_error *error) {
    const struct entry *e;
    (void)b;
    (void)error;
    pthread_mutex_lock(&table_mutex);
    out_info->held = 0;
    out_info->holder[0] = '\0';
    out_info->fencing_token = 0;
    out_info->ttl_left_ms = -1;
    for (e = entries; e; e = e->next) {
        if (strcmp(e->name, name) != 0) continue;
        out_info->held = e->held;
        if (e->held) snprintf(out_info->holder, sizeof out_info->holder, "%s", e->owner);
        out_info->fencing_token = e->fence;
    }
    pthread_mutex_unlock(&table_mutex);
    return DLOCK_OK;
}

static const dlock_plugin table = {
    sizeof(dlock_plugin), /* 112: the v1 table */
    1,
    "abi_v1",
    "in-memory locks, built against the frozen v1 headers (tests/abi)",
    NULL,
    0,
    v1_create,
    v1_destroy,
    v1_capabilities,
    v1_interrupt,
    v1_acquire,
    v1_release,
    v1_hold_destroy,
    v1_renew,
    v1_inspect,
};

DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin **out_plugin,
                                               uint32_t *out_min_version) {
    if (host_max_version < 1) {
        *out_min_version = 1;
        return DLOCK_NOT_SUPPORTED;
    }
    *out_plugin = &table;
    return DLOCK_OK;
}
