/*
 * replay.c: a main() for the fuzz targets, so they also build with gcc and
 * without libFuzzer: each argument is a file (or a directory of files) fed
 * once to LLVMFuzzerTestOneInput. `make test-fuzz-regress` runs the kept
 * crashing inputs and the seed corpus through it; under SAN=1 it runs them
 * under ASan and UBSan as well.
 *
 * A target reports a broken property by aborting, so the exit status and
 * "replayed N inputs" are the whole report.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Feed one file; returns 1 if it was read, 0 if not. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 0;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return 0;
            }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
    free(buf);
    return 1;
}

int main(int argc, char **argv)
{
    int n = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            DIR *dir = opendir(argv[i]);
            struct dirent *e;
            while (dir && (e = readdir(dir))) {
                if (e->d_name[0] == '.') continue;
                char path[4096];
                struct stat est;
                snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
                if (stat(path, &est) != 0 || !S_ISREG(est.st_mode)) continue;   /* no recursion */
                if (replay_file(path)) n++;
                else bad++;
            }
            if (dir) closedir(dir);
        } else if (replay_file(argv[i])) {
            n++;
        } else {
            bad++;
        }
    }
    printf("replayed %d inputs%s\n", n, bad ? " (some unreadable)" : "");
    return bad ? 1 : 0;
}
