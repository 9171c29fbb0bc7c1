/*
 * replay.c - runs fuzz inputs through the harness without libFuzzer.
 *
 *   replay [FILE|DIR]...
 *
 * Each file (each regular file in a DIR, sorted, dot-files and *.md skipped)
 * goes through LLVMFuzzerTestOneInput once; an oracle mismatch aborts. With
 * no arguments it replays $top_srcdir/tests/fuzz/corpus and
 * tests/fuzz/regressions, which is how `make check` runs it.
 * Exit status (automake's): 0 all passed, 99 an input could not be read.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { REPLAY_MAX_INPUT = 1 << 20 };

static int g_count;

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return 99;
  }
  uint8_t *buf = malloc(REPLAY_MAX_INPUT);
  if (!buf) {
    fclose(f);
    return 99;
  }
  size_t n = fread(buf, 1, REPLAY_MAX_INPUT, f);
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    fprintf(stderr, "replay: cannot read %s\n", path);
    return 99;
  }
  /* An exact-size copy, so that the harness's own over-reads are caught too. */
  uint8_t *input = malloc(n ? n : 1);
  if (!input) {
    free(buf);
    return 99;
  }
  memcpy(input, buf, n);
  free(buf);
  fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
  LLVMFuzzerTestOneInput(input, n);
  free(input);
  g_count++;
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int skipped(const char *name) {
  size_t n = strlen(name);
  return name[0] == '.' || (n >= 3 && strcmp(name + n - 3, ".md") == 0);
}

static int replay_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: no such file or directory: %s\n", path);
    return 99;
  }
  if (!S_ISDIR(st.st_mode)) return replay_file(path);
  DIR *d = opendir(path);
  if (!d) {
    fprintf(stderr, "replay: cannot list %s\n", path);
    return 99;
  }
  char **names = NULL;
  size_t count = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (skipped(e->d_name)) continue;
    if (count == cap) {
      cap = cap ? 2 * cap : 64;
      char **grown = realloc(names, cap * sizeof *names);
      if (!grown) abort();
      names = grown;
    }
    size_t len = strlen(path) + strlen(e->d_name) + 2;
    names[count] = malloc(len);
    if (!names[count]) abort();
    snprintf(names[count], len, "%s/%s", path, e->d_name);
    count++;
  }
  closedir(d);
  qsort(names, count, sizeof *names, by_name);
  int rc = 0;
  for (size_t i = 0; i < count; i++) {
    struct stat fst;
    if (stat(names[i], &fst) == 0 && S_ISREG(fst.st_mode) && replay_file(names[i])) rc = 99;
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  int rc = 0;
  if (argc > 1) {
    for (int i = 1; i < argc; i++)
      if (replay_path(argv[i])) rc = 99;
  } else {
    const char *top = getenv("top_srcdir");
    if (!top || !*top) top = ".";
    static const char *const dirs[] = {"tests/fuzz/corpus", "tests/fuzz/regressions"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
      size_t len = strlen(top) + strlen(dirs[i]) + 2;
      char *p = malloc(len);
      if (!p) return 99;
      snprintf(p, len, "%s/%s", top, dirs[i]);
      if (replay_path(p)) rc = 99;
      free(p);
    }
  }
  if (g_count == 0) {
    fprintf(stderr, "replay: no inputs found\n");
    return 99;
  }
  fprintf(stderr, "replay: %d inputs passed%s\n", g_count, rc ? " (some could not be read)" : "");
  return rc;
}
