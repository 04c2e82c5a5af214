/* The C ABI of semaphores, shared holds, holders, list and break, compiled as C99 and run on the
 * `file` backend: a caller built before acquire options version 3 (struct_size of version 2) still
 * takes a plain lock, whatever bytes follow its struct; options that cannot go together are
 * INVALID_ARGUMENT with a message naming them; a config policy's `reentrant` does not spoil a
 * permit; NULL clients, names and visitors are INVALID_ARGUMENT, out-parameters untouched.
 * Exits non-zero on the first failure. */
#include <dlock/dlock.h>

#include <stdio.h>
#include <string.h>

#include "c_check.h"

static int count_holder(const dlock_holder_info *info, void *user_data) {
    (void)info;
    ++*(int *)user_data;
    return 0;
}

/* The options of a caller built against acquire options version 2, in a buffer whose bytes past
   version 2 are garbage: the library must not read them. */
typedef struct {
    dlock_acquire_options options;
    unsigned char tail[64];
} v2_caller_options;

int main(int argc, char **argv) {
    char yaml[512];
    dlock_client *client = NULL, *other = NULL, *policy = NULL;
    dlock_lease *lease = NULL, *sentinel = (dlock_lease *)&yaml;
    dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
    v2_caller_options v2;
    size_t broken = 12345;
    int visited = 0, status;

    if (argc != 2) {
        fprintf(stderr, "usage: %s LOCK_DIRECTORY\n", argv[0]);
        return 2;
    }
    snprintf(yaml, sizeof yaml, "backend: file\noptions:\n  directory: %s\n", argv[1]);
    CHECK(dlock_client_open_yaml(yaml, "c_modes_test", &client) == DLOCK_OK);
    CHECK(dlock_client_open_yaml(yaml, "c_modes_test", &other) == DLOCK_OK);
    if (!client || !other) return 1;

    /* A version 2 caller: permits and shared lie beyond its struct_size and are never read. */
    memset(&v2, 0x5a, sizeof v2);
    v2.options.struct_size = (uint32_t)DLOCK_ACQUIRE_OPTIONS_V2_SIZE;
    v2.options.wait_ms = 0;
    v2.options.ttl_ms = DLOCK_DEFAULT;
    v2.options.renew = DLOCK_DEFAULT;
    v2.options.fair = DLOCK_DEFAULT;
    v2.options.reentrant = DLOCK_DEFAULT;
    v2.options.on_lost = NULL;
    v2.options.on_lost_user_data = NULL;
    v2.options.cancel = NULL;
    CHECK(dlock_acquire(client, "c/modes/v2", &v2.options, &lease) == DLOCK_OK);
    options.wait_ms = 0;
    {
        dlock_lease *second = sentinel;
        CHECK(dlock_acquire(other, "c/modes/v2", &options, &second) == DLOCK_TIMEOUT); /* a plain, exclusive lock */
        CHECK(second == sentinel);
    }
    dlock_lease_destroy(lease);
    lease = NULL;

    /* Options that cannot go together: precise INVALID_ARGUMENT, nothing taken. */
    options.permits = 3;
    options.shared = 1;
    lease = sentinel;
    CHECK(dlock_acquire(client, "c/modes/x", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "`shared` and `permits` (3) together") != NULL);
    CHECK(strstr(dlock_last_error(), "c/modes/x") != NULL);
    CHECK(lease == sentinel);
    options.permits = 0;
    options.reentrant = 1;
    CHECK(dlock_acquire(client, "c/modes/x", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "`reentrant` is for exclusive locks; a shared hold") != NULL);
    options.shared = 0;
    options.permits = 2;
    CHECK(dlock_acquire(client, "c/modes/x", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "`reentrant` is for exclusive locks; a semaphore permit") != NULL);
    options.reentrant = DLOCK_DEFAULT;
    options.permits = 0;
    options.shared = 2;
    CHECK(dlock_acquire(client, "c/modes/x", &options, &lease) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "`shared` is 2") != NULL);
    CHECK(lease == sentinel);
    options.shared = 0;

    /* A config whose policy makes locks reentrant: a permit is still asked for, not refused as
       reentrant (granted with DLOCK_CAP_SEMAPHORE, else NOT_SUPPORTED). */
    snprintf(yaml, sizeof yaml, "backend: file\ndefaults: {reentrant: true}\noptions:\n  directory: %s\n", argv[1]);
    CHECK(dlock_client_open_yaml(yaml, "c_modes_test", &policy) == DLOCK_OK);
    if (policy) {
        options.permits = 2;
        lease = NULL;
        status = dlock_acquire(policy, "c/modes/sem", &options, &lease);
        if (dlock_client_capabilities(policy) & DLOCK_CAP_SEMAPHORE) {
            CHECK(status == DLOCK_OK);
        } else {
            CHECK(status == DLOCK_NOT_SUPPORTED);
            CHECK(strstr(dlock_last_error(), "has no semaphores") != NULL);
        }
        dlock_lease_destroy(lease);
        options.permits = 0;
    }

    /* NULL and malformed arguments of holders, list and break. */
    CHECK(dlock_holders(NULL, "c/modes/x", 0, count_holder, &visited) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "client is NULL") != NULL);
    CHECK(dlock_holders(client, NULL, 0, count_holder, &visited) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "name is NULL") != NULL);
    CHECK(dlock_holders(client, "c/modes/x", 0, NULL, &visited) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "visit is NULL") != NULL);
    CHECK(dlock_holders(client, "", 1, count_holder, &visited) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "empty") != NULL);
    CHECK(dlock_list(NULL, "", count_holder, &visited) == DLOCK_INVALID_ARGUMENT);
    CHECK(dlock_list(client, "", NULL, &visited) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "visit is NULL") != NULL);
    CHECK(dlock_list(client, "\xff", count_holder, &visited) == DLOCK_INVALID_ARGUMENT);
    CHECK(dlock_break(NULL, "c/modes/x", 0, &broken) == DLOCK_INVALID_ARGUMENT);
    CHECK(dlock_break(client, NULL, 0, &broken) == DLOCK_INVALID_ARGUMENT);
    CHECK(strstr(dlock_last_error(), "name is NULL") != NULL);
    CHECK(dlock_break(client, "\xc0\xaf", 1, &broken) == DLOCK_INVALID_ARGUMENT);
    CHECK(broken == 12345); /* untouched on failure */
    CHECK(visited == 0);

    /* Without the capability: NOT_SUPPORTED, naming the backend. */
    if (!(dlock_client_capabilities(client) & DLOCK_CAP_LIST)) {
        CHECK(dlock_list(client, "c/", count_holder, &visited) == DLOCK_NOT_SUPPORTED);
        CHECK(strstr(dlock_last_error(), "`file`") != NULL);
    }
    if (!(dlock_client_capabilities(client) & DLOCK_CAP_BREAK)) {
        CHECK(dlock_break(client, "c/modes/x", 0, &broken) == DLOCK_NOT_SUPPORTED);
        CHECK(broken == 12345);
    }

    dlock_client_close(policy);
    dlock_client_close(other);
    dlock_client_close(client);
    if (failures == 0) printf("c_modes_test: all checks passed\n");
    return failures == 0 ? 0 : 1;
}
