/* Takes a lock through the installed C ABI.
 *   consumer_c DIR              the built-in `file` backend, locks under DIR
 *   consumer_c --config FILE    the backend FILE names (a plugin); prints the plugin file loaded */
#include <dlock/dlock.h>
#include <stdio.h>
#include <string.h>

/* Prints the first mapped file whose name contains "libdlock-": the plugin this process loaded. */
static void print_loaded_plugin(void) {
    char line[4096];
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return;
    while (fgets(line, sizeof line, maps)) {
        const char *path = strchr(line, '/');
        if (path && strstr(path, "libdlock-")) {
            printf("consumer_c: plugin %s", path);
            break;
        }
    }
    fclose(maps);
}

int main(int argc, char **argv) {
    char yaml[512];
    dlock_client *client = NULL;
    dlock_lease *lease = NULL;
    int status;
    if (argc == 3 && strcmp(argv[1], "--config") == 0) {
        status = dlock_client_open(argv[2], &client);
    } else if (argc == 2) {
        snprintf(yaml, sizeof yaml, "backend: file\noptions: {directory: %s}\n", argv[1]);
        status = dlock_client_open_yaml(yaml, "consumer", &client);
    } else {
        return 2;
    }
    if (status != DLOCK_OK) {
        fprintf(stderr, "consumer_c: %s: %s\n", dlock_status_name(status), dlock_last_error());
        return 1;
    }
    if (argc == 3) print_loaded_plugin();
    status = dlock_acquire(client, "consumer", NULL, &lease);
    if (status != DLOCK_OK) {
        fprintf(stderr, "consumer_c: acquire: %s: %s\n", dlock_status_name(status), dlock_last_error());
        return 1;
    }
    printf("consumer_c: %s fencing token %llu\n", dlock_client_backend(client),
           (unsigned long long)dlock_lease_fencing_token(lease));
    dlock_lease_destroy(lease);
    dlock_client_close(client);
    return 0;
}
