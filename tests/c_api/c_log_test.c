/* The log hook of dlock.h, compiled as C99: with a handler installed, dlock's lines — a plugin's
 * (through the host's log service) and the core's (a config file holding a secret that others can
 * read) — reach the handler with their level, and none reaches stderr; no line holds the secret;
 * the handler cannot be replaced from inside itself; NULL sends the lines to stderr again.
 * Arguments: the fake plugins' directory and a scratch directory. Exits non-zero on a failure. */
#define _POSIX_C_SOURCE 200809L

#include <dlock/dlock.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "c_check.h"

#define MAX_LINES 32
#define SECRET "s3cr3t-token-7f2c9a"

static struct {
    int count;
    int levels[MAX_LINES];
    char messages[MAX_LINES][1024];
    int replace_status; /* what dlock_set_log_handler answered from inside the handler */
} seen;

static void collect(int level, const char *message, void *user_data) {
    if (seen.count < MAX_LINES) {
        seen.levels[seen.count] = level;
        snprintf(seen.messages[seen.count], sizeof seen.messages[0], "%s", message);
        ++seen.count;
    }
    *(int *)user_data += 1;
    seen.replace_status = dlock_set_log_handler(NULL, NULL);
}

/* The index of the first collected line containing `text`, or -1. */
static int line_with(const char *text) {
    int i;
    for (i = 0; i < seen.count; ++i)
        if (strstr(seen.messages[i], text)) return i;
    return -1;
}

/* Sends fd 2 to `path` until release_stderr, which reads what was written into `out`. */
static int saved_stderr = -1;
static void capture_stderr(const char *path) {
    int fd;
    fflush(stderr);
    saved_stderr = dup(2);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
}
static void release_stderr(const char *path, char *out, size_t size) {
    FILE *in;
    size_t n = 0;
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    in = fopen(path, "r");
    if (in) {
        n = fread(out, 1, size - 1, in);
        fclose(in);
    }
    out[n] = '\0';
}

static int open_fake(const char *plugin_dir, const char *log_line, dlock_client **client) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "backend: fake\nplugin_path: [\"%s\"]\noptions:\n  log_line: \"%s\"\n", plugin_dir, log_line);
    return dlock_client_open_yaml(yaml, "c_log_test", client);
}

int main(int argc, char **argv) {
    char stderr_path[512], config_path[512], captured[8192];
    dlock_client *client = NULL;
    int calls = 0, i, status;
    FILE *config;

    if (argc != 3) {
        fprintf(stderr, "usage: %s FAKE_PLUGIN_DIR SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    mkdir(argv[2], 0700);
    snprintf(stderr_path, sizeof stderr_path, "%s/stderr.txt", argv[2]);
    snprintf(config_path, sizeof config_path, "%s/readable.yaml", argv[2]);

    /* 1. A handler receives a plugin's line, and stderr none. */
    CHECK(dlock_set_log_handler(collect, &calls) == DLOCK_OK);
    capture_stderr(stderr_path);
    status = open_fake(argv[1], "hello from the plugin", &client);
    release_stderr(stderr_path, captured, sizeof captured);
    CHECK(status == DLOCK_OK);
    dlock_client_close(client);
    client = NULL;
    i = line_with("hello from the plugin");
    CHECK(i >= 0);
    if (i >= 0) {
        CHECK(strcmp(seen.messages[i], "fake: hello from the plugin") == 0);
        CHECK(seen.levels[i] == DLOCK_LOG_WARN);
    }
    CHECK(calls >= 1);
    CHECK(strstr(captured, "hello from the plugin") == NULL);
    /* The handler tried to remove itself, which the contract forbids: refused, nothing changed. */
    CHECK(seen.replace_status == DLOCK_INVALID_ARGUMENT);

    /* 2. The core's warning about a config file others can read that holds a secret: it names
       the file and the fix, never the secret. */
    config = fopen(config_path, "w");
    CHECK(config != NULL);
    if (config) {
        fprintf(config, "backend: fake\nplugin_path: [\"%s\"]\noptions:\n  token: \"%s\"\n", argv[1], SECRET);
        fclose(config);
    }
    chmod(config_path, 0644);
    capture_stderr(stderr_path);
    status = dlock_client_open(config_path, &client);
    release_stderr(stderr_path, captured, sizeof captured);
    CHECK(status == DLOCK_OK);
    dlock_client_close(client);
    client = NULL;
    i = line_with("readable.yaml");
    CHECK(i >= 0);
    if (i >= 0) CHECK(seen.levels[i] == DLOCK_LOG_WARN);
    CHECK(strstr(captured, "readable.yaml") == NULL);
    for (i = 0; i < seen.count; ++i) CHECK(strstr(seen.messages[i], SECRET) == NULL);

    /* 3. NULL restores stderr: the handler is not called again. */
    CHECK(dlock_set_log_handler(NULL, NULL) == DLOCK_OK);
    calls = 0;
    capture_stderr(stderr_path);
    status = open_fake(argv[1], "back on stderr", &client);
    release_stderr(stderr_path, captured, sizeof captured);
    CHECK(status == DLOCK_OK);
    dlock_client_close(client);
    CHECK(calls == 0);
    CHECK(line_with("back on stderr") < 0);
    CHECK(strstr(captured, "fake: back on stderr") != NULL);

    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
