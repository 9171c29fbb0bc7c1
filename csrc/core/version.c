/*
 * version.c - the library's version and DLPack version negotiation.
 */
#include "internal.h"

/* Makefile.am passes PACKAGE_VERSION from configure.ac's AC_INIT; the literal
 * is for builds outside autotools and must be kept in step with AC_INIT. */
#ifndef DLPACKSHIM_VERSION_STRING
#define DLPACKSHIM_VERSION_STRING "0.1.0"
#endif

enum { SHIM_DLPACK_MAJOR = 1, SHIM_DLPACK_MINOR = 3 };

DLPACKSHIM_API const char *dlpackshim_version_string(void) { return DLPACKSHIM_VERSION_STRING; }

DLPACKSHIM_API void dlpackshim_dlpack_version(uint32_t *major, uint32_t *minor) {
  if (major) *major = SHIM_DLPACK_MAJOR;
  if (minor) *minor = SHIM_DLPACK_MINOR;
}

DLPACKSHIM_API int dlpackshim_negotiate_version(uint32_t producer_major, uint32_t producer_minor,
                                                uint32_t max_major, uint32_t max_minor,
                                                uint32_t *major_out, uint32_t *minor_out) {
  if (!major_out || !minor_out)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "negotiate_version: major_out and minor_out must not be NULL");
  /* A major version bump breaks the ABI: a producer cannot speak an older
   * major, while within one major a newer minor only adds (dlpack.h). */
  if (producer_major > max_major)
    return shim_fail(DLPACKSHIM_ERR_VERSION,
                     "consumer accepts DLPack at most %u.%u but the producer speaks %u.%u: "
                     "a major version cannot be lowered%s",
                     max_major, max_minor, producer_major, producer_minor,
                     max_major == 0 ? " (use the legacy DLManagedTensor ABI)" : "");
  *major_out = producer_major;
  *minor_out = producer_major < max_major || producer_minor <= max_minor ? producer_minor
                                                                        : max_minor;
  return DLPACKSHIM_OK;
}
