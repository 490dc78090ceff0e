package cuda

import (
	"fmt"
	"strings"
	"unsafe"
)

// cublasNames are the cuBLAS libraries tried, newest first.
var cublasNames = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}

// cuBLAS constants used here (cublas_api.h, library_types.h).
const (
	cublasOpN = 0
	cublasOpT = 1

	cublasDefaultMath = 0 // no TF32: float32 products stay float32

	cudaR32F  = 0  // CUDA_R_32F
	cudaR16BF = 14 // CUDA_R_16BF

	cublasCompute32F  = 68 // CUBLAS_COMPUTE_32F
	cublasGemmDefault = -1 // CUBLAS_GEMM_DEFAULT

	libMajorVersion = 0 // MAJOR_VERSION, for cublasGetProperty
)

// cublasStatusNames names cublasStatus_t values.
var cublasStatusNames = map[int32]string{
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// cublas is the cuBLAS library.
type cublas struct {
	lib   *library
	major int

	cublasGetProperty func(prop int32, v *int32) int32
	cublasCreate      func(h *uintptr) int32
	cublasDestroy     func(h uintptr) int32
	cublasGetVersion  func(h uintptr, v *int32) int32
	cublasSetStream   func(h uintptr, s uintptr) int32
	cublasSetMathMode func(h uintptr, mode int32) int32
	cublasSgemm       func(h uintptr, ta, tb, m, n, k int32, alpha *float32, a uint64, lda int32, b uint64, ldb int32, beta *float32, c uint64, ldc int32) int32
	cublasGemmEx      func(h uintptr, ta, tb, m, n, k int32, alpha unsafe.Pointer, a uint64, aType, lda int32, b uint64, bType, ldb int32, beta unsafe.Pointer, c uint64, cType, ldc int32, compute, algo int32) int32
}

// openCublas loads the newest cuBLAS whose major version is at most
// maxMajor: a newer one refuses to start on an older driver.
func openCublas(maxMajor int) (*cublas, error) {
	var reasons []string
	for _, name := range cublasNames {
		lib, err := openLibrary("cuBLAS", []string{name})
		if err != nil {
			continue
		}
		c := &cublas{lib: lib}
		err = lib.bind([]symbol{
			{"cublasGetProperty", &c.cublasGetProperty},
			{"cublasCreate_v2", &c.cublasCreate},
			{"cublasDestroy_v2", &c.cublasDestroy},
			{"cublasGetVersion_v2", &c.cublasGetVersion},
			{"cublasSetStream_v2", &c.cublasSetStream},
			{"cublasSetMathMode", &c.cublasSetMathMode},
			{"cublasSgemm_v2", &c.cublasSgemm},
			{"cublasGemmEx", &c.cublasGemmEx},
		})
		if err == nil {
			var v int32
			err = c.check("cublasGetProperty", c.cublasGetProperty(libMajorVersion, &v))
			c.major = int(v)
		}
		if err == nil && c.major > maxMajor {
			err = fmt.Errorf("%s is cuBLAS %d, newer than the driver's CUDA %d", name, c.major, maxMajor)
		}
		if err != nil {
			lib.close()
			reasons = append(reasons, err.Error())
			continue
		}
		return c, nil
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "tried "+strings.Join(cublasNames, ", "))
	}
	return nil, fmt.Errorf("cuBLAS not usable (%s)", strings.Join(reasons, "; "))
}

// check turns a cublasStatus_t into nil or an *Error naming fn.
func (c *cublas) check(fn string, r int32) error {
	if r == 0 {
		return nil
	}
	name, ok := cublasStatusNames[r]
	if !ok {
		name = fmt.Sprintf("cublasStatus %d", r)
	}
	return &Error{Func: fn, Code: int(r), Name: name}
}
