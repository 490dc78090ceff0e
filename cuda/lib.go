package cuda

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// library is a shared library opened at run time.
type library struct {
	file   string // the name dlopen found it by
	handle uintptr
}

// openLibrary opens the first of names that the dynamic loader finds. The
// error lists every name tried with the loader's reason for the first.
func openLibrary(what string, names []string) (*library, error) {
	var first error
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return &library{file: n, handle: h}, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, fmt.Errorf("%s not found (tried %s: %v)", what, strings.Join(names, ", "), oneLine(first))
}

// close unloads the library; its bound functions must not be called again.
func (l *library) close() { purego.Dlclose(l.handle) }

// symbol is a function of a library and the Go function variable to bind
// it to.
type symbol struct {
	name string
	fn   any // pointer to a func variable
}

// bind resolves every symbol, failing on the first one the library lacks
// (an older release than the package needs).
func (l *library) bind(syms []symbol) error {
	for _, s := range syms {
		addr, err := purego.Dlsym(l.handle, s.name)
		if err != nil {
			return fmt.Errorf("%s has no %s (too old?)", l.file, s.name)
		}
		purego.RegisterFunc(s.fn, addr)
	}
	return nil
}

// goString copies the NUL-terminated C string at p.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cString returns s as a NUL-terminated byte slice.
func cString(s string) []byte { return append([]byte(s), 0) }

// oneLine joins the lines of err's message, so that reasons stay one line.
func oneLine(err error) string {
	if err == nil {
		return "unknown reason"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// Error is a failed call of a CUDA library function.
type Error struct {
	Func string // the function called, e.g. "cuMemAlloc_v2"
	Code int    // the status it returned
	Name string // the status's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Text string // the library's description of the status, when it has one
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.Func, e.Name, e.Code)
	if e.Text != "" && e.Text != e.Name {
		s += ": " + e.Text
	}
	return s
}
