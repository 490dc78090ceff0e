// Package cuda runs the decoder-layer operations of trace/backend's
// Backend on an NVIDIA GPU. It is pure Go: the CUDA driver (libcuda.so.1), NVRTC and
// cuBLAS are opened at run time with purego, so the program builds and
// runs without CUDA, and a machine without a GPU simply gets an error from
// Available or NewBackend saying why.
//
// The kernels are CUDA C embedded in the binary (the *.cu files beside this
// one). NewBackend compiles them with NVRTC for the device's architecture
// (a cubin when NVRTC knows the architecture, else PTX of the newest one it
// knows, which the driver compiles) and caches the images on disk, keyed by
// the source, the options and NVRTC's version. Matrix products go through
// cuBLAS: float32 (cublasSgemm) or bfloat16 inputs with float32
// accumulation (cublasGemmEx), as Options.Precision says.
//
// NewBackend returns a *Backend, a backend.Backend; trace selects it for
// --device cuda, or auto when it starts. Beyond backend.Backend, its Route
// method runs the MoE router (softmax or sigmoid scores, the correction
// bias, group-limited top-k, margins, weight normalisation) on the device.
//
// Every call into the three libraries is checked; a failure is an *Error
// naming the function and the library's name and text for the status.
// Operations of a Backend are queued on one stream and report failures at
// the next Sync or Download, as backend.Backend specifies.
package cuda
