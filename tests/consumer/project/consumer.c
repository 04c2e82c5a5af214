/* Takes a lock through the installed C ABI. */
#include <dlock/dlock.h>
#include <stdio.h>

int main(int argc, char **argv) {
    char yaml[512];
    dlock_client *client = NULL;
    dlock_lease *lease = NULL;
    if (argc != 2) return 2;
    snprintf(yaml, sizeof yaml, "backend: file\noptions: {directory: %s}\n", argv[1]);
    if (dlock_client_open_yaml(yaml, "consumer", &client) != DLOCK_OK) return 1;
    if (dlock_acquire(client, "consumer", NULL, &lease) != DLOCK_OK) return 1;
    printf("consumer_c: fencing token %llu\n", (unsigned long long)dlock_lease_fencing_token(lease));
    dlock_lease_destroy(lease);
    dlock_client_close(client);
    return 0;
}
