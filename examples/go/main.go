// Command dlpackshim-example uses libdlpackshim from Go through cgo; make
// check runs it (examples/go/run.sh). Three rules of cgo decide its shape:
//
//   - The data lives in C memory (C.malloc): C keeps the pointer after the
//     call returns, which Go memory must never be.
//   - The tensor's owner is a cgo.Handle, and its release is shim.c's C
//     trampoline, which calls goRelease with the handle as an integer; a Go
//     function passed as the release aborts the Go runtime.
//   - The message of a failed call is copied by shim.c's wrappers in the
//     failing call itself: a goroutine may run its next cgo call on another
//     thread, and dlpackshim_last_error() is per thread.
package main

/*
#cgo LDFLAGS: -ldlpackshim
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/cgo"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// owner is what a tensor's release hands back: the C memory under the tensor.
type owner struct {
	data     unsafe.Pointer
	released atomic.Int32
}

// goRelease runs on whichever thread frees the tensor (shim.c's trampoline
// calls it): it frees the memory, counts the call and forgets the handle.
//
//export goRelease
func goRelease(handle C.uintptr_t) {
	h := cgo.Handle(handle)
	o := h.Value().(*owner)
	h.Delete()
	C.free(o.data)
	o.data = nil
	o.released.Add(1)
}

type checks struct{ failed int }

func (c *checks) check(ok bool, what string) {
	if ok {
		fmt.Println("  [ok]", what)
	} else {
		c.failed++
		fmt.Println("  [FAIL]", what)
	}
}

// newTensor makes a float32 tensor over data (C memory) owned by o: the
// status, and the library's message when it failed.
func newTensor(data unsafe.Pointer, shape, strides []int64, o *owner) (
	*C.DLManagedTensorVersioned, int, string) {
	var t *C.DLManagedTensorVersioned
	var st *C.int64_t
	if strides != nil {
		st = (*C.int64_t)(unsafe.Pointer(&strides[0]))
	}
	h := cgo.NewHandle(o)
	msg := make([]byte, C.DLPACKSHIM_ERROR_MAX)
	// shape and strides are Go memory without Go pointers, read during the
	// call only (the library copies them): cgo allows that.
	status := int(C.shim_go_tensor_new(data, C.int32_t(len(shape)),
		(*C.int64_t)(unsafe.Pointer(&shape[0])), st, C.kDLFloat, 32, C.uintptr_t(h), &t,
		(*C.char)(unsafe.Pointer(&msg[0])), C.size_t(len(msg))))
	if status != C.DLPACKSHIM_OK {
		h.Delete() // a failed call never calls release: the handle is still ours
		return nil, status, cString(msg)
	}
	return t, status, ""
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// floats is n float32 in C memory, holding 0, 1, 2, ...
func floats(n int) unsafe.Pointer {
	p := C.malloc(C.size_t(4 * n))
	values := unsafe.Slice((*float32)(p), n)
	for i := range values {
		values[i] = float32(i)
	}
	return p
}

func int64s(p *C.int64_t, n C.int32_t) []int64 {
	return append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(p)), int(n))...)
}

func tensorOverCMemory(c *checks) {
	fmt.Println("a 3x4 float32 tensor over C memory, owned through a cgo.Handle:")
	o := &owner{data: floats(12)}
	t, status, msg := newTensor(o.data, []int64{3, 4}, nil, o)
	c.check(status == 0 && t != nil, "dlpackshim_tensor_new returned 0 "+msg)
	if t == nil {
		return
	}
	dl := &t.dl_tensor
	c.check(t.version.major == 1 && t.version.minor == 3, "version 1.3")
	c.check(dl.ndim == 2 && fmt.Sprint(int64s(dl.shape, dl.ndim)) == "[3 4]", "shape [3 4]")
	c.check(fmt.Sprint(int64s(dl.strides, dl.ndim)) == "[4 1]", "strides made explicit: [4 1]")
	c.check(C.dlpackshim_tensor_validate(dl, t.flags) == 0, "dlpackshim_tensor_validate: 0")
	var nbytes C.int64_t
	var layout C.int32_t
	c.check(C.dlpackshim_tensor_nbytes(dl, t.flags, &nbytes) == 0 && nbytes == 48, "48 bytes")
	c.check(C.dlpackshim_tensor_layout(dl, &layout) == 0 && layout&C.DLPACKSHIM_LAYOUT_C != 0,
		"row-major (layout & DLPACKSHIM_LAYOUT_C)")
	elems := unsafe.Slice((*float32)(dl.data), 12)
	c.check(elems[1*4+2] == 6, "element [1, 2] read through the strides is 6")

	// The deleter may run on any thread: free the tensor on another goroutine.
	done := make(chan struct{})
	go func() {
		C.dlpackshim_tensor_free(t)
		close(done)
	}()
	<-done
	c.check(o.released.Load() == 1 && o.data == nil, "freeing it called the release once")
}

func failedNewKeepsTheOwner(c *checks) {
	fmt.Println("dlpackshim_tensor_new with a negative extent:")
	o := &owner{data: floats(4)}
	t, status, msg := newTensor(o.data, []int64{-4}, nil, o)
	fmt.Printf("  status %d: %s\n", status, msg)
	c.check(t == nil && status == C.DLPACKSHIM_ERR_INVALID_TENSOR, "DLPACKSHIM_ERR_INVALID_TENSOR")
	c.check(strings.Contains(msg, "shape[0] is -4"), "the copied message names the extent")
	c.check(o.released.Load() == 0, "the release was not called: the memory is still ours")
	C.free(o.data)
}

func cloneOfATransposedView(c *checks) {
	fmt.Println("a compact copy (dlpackshim_tensor_clone) of a transposed view:")
	o := &owner{data: floats(12)}
	view, status, msg := newTensor(o.data, []int64{4, 3}, []int64{1, 4}, o)
	c.check(status == 0, "the view of the 3x4 data as 4x3 with strides [1 4] "+msg)
	if view == nil {
		return
	}
	var clone *C.DLManagedTensorVersioned
	errbuf := make([]byte, C.DLPACKSHIM_ERROR_MAX)
	status = int(C.shim_go_tensor_clone(&view.dl_tensor, &clone,
		(*C.char)(unsafe.Pointer(&errbuf[0])), C.size_t(len(errbuf))))
	c.check(status == 0 && clone != nil, "dlpackshim_tensor_clone returned 0 "+cString(errbuf))
	if clone != nil {
		dl := &clone.dl_tensor
		got := unsafe.Slice((*float32)(dl.data), 12)
		c.check(fmt.Sprint(int64s(dl.strides, dl.ndim)) == "[3 1]", "the copy is row-major")
		c.check(got[0] == 0 && got[1] == 4 && got[2] == 8 && got[3] == 1, "it holds the transpose")
		c.check(clone.flags&C.DLPACKSHIM_FLAG_IS_COPIED != 0, "flagged IS_COPIED")
		C.dlpackshim_tensor_free(clone)
	}
	status = int(C.shim_go_tensor_clone(&view.dl_tensor, nil,
		(*C.char)(unsafe.Pointer(&errbuf[0])), C.size_t(len(errbuf))))
	c.check(status == C.DLPACKSHIM_ERR_INVALID_ARGUMENT && strings.Contains(cString(errbuf),
		"tensor_out is NULL"), "a NULL out-pointer: _INVALID_ARGUMENT, and the message says so")
	C.dlpackshim_tensor_free(view)
	c.check(o.released.Load() == 1, "the view's release ran once; the copy owned its own memory")
}

// Goroutines move between threads; each failure's message, copied in the
// failing call, is still its own.
func messagesAcrossGoroutines(c *checks) {
	const goroutines, calls = 32, 200
	fmt.Printf("%d goroutines x %d failing calls, each message copied in its call:\n",
		goroutines, calls)
	var wrong atomic.Int64
	var wg sync.WaitGroup
	data := floats(1)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				extent := -int64(g*calls + i + 1)
				o := &owner{data: data}
				_, status, msg := newTensor(data, []int64{extent}, nil, o)
				if status != C.DLPACKSHIM_ERR_INVALID_TENSOR ||
					!strings.Contains(msg, fmt.Sprintf("shape[0] is %d", extent)) {
					wrong.Add(1)
				}
				runtime.Gosched() // invite the scheduler to move us
			}
		}(g)
	}
	wg.Wait()
	C.free(data)
	c.check(wrong.Load() == 0, fmt.Sprintf("every message named its own call's extent (%d wrong)",
		wrong.Load()))
}

func main() {
	var lib C.uint32_t
	var minor C.uint32_t
	C.dlpackshim_dlpack_version(&lib, &minor)
	fmt.Printf("dlpackshim %s (DLPack %d.%d) from %s\n",
		C.GoString(C.dlpackshim_version_string()), lib, minor, runtime.Version())
	c := &checks{}
	tensorOverCMemory(c)
	failedNewKeepsTheOwner(c)
	cloneOfATransposedView(c)
	messagesAcrossGoroutines(c)
	if c.failed > 0 {
		fmt.Printf("%d checks failed\n", c.failed)
		os.Exit(1)
	}
	fmt.Println("all checks passed")
}
