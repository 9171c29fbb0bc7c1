/*
 * loader.c - finds and opens a GPU runtime library (dlopen): the override
 * variable alone when it is set, else a copy already in the process, else
 * the default names in order. The back-ends (cuda.c, hip.c) call it once.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpu.h"

/* dlerror() repeats the file name first; keep only the reason. */
static const char *shim_dlerror_reason(const char *name) {
  const char *e = dlerror();
  if (!e) return "unknown error";
  size_t n = strlen(name);
  if (strncmp(e, name, n) == 0 && e[n] == ':') {
    e += n + 1;
    while (*e == ' ') e++;
  }
  return e;
}

void *shim_gpu_dlopen(const char *env, const char *const *names, char *tried, size_t tried_len,
                      const char **loaded) {
  size_t used = 0;
  tried[0] = '\0';
  const char *override = getenv(env);
  /* An override is authoritative: when it is set, nothing else is tried,
   * so that a test (or a user) gets exactly the library they named. */
  if (override && *override) {
    struct stat st;
    void *h;
    /* dlopen of a FIFO waits for a writer, forever: a path must name a
     * regular file (or a link to one); a bare name is the loader's search. */
    if (strchr(override, '/') != NULL && stat(override, &st) == 0 && !S_ISREG(st.st_mode)) {
      snprintf(tried, tried_len, "%s=%s (not a regular file, nor a link to one; not opened)", env,
               override);
      return NULL;
    }
    h = dlopen(override, RTLD_NOW | RTLD_LOCAL);
    /* A copy, kept for the process: the environment's string can go. */
    if (h && (*loaded = strdup(override)) != NULL) return h;
    if (h) {
      dlclose(h);
      snprintf(tried, tried_len, "%s=%s (out of memory)", env, override);
      return NULL;
    }
    snprintf(tried, tried_len, "%s=%s (%s)", env, override, shim_dlerror_reason(override));
    return NULL;
  }
  /* A runtime already in the process (PyTorch's, CuPy's) is the one to use:
   * a second copy of the HIP runtime from another path would have its own
   * devices, streams and allocations. */
  for (size_t i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h) {
      *loaded = names[i];
      return h;
    }
  }
  (void)dlerror();
  for (size_t i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *loaded = names[i];
      return h;
    }
    if (used < tried_len) {
      int n = snprintf(tried + used, tried_len - used, "%s%s (%s)", i ? ", " : "", names[i],
                       shim_dlerror_reason(names[i]));
      if (n > 0) used += (size_t)n;
    }
  }
  if (used < tried_len)
    snprintf(tried + used, tried_len - used, "; set %s to the library's path", env);
  return NULL;
}

void shim_gpu_unusable_after_fork(const char *runtime, int *status, char *message,
                                  size_t message_len, int *count) {
  /* The child of fork() has one thread and nothing to race with. */
  *status = DLPACKSHIM_ERR_DEVICE;
  *count = 0;
  snprintf(message, message_len,
           "%s cannot be used in this process: it was initialised before fork(), and a GPU "
           "runtime does not survive fork() (start workers with the 'spawn' or 'forkserver' "
           "method)",
           runtime);
}
