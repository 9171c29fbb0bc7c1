/*
 * error.c - status strings and the thread-local "last error".
 *
 * The detail of a failure lives in a per-thread buffer, never in process-wide
 * state, so that callers on different threads need no lock (libuv's way).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char shim_last_message[DLPACKSHIM_ERROR_MAX];
static _Thread_local int shim_last_code;

DLPACKSHIM_API const char *dlpackshim_strerror(int status) {
  switch ((dlpackshim_status)status) {
    case DLPACKSHIM_OK: return "success";
    case DLPACKSHIM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case DLPACKSHIM_ERR_NO_MEMORY: return "out of memory";
    case DLPACKSHIM_ERR_INVALID_TENSOR: return "invalid DLPack tensor";
    case DLPACKSHIM_ERR_UNSUPPORTED: return "unsupported operation";
    case DLPACKSHIM_ERR_VERSION: return "unsupported DLPack version";
    case DLPACKSHIM_ERR_CAPSULE: return "invalid or already consumed DLPack capsule";
    case DLPACKSHIM_ERR_NO_PYTHON: return "no Python interpreter in this process";
    case DLPACKSHIM_ERR_TYPE: return "object of the wrong type";
    case DLPACKSHIM_ERR_DEVICE: return "device runtime unavailable or failed";
    case DLPACKSHIM_ERR_STREAM: return "stream not allowed for this device";
    case DLPACKSHIM_ERR_COPY_REQUIRED: return "a copy is required but was not allowed";
    case DLPACKSHIM_ERR_READ_ONLY: return "read-only data where writable data is needed";
    case DLPACKSHIM_ERR_PYTHON: return "a Python call failed";
  }
  return "unknown dlpackshim status";
}

DLPACKSHIM_API const char *dlpackshim_last_error(void) { return shim_last_message; }

DLPACKSHIM_API size_t dlpackshim_last_error_copy(char *buf, size_t size) {
  size_t len = strlen(shim_last_message);
  if (buf && size > 0) {
    size_t n = len < size ? len : shim_utf8_cut(shim_last_message, size - 1);
    memcpy(buf, shim_last_message, n);
    buf[n] = '\0';
  }
  return len;
}

DLPACKSHIM_API int dlpackshim_last_status(void) { return shim_last_code; }

DLPACKSHIM_API void dlpackshim_clear_error(void) {
  shim_last_message[0] = '\0';
  shim_last_code = 0;
}

static void set_last_error(int status, const char *fmt, va_list ap) SHIM_PRINTF(2, 0);

size_t shim_utf8_cut(const char *s, size_t max) {
  size_t n = 0, i = 0;
  while (i < max && s[i] != '\0') {
    unsigned char lead = (unsigned char)s[i];
    size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    if (i + len > max) break;
    i += len;
    n = i;
  }
  return n;
}

static void set_last_error(int status, const char *fmt, va_list ap) {
  shim_last_code = status;
  /* vsnprintf truncates and always terminates; a message that does not fit
   * is cut, never overflowing. A format error leaves the status string. */
  if (vsnprintf(shim_last_message, sizeof shim_last_message, fmt, ap) < 0)
    snprintf(shim_last_message, sizeof shim_last_message, "%s", dlpackshim_strerror(status));
  /* cut to fit: not inside a character, which Python could not decode */
  shim_last_message[shim_utf8_cut(shim_last_message, sizeof shim_last_message - 1)] = '\0';
}

int shim_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_last_error(status, fmt, ap);
  va_end(ap);
  return status;
}

void *shim_fail_null(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_last_error(status, fmt, ap);
  va_end(ap);
  return NULL;
}
