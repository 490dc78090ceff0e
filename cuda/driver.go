package cuda

import (
	"fmt"
	"unsafe"
)

// cuResult is a CUresult, the status of every driver API call.
type cuResult int32

// Driver API constants used here (cuda.h).
const (
	cuSuccess          cuResult = 0
	cuErrorOutOfMemory cuResult = 2
	cuErrorNoDevice    cuResult = 100

	attrMultiprocessors = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrCCMajor         = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrCCMinor         = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

	streamNonBlocking = 1 // CU_STREAM_NON_BLOCKING
)

// minDriver is the oldest driver API version this package runs on: CUDA
// 11.0, the first with the primary-context calls it uses (_v2).
const minDriver = 11000

// driver is libcuda.so.1, the CUDA driver API.
type driver struct {
	lib     *library
	version int // cuDriverGetVersion: 1000·major + 10·minor

	cuInit                    func(flags uint32) cuResult
	cuDriverGetVersion        func(v *int32) cuResult
	cuGetErrorName            func(r cuResult, s **byte) cuResult
	cuGetErrorString          func(r cuResult, s **byte) cuResult
	cuDeviceGetCount          func(n *int32) cuResult
	cuDeviceGet               func(d *int32, ordinal int32) cuResult
	cuDeviceGetName           func(name *byte, n int32, d int32) cuResult
	cuDeviceGetAttribute      func(v *int32, attr int32, d int32) cuResult
	cuDeviceTotalMem          func(bytes *uint64, d int32) cuResult
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, d int32) cuResult
	cuDevicePrimaryCtxRelease func(d int32) cuResult
	cuCtxSetCurrent           func(ctx uintptr) cuResult
	cuStreamCreate            func(s *uintptr, flags uint32) cuResult
	cuStreamDestroy           func(s uintptr) cuResult
	cuStreamSynchronize       func(s uintptr) cuResult
	cuMemAlloc                func(p *uint64, bytes uint64) cuResult
	cuMemFree                 func(p uint64) cuResult
	cuMemsetD32Async          func(p uint64, v uint32, n uint64, s uintptr) cuResult
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, bytes uint64, s uintptr) cuResult
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uint64, bytes uint64, s uintptr) cuResult
	cuModuleLoadData          func(m *uintptr, image unsafe.Pointer) cuResult
	cuModuleUnload            func(m uintptr) cuResult
	cuModuleGetFunction       func(f *uintptr, m uintptr, name string) cuResult
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, shmem uint32, s uintptr, params, extra unsafe.Pointer) cuResult
}

// openDriver loads the driver library, initialises it and checks its
// version.
func openDriver() (*driver, error) {
	lib, err := openLibrary("CUDA driver", []string{"libcuda.so.1", "libcuda.so"})
	if err != nil {
		return nil, err
	}
	d := &driver{lib: lib}
	if err := lib.bind([]symbol{
		{"cuInit", &d.cuInit},
		{"cuDriverGetVersion", &d.cuDriverGetVersion},
		{"cuGetErrorName", &d.cuGetErrorName},
		{"cuGetErrorString", &d.cuGetErrorString},
		{"cuDeviceGetCount", &d.cuDeviceGetCount},
		{"cuDeviceGet", &d.cuDeviceGet},
		{"cuDeviceGetName", &d.cuDeviceGetName},
		{"cuDeviceGetAttribute", &d.cuDeviceGetAttribute},
		{"cuDeviceTotalMem_v2", &d.cuDeviceTotalMem},
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain},
		{"cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease},
		{"cuCtxSetCurrent", &d.cuCtxSetCurrent},
		{"cuStreamCreate", &d.cuStreamCreate},
		{"cuStreamDestroy_v2", &d.cuStreamDestroy},
		{"cuStreamSynchronize", &d.cuStreamSynchronize},
		{"cuMemAlloc_v2", &d.cuMemAlloc},
		{"cuMemFree_v2", &d.cuMemFree},
		{"cuMemsetD32Async", &d.cuMemsetD32Async},
		{"cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync},
		{"cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync},
		{"cuModuleLoadData", &d.cuModuleLoadData},
		{"cuModuleUnload", &d.cuModuleUnload},
		{"cuModuleGetFunction", &d.cuModuleGetFunction},
		{"cuLaunchKernel", &d.cuLaunchKernel},
	}); err != nil {
		return nil, fmt.Errorf("CUDA driver: %w", err)
	}
	var v int32
	if err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return nil, err
	}
	d.version = int(v)
	if d.version < minDriver {
		return nil, fmt.Errorf("CUDA driver supports CUDA %s; this needs %s or newer", versionString(d.version), versionString(minDriver))
	}
	if r := d.cuInit(0); r != cuSuccess {
		if r == cuErrorNoDevice {
			return nil, fmt.Errorf("no CUDA device (cuInit: %s)", d.errorName(r))
		}
		return nil, d.check("cuInit", r)
	}
	return d, nil
}

// versionString formats a CUDA version number (1000·major + 10·minor).
func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// errorName is the CUresult's name, or its number when the driver does not
// know it.
func (d *driver) errorName(r cuResult) string {
	var p *byte
	if d.cuGetErrorName(r, &p) != cuSuccess || p == nil {
		return fmt.Sprintf("CUresult %d", r)
	}
	return goString(p)
}

// check turns a CUresult into nil or an *Error naming fn.
func (d *driver) check(fn string, r cuResult) error {
	if r == cuSuccess {
		return nil
	}
	e := &Error{Func: fn, Code: int(r), Name: d.errorName(r)}
	var p *byte
	if d.cuGetErrorString(r, &p) == cuSuccess {
		e.Text = goString(p)
	}
	return e
}
