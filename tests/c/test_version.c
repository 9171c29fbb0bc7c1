/* test_version.c - the version string and DLPack version negotiation. */
#include "check.h"

static void test_version_string_is_package_version(void) {
  const char *v = dlpackshim_version_string();
  REQUIRE(v != NULL);
#ifdef EXPECTED_VERSION
  CHECK(strcmp(v, EXPECTED_VERSION) == 0);
#endif
  int major, minor, patch;
  CHECK(sscanf(v, "%d.%d.%d", &major, &minor, &patch) == 3);
}

static void test_dlpack_version_is_1_3(void) {
  uint32_t major = 0, minor = 0;
  dlpackshim_dlpack_version(&major, &minor);
  CHECK_EQ(major, 1);
  CHECK_EQ(minor, 3);
  CHECK_EQ(DLPACK_MAJOR_VERSION, 1); /* the header agrees */
  CHECK_EQ(DLPACK_MINOR_VERSION, 3);
  dlpackshim_dlpack_version(NULL, &minor); /* either pointer may be NULL */
  dlpackshim_dlpack_version(&major, NULL);
  dlpackshim_dlpack_version(NULL, NULL);
  CHECK_EQ(major, 1);
}

/* The smaller of the two versions, within one major. */
static void test_negotiate_takes_the_smaller_version(void) {
  uint32_t ma = 9, mi = 9;
  CHECK_OK(dlpackshim_negotiate_version(1, 3, 1, 3, &ma, &mi));
  CHECK(ma == 1 && mi == 3);
  CHECK_OK(dlpackshim_negotiate_version(1, 3, 1, 1, &ma, &mi));
  CHECK(ma == 1 && mi == 1);
  CHECK_OK(dlpackshim_negotiate_version(1, 0, 1, 3, &ma, &mi));
  CHECK(ma == 1 && mi == 0);
  /* NumPy answers max_version (2, 0) with 1.x. */
  CHECK_OK(dlpackshim_negotiate_version(1, 3, 2, 0, &ma, &mi));
  CHECK(ma == 1 && mi == 3);
  CHECK_OK(dlpackshim_negotiate_version(1, 3, 1, 99, &ma, &mi));
  CHECK(ma == 1 && mi == 3);
  CHECK_OK(dlpackshim_negotiate_version(0, 8, 1, 0, &ma, &mi));
  CHECK(ma == 0 && mi == 8);
}

static void test_negotiate_cannot_lower_a_major(void) {
  uint32_t ma = 9, mi = 9;
  CHECK_FAILS(dlpackshim_negotiate_version(1, 3, 0, 8, &ma, &mi), DLPACKSHIM_ERR_VERSION,
              "legacy");
  CHECK(ma == 9 && mi == 9); /* untouched on failure */
  CHECK_FAILS(dlpackshim_negotiate_version(2, 0, 1, 3, &ma, &mi), DLPACKSHIM_ERR_VERSION,
              "2.0");
  CHECK_FAILS(dlpackshim_negotiate_version(1, 3, 1, 3, NULL, &mi),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "major_out");
}

int main(void) {
  test_version_string_is_package_version();
  test_dlpack_version_is_1_3();
  test_negotiate_takes_the_smaller_version();
  test_negotiate_cannot_lower_a_major();
  return check_done("test_version");
}
