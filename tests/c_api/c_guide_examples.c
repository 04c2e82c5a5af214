/* The C examples of docs/guide.md's sections "Semaphores", "Shared (read-write) locks" and "Listing
 * and breaking locks", word for word inside functions, compiled as C99 (-pedantic -Werror) and run
 * on the `file` backend: an example that stops compiling fails the build. What the examples call
 * that dlock does not provide (wash_car, read_catalog) is defined here. An operation the backend
 * lacks answers DLOCK_NOT_SUPPORTED, which the examples tolerate. */
#include <dlock/dlock.h>

#include <stdio.h>

static void wash_car(uint64_t fencing_token) { (void)fencing_token; }
static void read_catalog(void) {}

static void semaphore_example(dlock_client *client) {
dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
options.permits = 5;        /* one of the 5 permits of the semaphore "stalls" */
options.wait_ms = 10000;
dlock_lease *permit;
int status = dlock_acquire(client, "stalls", &options, &permit);
if (status == DLOCK_OK) {
    wash_car(dlock_lease_fencing_token(permit));
    dlock_lease_release(permit);
    dlock_lease_destroy(permit);
} else if (status == DLOCK_TIMEOUT) {
    /* all 5 were taken for 10 s */
}
}

static void shared_example(dlock_client *client) {
dlock_acquire_options options = DLOCK_ACQUIRE_OPTIONS_INIT;
options.shared = 1;
dlock_lease *reader;
if (dlock_acquire(client, "catalog", &options, &reader) == DLOCK_OK) {
    read_catalog();
    dlock_lease_destroy(reader);   /* releases */
}
}

static int print_holder(const dlock_holder_info *h, void *user_data) {
    (void)user_data;
    printf("%s %s fencing token %llu\n", h->name, h->holder, (unsigned long long)h->fencing_token);
    return 0;
}

static void list_and_break_example(dlock_client *client) {
if (dlock_list(client, "orders/", print_holder, NULL) != DLOCK_OK)
    fprintf(stderr, "%s\n", dlock_last_error());
size_t broken = 0;
if (dlock_break(client, "orders/42", 0, &broken) == DLOCK_OK)
    printf("broke %zu hold(s)\n", broken);
}

int main(int argc, char **argv) {
    char yaml[512];
    dlock_client *client = NULL;
    if (argc != 2) {
        fprintf(stderr, "usage: %s LOCK_DIRECTORY\n", argv[0]);
        return 2;
    }
    snprintf(yaml, sizeof yaml, "backend: file\noptions:\n  directory: %s\n", argv[1]);
    if (dlock_client_open_yaml(yaml, "c_guide_examples", &client) != DLOCK_OK) {
        fprintf(stderr, "%s\n", dlock_last_error());
        return 1;
    }
    semaphore_example(client);
    shared_example(client);
    list_and_break_example(client);
    dlock_client_close(client);
    return 0;
}
