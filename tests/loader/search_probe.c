/* Opens the YAML config given as argv[1] through whichever libdlock the dynamic linker picked, and
 * prints that library's path, the status name and the error text, one per line. */
#define _GNU_SOURCE
#include <dlock/dlock.h>

#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    Dl_info info;
    dlock_client *client = NULL;
    int status;
    if (argc != 2) return 2;
    if (!dladdr((void *)&dlock_client_open_yaml, &info) || !info.dli_fname) return 3;
    printf("libdlock: %s\n", info.dli_fname);
    status = dlock_client_open_yaml(argv[1], "probe.yaml", &client);
    printf("status: %s\n", dlock_status_name(status));
    if (status != DLOCK_OK) printf("%s\n", dlock_last_error());
    dlock_client_close(client);
    return 0;
}
