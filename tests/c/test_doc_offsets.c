/*
 * test_doc_offsets.c - the field table of docs/other-languages.md ("Field
 * offsets, for FFIs without structs") against offsetof and sizeof: every row
 * documented is right, and every field of the structs is documented. The
 * file is found under $top_srcdir (make check sets it), else the current
 * directory. The numbers are LP64's: other targets skip (77).
 */
#include <stddef.h>
#include <stdint.h>

#include "check.h"

#define FIELD(type, field) \
  {#type "." #field, offsetof(type, field), sizeof(((type *)0)->field), 0}

static struct {
  const char *name;
  size_t offset, size;
  int seen;
} fields[] = {
    FIELD(DLDevice, device_type),
    FIELD(DLDevice, device_id),
    FIELD(DLDataType, code),
    FIELD(DLDataType, bits),
    FIELD(DLDataType, lanes),
    FIELD(DLTensor, data),
    FIELD(DLTensor, device),
    FIELD(DLTensor, ndim),
    FIELD(DLTensor, dtype),
    FIELD(DLTensor, shape),
    FIELD(DLTensor, strides),
    FIELD(DLTensor, byte_offset),
    FIELD(DLPackVersion, major),
    FIELD(DLPackVersion, minor),
    FIELD(DLManagedTensorVersioned, version),
    FIELD(DLManagedTensorVersioned, manager_ctx),
    FIELD(DLManagedTensorVersioned, deleter),
    FIELD(DLManagedTensorVersioned, flags),
    FIELD(DLManagedTensorVersioned, dl_tensor),
};
enum { N_FIELDS = sizeof fields / sizeof fields[0] };

/* A row "| `Type.field` | offset | size | ... |": 1 and its parts, else 0. */
static int parse_row(const char *line, char *name, size_t cap, long *offset, long *size) {
  if (strncmp(line, "| `", 3) != 0) return 0;
  const char *end = strchr(line + 3, '`');
  if (!end || (size_t)(end - line - 3) >= cap) return 0;
  memcpy(name, line + 3, (size_t)(end - line - 3));
  name[end - line - 3] = '\0';
  if (!strchr(name, '.')) return 0;
  return sscanf(end + 1, " | %ld | %ld |", offset, size) == 2;
}

int main(void) {
  if (sizeof(void *) != 8 || sizeof(long) != 8) {
    printf("test_doc_offsets: the documented offsets are LP64's: skipped\n");
    return 77;
  }
  const char *top = getenv("top_srcdir");
  char path[4096];
  snprintf(path, sizeof path, "%s/docs/other-languages.md", top && *top ? top : ".");
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "test_doc_offsets: cannot open %s\n", path);
    return 99;
  }
  char line[1024], name[128];
  long offset, size;
  int rows = 0;
  while (fgets(line, sizeof line, f)) {
    if (!parse_row(line, name, sizeof name, &offset, &size)) continue;
    rows++;
    int known = 0;
    for (int i = 0; i < N_FIELDS; i++) {
      if (strcmp(fields[i].name, name) != 0) continue;
      known = 1;
      fields[i].seen++;
      if ((size_t)offset != fields[i].offset || (size_t)size != fields[i].size)
        fprintf(stderr, "%s: documented at %ld (%ld bytes), really at %zu (%zu bytes)\n", name,
                offset, size, fields[i].offset, fields[i].size);
      CHECK_EQ(offset, fields[i].offset);
      CHECK_EQ(size, fields[i].size);
    }
    if (!known) fprintf(stderr, "%s: documented, but not a field this test knows\n", name);
    CHECK(known);
  }
  fclose(f);
  for (int i = 0; i < N_FIELDS; i++) {
    if (fields[i].seen != 1) fprintf(stderr, "%s: documented %d times\n", fields[i].name, fields[i].seen);
    CHECK_EQ(fields[i].seen, 1);
  }
  CHECK_EQ(rows, N_FIELDS);
  return check_done("test_doc_offsets");
}
