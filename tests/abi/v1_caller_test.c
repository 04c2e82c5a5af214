/*
 * A caller written and built against the frozen version-1 dlock.h (tests/abi/v1), linked with
 * today's libdlock, driving the v1 plugin (libdlock-abi_v1.so, built against the same frozen
 * headers) through `plugin_path`. Asserts that:
 *   - today's host negotiates with and runs a v1 plugin: acquire, contention, inspect, release,
 *     a waiter cancelled by closing its client;
 *   - the library reads no byte of dlock_acquire_options beyond the caller's struct_size (the
 *     bytes after the v1 struct are 0xff: a field read from there would be a wild pointer);
 *   - dlock_inspect writes no byte of dlock_lock_info beyond the caller's struct_size (guard bytes
 *     after the v1 struct keep their pattern), and refuses a struct_size below version 1 with
 *     INVALID_ARGUMENT, a message giving both sizes, and nothing written.
 * usage: abi_v1_caller_test PLUGIN_DIR. Exits non-zero on the first failure.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep, strdup, pthread_condattr_setclock */

#include <dlock/dlock.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DLOCK_LOCK_INFO_V1_SIZE
#error "v1_caller_test.c must be compiled against the frozen v1 headers of tests/abi/v1, not today's"
#endif
_Static_assert(sizeof(dlock_lock_info) == 88, "the frozen v1 dlock_lock_info is 88 bytes");
_Static_assert(sizeof(dlock_acquire_options) == 56, "the frozen v1 dlock_acquire_options is 56 bytes");

#include "../c_api/c_check.h"

#define GUARD_BYTES 64
#define GUARD 0xa5

/* A v1 struct followed by guard bytes, as it sits in a caller's memory. */
struct guarded_options {
    dlock_acquire_options options;
    unsigned char after[GUARD_BYTES];
};
struct guarded_info {
    dlock_lock_info info;
    unsigned char after[GUARD_BYTES];
};

static int untouched(const unsigned char *bytes, size_t n, unsigned char pattern) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (bytes[i] != pattern) return 0;
    return 1;
}

struct waiter {
    dlock_client *client;
    int status;
};

static void *wait_forever(void *arg) {
    struct waiter *w = arg;
    dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
    dlock_lease *lease = NULL;
    options.wait_ms = DLOCK_WAIT_FOREVER;
    w->status = dlock_acquire(w->client, "abi/x", &options, &lease);
    dlock_lease_destroy(lease);
    return NULL;
}

int main(int argc, char **argv) {
    char yaml[1024];
    dlock_client *client = NULL, *other = NULL, *closing = NULL;
    dlock_lease *lease = NULL, *second = NULL;
    struct guarded_options go;
    struct guarded_info gi;
    struct waiter w;
    pthread_t thread;
    const struct timespec pause = {0, 200 * 1000 * 1000};

    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    snprintf(yaml, sizeof yaml, "backend: abi_v1\nplugin_path: [\"%s\"]\n", argv[1]);
    CHECK(dlock_client_open_yaml(yaml, "abi_v1_caller_test", &client) == DLOCK_OK);
    if (!client) return 1;
    CHECK(strcmp(dlock_client_backend(client), "abi_v1") == 0);
    CHECK((dlock_client_capabilities(client) & DLOCK_CAP_FENCING) != 0);

    /* Acquire with v1 options; every byte after them is 0xff. */
    memset(&go, 0xff, sizeof go);
    {
        const dlock_acquire_options init = DLOCK_ACQUIRE_OPTIONS_INIT;
        go.options = init;
    }
    go.options.wait_ms = 0;
    CHECK(go.options.struct_size == 56);
    CHECK(dlock_acquire(client, "abi/x", &go.options, &lease) == DLOCK_OK);
    CHECK(lease != NULL);
    CHECK(untouched(go.after, sizeof go.after, 0xff));
    if (!lease) return 1;
    CHECK(dlock_lease_fencing_token(lease) == 1);
    CHECK(dlock_lease_state_get(lease) == DLOCK_LEASE_HELD);

    /* Held: the same plugin answers TIMEOUT to a try-lock. */
    CHECK(dlock_acquire(client, "abi/x", &go.options, &second) == DLOCK_TIMEOUT);
    CHECK(second == NULL);

    /* Inspect into a v1 lock info: every field of v1 written, nothing after it. */
    memset(&gi, GUARD, sizeof gi);
    gi.info.struct_size = (uint32_t)sizeof(dlock_lock_info);
    CHECK(dlock_inspect(client, "abi/x", &gi.info) == DLOCK_OK);
    CHECK(gi.info.struct_size == sizeof(dlock_lock_info));
    CHECK(gi.info.held == 1);
    CHECK(strcmp(gi.info.holder, dlock_lease_owner(lease)) == 0);
    CHECK(gi.info.fencing_token == 1);
    CHECK(gi.info.ttl_left_ms == -1);
    CHECK(untouched(gi.after, sizeof gi.after, GUARD));

    /* A struct_size below version 1: refused precisely, nothing written. */
    memset(&gi, GUARD, sizeof gi);
    gi.info.struct_size = (uint32_t)(sizeof(dlock_lock_info) - 8);
    CHECK(dlock_inspect(client, "abi/x", &gi.info) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "struct_size is 80") != NULL);
    CHECK(strstr(dlock_last_error(), "88 bytes") != NULL);
    CHECK(gi.info.struct_size == sizeof(dlock_lock_info) - 8);
    CHECK(untouched((const unsigned char *)&gi + sizeof gi.info.struct_size, sizeof gi - sizeof gi.info.struct_size, GUARD));

    /* Closing a client cancels its waiter through the v1 plugin's interrupt. */
    CHECK(dlock_client_open_yaml(yaml, "abi_v1_caller_test", &closing) == DLOCK_OK);
    if (!closing) return 1;
    w.client = closing;
    w.status = -1;
    CHECK(pthread_create(&thread, NULL, wait_forever, &w) == 0);
    nanosleep(&pause, NULL);
    dlock_client_close(closing);
    pthread_join(thread, NULL);
    CHECK(w.status == DLOCK_CANCELLED);

    /* Release, then the lock is free for anyone. */
    CHECK(dlock_lease_release(lease) == DLOCK_OK);
    CHECK(dlock_lease_state_get(lease) == DLOCK_LEASE_RELEASED);
    gi.info.struct_size = (uint32_t)sizeof(dlock_lock_info);
    CHECK(dlock_inspect(client, "abi/x", &gi.info) == DLOCK_OK);
    CHECK(gi.info.held == 0);
    CHECK(dlock_client_open_yaml(yaml, "abi_v1_caller_test", &other) == DLOCK_OK);
    dlock_lease_destroy(lease);
    lease = NULL;
    CHECK(dlock_acquire(client, "abi/x", &go.options, &lease) == DLOCK_OK);
    CHECK(dlock_lease_fencing_token(lease) == 2);

    dlock_lease_destroy(lease);
    dlock_client_close(other);
    dlock_client_close(client);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
