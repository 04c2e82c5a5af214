/* Compiles dlock.h and plugin.h as C99 (-std=c99 -pedantic -Werror) and drives the C ABI on the
 * `file` backend: open from YAML text, acquire, lease accessors, inspect, release, idempotence,
 * TIMEOUT as an ordinary status, precise errors for bad input. Exits non-zero on the first failure. */
#include <dlock/dlock.h>
#include <dlock/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"

int main(int argc, char **argv) {
    char yaml[512];
    dlock_client *client = NULL, *other = NULL;
    dlock_lease *lease = NULL, *second = NULL;
    dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
    dlock_lock_info info = DLOCK_LOCK_INFO_INIT;
    uint64_t first_fence;

    if (argc != 2) {
        fprintf(stderr, "usage: %s LOCK_DIRECTORY\n", argv[0]);
        return 2;
    }
    snprintf(yaml, sizeof yaml, "backend: file\noptions:\n  directory: %s\n", argv[1]);

    CHECK(dlock_client_open_yaml(yaml, "c_api_test", &client) == DLOCK_OK);
    CHECK(dlock_client_open_yaml(yaml, "c_api_test", &other) == DLOCK_OK);
    if (!client || !other) return 1;
    CHECK(strcmp(dlock_client_backend(client), "file") == 0);
    CHECK((dlock_client_capabilities(client) & DLOCK_CAP_FENCING) != 0);

    options.wait_ms = 0;
    CHECK(dlock_acquire(client, "c/lock", &options, &lease) == DLOCK_OK);
    CHECK(lease != NULL);
    CHECK(strcmp(dlock_lease_name(lease), "c/lock") == 0);
    CHECK(strlen(dlock_lease_owner(lease)) == 32);
    first_fence = dlock_lease_fencing_token(lease);
    CHECK(first_fence > 0);
    CHECK(dlock_lease_state_get(lease) == DLOCK_LEASE_HELD);
    CHECK(dlock_lease_valid_until(lease) == INT64_MAX);

    /* Held: another client's try-lock is an ordinary TIMEOUT and leaves the out-parameter alone. */
    second = (dlock_lease *)&options; /* sentinel: must be untouched */
    CHECK(dlock_acquire(other, "c/lock", &options, &second) == DLOCK_TIMEOUT);
    CHECK(second == (dlock_lease *)&options);

    CHECK(dlock_inspect(other, "c/lock", &info) == DLOCK_OK);
    CHECK(info.held == 1);
    CHECK(strcmp(info.holder, dlock_lease_owner(lease)) == 0);
    CHECK(info.fencing_token == first_fence);

    CHECK(dlock_lease_release(lease) == DLOCK_OK);
    CHECK(dlock_lease_release(lease) == DLOCK_OK); /* idempotent */
    CHECK(dlock_lease_state_get(lease) == DLOCK_LEASE_RELEASED);
    dlock_lease_destroy(lease);

    second = NULL;
    CHECK(dlock_acquire(other, "c/lock", &options, &second) == DLOCK_OK);
    CHECK(dlock_lease_fencing_token(second) > first_fence);
    dlock_lease_destroy(second); /* releases */

    /* Bad input: precise errors, no crash. */
    CHECK(dlock_acquire(client, "", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "empty") != NULL);
    CHECK(dlock_acquire(client, "\xff", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    options.ttl_ms = 0;
    CHECK(dlock_acquire(client, "c/lock", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "ttl_ms") != NULL);
    options.ttl_ms = -5;
    CHECK(dlock_acquire(client, "c/lock", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    options.ttl_ms = DLOCK_DEFAULT;
    options.wait_ms = -7;
    CHECK(dlock_acquire(client, "c/lock", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    {
        dlock_client *bad = NULL;
        CHECK(dlock_client_open_yaml("backend: [", "bad.yaml", &bad) == DLOCK_CONFIG);
        CHECK(bad == NULL);
    }
    CHECK(strstr(dlock_last_error(), "bad.yaml") != NULL);
    CHECK(strcmp(dlock_status_name(DLOCK_TIMEOUT), "DLOCK_TIMEOUT") == 0);
    CHECK(strcmp(dlock_version(), DLOCK_VERSION_STRING) == 0);

    dlock_client_close(other);
    dlock_client_close(client);
    dlock_client_close(NULL);
    dlock_lease_destroy(NULL);
    if (failures == 0) printf("c_api_test: all checks passed\n");
    return failures == 0 ? 0 : 1;
}
