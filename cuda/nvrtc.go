package cuda

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"unsafe"
)

// nvrtcNames are the NVRTC libraries tried, newest first. The soname is
// libnvrtc.so.MAJOR from CUDA 12 on; CUDA 11.2-11.8 all use
// libnvrtc.so.11.2 (Debian's libnvrtc11.2 package is 11.8).
var nvrtcNames = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}

// nvrtc is the runtime compiler library.
type nvrtc struct {
	lib          *library
	major, minor int
	archs        []int // the architectures it compiles for, e.g. 80, 90

	nvrtcVersion              func(major, minor *int32) int32
	nvrtcGetErrorString       func(r int32) string
	nvrtcGetNumSupportedArchs func(n *int32) int32
	nvrtcGetSupportedArchs    func(archs *int32) int32
	nvrtcCreateProgram        func(prog *uintptr, src, name string, nHeaders int32, headers, includeNames unsafe.Pointer) int32
	nvrtcDestroyProgram       func(prog *uintptr) int32
	nvrtcCompileProgram       func(prog uintptr, nOpts int32, opts **byte) int32
	nvrtcGetProgramLogSize    func(prog uintptr, n *uint64) int32
	nvrtcGetProgramLog        func(prog uintptr, log *byte) int32
	nvrtcGetPTXSize           func(prog uintptr, n *uint64) int32
	nvrtcGetPTX               func(prog uintptr, ptx *byte) int32
	nvrtcGetCUBINSize         func(prog uintptr, n *uint64) int32
	nvrtcGetCUBIN             func(prog uintptr, cubin *byte) int32
}

// openNVRTC loads the newest NVRTC whose major version is at most
// maxMajor (0: any). A newer NVRTC than the driver emits code the driver
// cannot load, so the backend passes the driver's major version.
func openNVRTC(maxMajor int) (*nvrtc, error) {
	var reasons []string
	for _, name := range nvrtcNames {
		lib, err := openLibrary("NVRTC", []string{name})
		if err != nil {
			continue
		}
		n, err := bindNVRTC(lib)
		if err == nil && maxMajor > 0 && n.major > maxMajor {
			err = fmt.Errorf("%s is NVRTC %s, newer than the driver's CUDA %d", name, n.version(), maxMajor)
		}
		if err != nil {
			lib.close()
			reasons = append(reasons, err.Error())
			continue
		}
		return n, nil
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "tried "+strings.Join(nvrtcNames, ", "))
	}
	return nil, fmt.Errorf("NVRTC not usable (%s)", strings.Join(reasons, "; "))
}

func bindNVRTC(lib *library) (*nvrtc, error) {
	n := &nvrtc{lib: lib}
	if err := lib.bind([]symbol{
		{"nvrtcVersion", &n.nvrtcVersion},
		{"nvrtcGetErrorString", &n.nvrtcGetErrorString},
		{"nvrtcGetNumSupportedArchs", &n.nvrtcGetNumSupportedArchs},
		{"nvrtcGetSupportedArchs", &n.nvrtcGetSupportedArchs},
		{"nvrtcCreateProgram", &n.nvrtcCreateProgram},
		{"nvrtcDestroyProgram", &n.nvrtcDestroyProgram},
		{"nvrtcCompileProgram", &n.nvrtcCompileProgram},
		{"nvrtcGetProgramLogSize", &n.nvrtcGetProgramLogSize},
		{"nvrtcGetProgramLog", &n.nvrtcGetProgramLog},
		{"nvrtcGetPTXSize", &n.nvrtcGetPTXSize},
		{"nvrtcGetPTX", &n.nvrtcGetPTX},
		{"nvrtcGetCUBINSize", &n.nvrtcGetCUBINSize},
		{"nvrtcGetCUBIN", &n.nvrtcGetCUBIN},
	}); err != nil {
		return nil, err
	}
	var major, minor, count int32
	if err := n.check("nvrtcVersion", n.nvrtcVersion(&major, &minor)); err != nil {
		return nil, err
	}
	n.major, n.minor = int(major), int(minor)
	if err := n.check("nvrtcGetNumSupportedArchs", n.nvrtcGetNumSupportedArchs(&count)); err != nil {
		return nil, err
	}
	archs := make([]int32, max(count, 1))
	if err := n.check("nvrtcGetSupportedArchs", n.nvrtcGetSupportedArchs(&archs[0])); err != nil {
		return nil, err
	}
	for _, a := range archs[:count] {
		n.archs = append(n.archs, int(a))
	}
	slices.Sort(n.archs)
	return n, nil
}

// version is NVRTC's version as text, part of every cache key.
func (n *nvrtc) version() string { return fmt.Sprintf("%d.%d", n.major, n.minor) }

// check turns an nvrtcResult into nil or an *Error naming fn.
func (n *nvrtc) check(fn string, r int32) error {
	if r == 0 {
		return nil
	}
	s := n.nvrtcGetErrorString(r)
	return &Error{Func: fn, Code: int(r), Name: s}
}

// target is what a compilation produces: a cubin for one architecture, or
// PTX for a virtual one that the driver compiles when it loads it.
type target struct {
	arch int  // e.g. 90
	ptx  bool // compute_arch PTX instead of an sm_arch cubin
}

func (t target) String() string {
	if t.ptx {
		return fmt.Sprintf("compute_%d", t.arch)
	}
	return fmt.Sprintf("sm_%d", t.arch)
}

// options are the NVRTC options for t. Fused multiply-adds are left on
// (NVRTC's default); the kernels that must round each product use the
// explicit _rn intrinsics.
func (t target) options() []string {
	return []string{"-arch=" + t.String()}
}

// targetFor chooses what to build for a device of compute capability cc:
// its own cubin when NVRTC knows the architecture, else PTX of the newest
// architecture NVRTC knows below it.
func (n *nvrtc) targetFor(cc int) (target, error) {
	if slices.Contains(n.archs, cc) {
		return target{arch: cc}, nil
	}
	best := 0
	for _, a := range n.archs {
		if a <= cc {
			best = a
		}
	}
	if best == 0 {
		return target{}, fmt.Errorf("NVRTC %s cannot compile for sm_%d (it knows %v)", n.version(), cc, n.archs)
	}
	return target{arch: best, ptx: true}, nil
}

// CompileError is a kernel source that NVRTC rejected, with its log.
type CompileError struct {
	Source string // the embedded file
	Target string
	Log    string
	Err    error
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("compiling %s for %s: %v\n%s", e.Source, e.Target, e.Err, strings.TrimSpace(e.Log))
}

func (e *CompileError) Unwrap() error { return e.Err }

// compile builds src (named name in messages) for t. It returns the image
// (a cubin, or NUL-terminated PTX) and NVRTC's log, which holds the
// warnings of a successful compilation.
func (n *nvrtc) compile(name, src string, t target) (image []byte, log string, err error) {
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", n.nvrtcCreateProgram(&prog, src, name, 0, nil, nil)); err != nil {
		return nil, "", err
	}
	defer func() {
		if derr := n.check("nvrtcDestroyProgram", n.nvrtcDestroyProgram(&prog)); err == nil {
			err = derr
		}
	}()

	// NVRTC reads an array of C strings: pin the Go strings it points to.
	var pin runtime.Pinner
	defer pin.Unpin()
	opts := t.options()
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		b := cString(o)
		pin.Pin(&b[0])
		ptrs[i] = &b[0]
	}
	res := n.nvrtcCompileProgram(prog, int32(len(ptrs)), &ptrs[0])
	log, logErr := n.log(prog)
	if err := n.check("nvrtcCompileProgram", res); err != nil {
		return nil, log, &CompileError{Source: name, Target: t.String(), Log: log, Err: err}
	}
	if logErr != nil {
		return nil, "", logErr
	}
	size, get, fn := n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN, "nvrtcGetCUBIN"
	if t.ptx {
		size, get, fn = n.nvrtcGetPTXSize, n.nvrtcGetPTX, "nvrtcGetPTX"
	}
	var sz uint64
	if err := n.check(fn+"Size", size(prog, &sz)); err != nil {
		return nil, log, err
	}
	if sz == 0 {
		return nil, log, fmt.Errorf("%s: %s gave an empty image for %s", name, fn, t)
	}
	image = make([]byte, sz)
	if err := n.check(fn, get(prog, &image[0])); err != nil {
		return nil, log, err
	}
	return image, log, nil
}

// log returns the program's compilation log without its trailing NUL.
func (n *nvrtc) log(prog uintptr) (string, error) {
	var sz uint64
	if err := n.check("nvrtcGetProgramLogSize", n.nvrtcGetProgramLogSize(prog, &sz)); err != nil {
		return "", err
	}
	if sz <= 1 {
		return "", nil
	}
	b := make([]byte, sz)
	if err := n.check("nvrtcGetProgramLog", n.nvrtcGetProgramLog(prog, &b[0])); err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\x00"), nil
}
