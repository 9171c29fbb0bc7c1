/*
 * shim.h - the C side of the Go example (shim.c), as main.go's cgo preamble
 * sees it. Two rules of cgo shape it:
 *  - A Go function must not be the `release` C calls: the library calls
 *    release(owner) with a void *, and a cgo.Handle passed as a void * is an
 *    integer the Go runtime takes for a bad pointer (it aborts, "invalid
 *    pointer found on stack"). A C trampoline takes the void * and calls Go
 *    with a uintptr_t instead; Go turns it back into the handle.
 *  - dlpackshim_last_error() is per thread, and a goroutine may move to
 *    another thread between two cgo calls. The failing call and the copy of
 *    its message are one C call (one thread): the shim_go_* wrappers.
 */
#ifndef SHIM_GO_H
#define SHIM_GO_H

#include <stddef.h>
#include <stdint.h>

#include <dlpackshim.h>

/* dlpackshim_tensor_new on (kDLCPU, 0) with `owner` (a cgo.Handle) and the
 * trampoline as its release; on failure the message is copied into
 * err[errsize] before the call returns. */
int shim_go_tensor_new(void *data, int32_t ndim, const int64_t *shape, const int64_t *strides,
                       uint8_t code, uint8_t bits, uintptr_t owner,
                       DLManagedTensorVersioned **tensor_out, char *err, size_t errsize);

/* dlpackshim_tensor_clone, with its message copied the same way. */
int shim_go_tensor_clone(const DLTensor *src, DLManagedTensorVersioned **tensor_out, char *err,
                         size_t errsize);

#endif
