package cuda

import (
	"fmt"
	"sync"
)

// runtimeLibs are the three libraries a Backend needs, loaded once per
// process.
type runtimeLibs struct {
	drv     *driver
	nv      *nvrtc
	blas    *cublas
	devices int
}

// loadRuntime opens the driver, then the newest NVRTC and cuBLAS that it
// can run, and counts the devices.
var loadRuntime = sync.OnceValues(func() (*runtimeLibs, error) {
	drv, err := openDriver()
	if err != nil {
		return nil, err
	}
	var n int32
	if err := drv.check("cuDeviceGetCount", drv.cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("no CUDA device (driver CUDA %s)", versionString(drv.version))
	}
	major := drv.version / 1000
	nv, err := openNVRTC(major)
	if err != nil {
		return nil, err
	}
	blas, err := openCublas(major)
	if err != nil {
		return nil, err
	}
	return &runtimeLibs{drv: drv, nv: nv, blas: blas, devices: int(n)}, nil
})

// Available reports in one line why CUDA cannot be used on this machine (no
// driver library, no device, a driver too old, no NVRTC or cuBLAS that it
// can run), or nil when NewBackend can start.
func Available() error {
	_, err := loadRuntime()
	return err
}
