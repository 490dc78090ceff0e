package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"unsafe"

	"github.com/dsfs/dsfs/trace/backend"
)

// Precision is how a Backend multiplies matrices.
type Precision int

const (
	// FP32 multiplies float32 values with float32 accumulation
	// (cublasSgemm, TF32 off), so results stay within float32 rounding of
	// the CPU backend's. BF16 weights are widened on the device.
	FP32 Precision = iota
	// BF16 rounds both inputs of every product to bfloat16 and accumulates
	// in float32 on the tensor cores (cublasGemmEx); BF16 checkpoint
	// weights are used as stored. Everything else stays float32.
	BF16
)

func (p Precision) String() string {
	if p == BF16 {
		return "bf16"
	}
	return "fp32"
}

// ParsePrecision reads "fp32" or "bf16".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "fp32":
		return FP32, nil
	case "bf16":
		return BF16, nil
	}
	return 0, fmt.Errorf("precision %q: want fp32 or bf16", s)
}

// Options configure NewBackend. The zero value uses device 0 in float32.
type Options struct {
	Device    int // device ordinal
	Precision Precision
	// CacheDir holds compiled kernels; "" means os.UserCacheDir()/dsfs/cuda.
	// A cache that cannot be read or written only costs compilations.
	CacheDir string
	// Log receives warnings (NVRTC warnings, cache problems); nil discards
	// them.
	Log *slog.Logger
}

// The kernels the backend launches, one name per extern "C" function of
// the *.cu files.
const (
	kAdd        = "add2d"
	kCopy       = "copy2d"
	kSiLUMul    = "silu_mul"
	kWiden      = "bf16_to_f32"
	kNarrow     = "f32_to_bf16"
	kRMSNorm    = "rmsnorm"
	kRoPE       = "rope"
	kSoftmax    = "softmax_causal"
	kGather     = "gather_rows"
	kScatterAdd = "scatter_add_rows"
	kRoute      = "route"
	kActQuant   = "act_quant"
	kHadamard   = "hadamard_rows"
	kSparseAttn = "sparse_attn_sink"
	kFP4E4M3    = "fp4_quant_e4m3"
)

// launched lists the kernel names above, for the test that checks them
// against the sources.
var launched = []string{kAdd, kCopy, kSiLUMul, kWiden, kNarrow, kRMSNorm, kRoPE, kSoftmax, kGather, kScatterAdd, kRoute,
	kActQuant, kHadamard, kSparseAttn, kFP4E4M3}

const (
	threads   = 256     // threads per block of every kernel
	maxBlocks = 1 << 16 // grid of the elementwise kernels, which loop over the rest
	// attentionScores bounds the score matrix of one attention chunk, in
	// values (256 MiB).
	attentionScores = 1 << 26
	// attentionTokens bounds the query tokens of one chunk, so that the
	// causal mask saves most of the work on long sequences: a chunk only
	// multiplies the keys its last token sees.
	attentionTokens = 256
	maxKernelArgs   = 20
)

// Backend runs backend.Backend's operations on one CUDA device. Buffers are device
// memory; operations are queued on one stream and their errors reported by
// the next Sync or Download (the first error since the last Sync; later
// operations are skipped until then). A view outside its buffer or
// mismatched shapes panic, as with the CPU backend. Like every
// backend.Backend, it serves one caller at a time.
type Backend struct {
	rt     *runtimeLibs
	opt    Options
	log    *slog.Logger
	cache  kernelCache
	target target

	dev     int32
	ctx     uintptr // the device's primary context, retained
	stream  uintptr
	blas    uintptr // cuBLAS handle
	modules []uintptr
	kernels map[string]uintptr
	alloc   allocator
	desc    string

	// args holds the arguments of one kernel launch: cuLaunchKernel reads
	// an array of pointers to them, so the block is pinned.
	args *launchArgs
	pin  runtime.Pinner

	err error // first failure since the last Sync
}

type launchArgs struct {
	vals [maxKernelArgs]uint64
	ptrs [maxKernelArgs]unsafe.Pointer
}

var _ backend.Backend = (*Backend)(nil)

// NewBackend starts a backend on the device opt names: it creates a stream
// and a cuBLAS handle and loads the kernels, compiling those not in the
// cache. The error says why CUDA cannot be used (see Available) or what
// failed.
func NewBackend(opt Options) (*Backend, error) {
	rt, err := loadRuntime()
	if err != nil {
		return nil, err
	}
	if opt.Precision != FP32 && opt.Precision != BF16 {
		return nil, fmt.Errorf("precision %d is neither FP32 nor BF16", opt.Precision)
	}
	if opt.Device < 0 || opt.Device >= rt.devices {
		return nil, fmt.Errorf("CUDA device %d does not exist (%d present)", opt.Device, rt.devices)
	}
	b := &Backend{rt: rt, opt: opt, log: opt.Log, kernels: make(map[string]uintptr)}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.cache.dir = opt.CacheDir
	if b.cache.dir == "" {
		if b.cache.dir, err = defaultCacheDir(); err != nil {
			b.log.Warn("cuda: no kernel cache", "err", err)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.open(); err != nil {
		b.Close() // the error from open says what went wrong
		return nil, fmt.Errorf("CUDA device %d: %w", opt.Device, err)
	}
	return b, nil
}

// open sets up the device; the caller has locked the OS thread.
func (b *Backend) open() error {
	d := b.rt.drv
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&b.dev, int32(b.opt.Device))); err != nil {
		return err
	}
	var major, minor, sms int32
	var mem uint64
	name := make([]byte, 256)
	for _, c := range []struct {
		fn string
		r  cuResult
	}{
		{"cuDeviceGetAttribute", d.cuDeviceGetAttribute(&major, attrCCMajor, b.dev)},
		{"cuDeviceGetAttribute", d.cuDeviceGetAttribute(&minor, attrCCMinor, b.dev)},
		{"cuDeviceGetAttribute", d.cuDeviceGetAttribute(&sms, attrMultiprocessors, b.dev)},
		{"cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), b.dev)},
		{"cuDeviceTotalMem_v2", d.cuDeviceTotalMem(&mem, b.dev)},
	} {
		if err := d.check(c.fn, c.r); err != nil {
			return err
		}
	}
	cc := int(major*10 + minor)
	var err error
	if b.target, err = b.rt.nv.targetFor(cc); err != nil {
		return err
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&b.ctx, b.dev)); err != nil {
		return err
	}
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(b.ctx)); err != nil {
		return err
	}
	if err := d.check("cuStreamCreate", d.cuStreamCreate(&b.stream, streamNonBlocking)); err != nil {
		return err
	}
	bl := b.rt.blas
	if err := bl.check("cublasCreate_v2", bl.cublasCreate(&b.blas)); err != nil {
		return err
	}
	var blasVersion int32
	for _, c := range []struct {
		fn string
		r  int32
	}{
		{"cublasSetStream_v2", bl.cublasSetStream(b.blas, b.stream)},
		{"cublasSetMathMode", bl.cublasSetMathMode(b.blas, cublasDefaultMath)},
		{"cublasGetVersion_v2", bl.cublasGetVersion(b.blas, &blasVersion)},
	} {
		if err := bl.check(c.fn, c.r); err != nil {
			return err
		}
	}
	b.args = new(launchArgs)
	b.pin.Pin(b.args)
	for i := range b.args.ptrs {
		b.args.ptrs[i] = unsafe.Pointer(&b.args.vals[i])
	}
	if err := b.loadKernels(); err != nil {
		return err
	}
	code := "cubin"
	if b.target.ptx {
		code = "PTX"
	}
	b.desc = fmt.Sprintf("%s (sm_%d, %d SMs, %.0f GiB), driver CUDA %s, NVRTC %s (%s %s), cuBLAS %d.%d.%d, %s products",
		goString(&name[0]), cc, sms, float64(mem)/(1<<30), versionString(d.version), b.rt.nv.version(),
		b.target, code, blasVersion/10000, blasVersion/100%100, blasVersion%100, b.opt.Precision)
	return nil
}

// loadKernels loads every embedded kernel file as a module, from the cache
// or compiled now. An image that the driver rejects is compiled afresh
// once, in case the cache held a bad one.
func (b *Backend) loadKernels() error {
	srcs, err := sources()
	if err != nil {
		return err
	}
	d := b.rt.drv
	for _, s := range srcs {
		key := cacheKey(s.text, b.target.options(), b.rt.nv.version())
		img, cached := b.cache.get(key)
		if !cached {
			if img, err = b.compile(s, key); err != nil {
				return err
			}
		}
		var mod uintptr
		r := d.cuModuleLoadData(&mod, unsafe.Pointer(&img[0]))
		if r != cuSuccess && cached {
			b.log.Warn("cuda: cached kernel image rejected, recompiling", "source", s.name, "err", d.check("cuModuleLoadData", r))
			if img, err = b.compile(s, key); err != nil {
				return err
			}
			r = d.cuModuleLoadData(&mod, unsafe.Pointer(&img[0]))
		}
		if err := d.check("cuModuleLoadData", r); err != nil {
			return fmt.Errorf("%s for %s: %w", s.name, b.target, err)
		}
		b.modules = append(b.modules, mod)
		for _, k := range s.kernels {
			var f uintptr
			if err := d.check("cuModuleGetFunction", d.cuModuleGetFunction(&f, mod, k)); err != nil {
				return fmt.Errorf("%s: kernel %s: %w", s.name, k, err)
			}
			b.kernels[k] = f
		}
	}
	return nil
}

// compile builds s for the device and stores the image under key.
func (b *Backend) compile(s source, key string) ([]byte, error) {
	img, log, err := b.rt.nv.compile(s.name, s.text, b.target)
	if err != nil {
		return nil, err
	}
	if log != "" {
		b.log.Warn("cuda: NVRTC warnings", "source", s.name, "log", log)
	}
	if err := b.cache.put(key, img); err != nil {
		b.log.Warn("cuda: kernel not cached", "source", s.name, "err", err)
	}
	return img, nil
}

// Close waits for queued work and releases the device resources. The
// backend must not be used afterwards.
func (b *Backend) Close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := b.rt.drv
	var errs []error
	keep := func(fn string, r cuResult) { errs = append(errs, d.check(fn, r)) }
	if b.ctx != 0 {
		keep("cuCtxSetCurrent", d.cuCtxSetCurrent(b.ctx))
	}
	if b.stream != 0 {
		keep("cuStreamSynchronize", d.cuStreamSynchronize(b.stream))
	}
	for _, p := range b.alloc.drain() {
		keep("cuMemFree_v2", d.cuMemFree(p))
	}
	for _, m := range b.modules {
		keep("cuModuleUnload", d.cuModuleUnload(m))
	}
	if b.blas != 0 {
		errs = append(errs, b.rt.blas.check("cublasDestroy_v2", b.rt.blas.cublasDestroy(b.blas)))
	}
	if b.stream != 0 {
		keep("cuStreamDestroy_v2", d.cuStreamDestroy(b.stream))
	}
	if b.ctx != 0 {
		keep("cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease(b.dev))
	}
	b.pin.Unpin()
	b.modules, b.kernels, b.ctx, b.stream, b.blas = nil, nil, 0, 0, 0
	return errors.Join(errs...)
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "cuda" }

// Device implements backend.Backend: the GPU, its driver and libraries, and
// the precision of the matrix products.
func (b *Backend) Device() string { return b.desc }

// Precision returns the precision of the backend's matrix products.
func (b *Backend) Precision() Precision { return b.opt.Precision }

// enter makes the backend's context current on this goroutine's OS
// thread, which it keeps until the returned function runs. The driver's
// current context is per thread, and goroutines move between threads.
func (b *Backend) enter() func() {
	runtime.LockOSThread()
	b.fail(b.rt.drv.check("cuCtxSetCurrent", b.rt.drv.cuCtxSetCurrent(b.ctx)))
	return runtime.UnlockOSThread
}

// fail records err if it is the first since the last Sync.
func (b *Backend) fail(err error) {
	if b.err == nil && err != nil {
		b.err = err
	}
}

// takeErr returns and clears the recorded error.
func (b *Backend) takeErr() error {
	err := b.err
	b.err = nil
	return err
}

// Sync implements backend.Backend.
func (b *Backend) Sync() error {
	defer b.enter()()
	if b.err == nil {
		b.fail(b.rt.drv.check("cuStreamSynchronize", b.rt.drv.cuStreamSynchronize(b.stream)))
	}
	return b.takeErr()
}

// buffer is a device array of float32 values.
type buffer struct {
	ptr uint64 // 0 for an empty buffer or a failed allocation
	n   int
}

func (x *buffer) Len() int { return x.n }

// weight is a matrix in device memory, float32 or bfloat16 as the
// backend's precision wants.
type weight struct {
	rows, cols int
	ptr        uint64
	bf16       bool
}

func (w *weight) Rows() int { return w.rows }
func (w *weight) Cols() int { return w.cols }

func (w *weight) bytes() uint64 {
	if w.bf16 {
		return 2 * uint64(w.rows*w.cols)
	}
	return 4 * uint64(w.rows*w.cols)
}

func devBuffer(b backend.Buffer) *buffer {
	x, ok := b.(*buffer)
	if !ok {
		panic(fmt.Sprintf("cuda: buffer %T is not from a CUDA backend", b))
	}
	return x
}

func devWeight(w backend.Weight) *weight {
	x, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("cuda: weight %T is not from a CUDA backend", w))
	}
	return x
}

// at returns the device address of m's first element, after checking that
// m lies inside its buffer.
func at(m backend.Mat) uint64 {
	buf := devBuffer(m.Buf)
	if m.Rows == 0 || m.Cols == 0 {
		return buf.ptr
	}
	end := m.Off + (m.Rows-1)*m.Stride + m.Cols
	if m.Off < 0 || m.Cols > m.Stride && m.Rows > 1 || end > buf.n {
		panic(fmt.Sprintf("cuda: view %+v outside a buffer of %d values", m, buf.n))
	}
	return buf.ptr + 4*uint64(m.Off)
}

func sameShape(op string, a, b backend.Mat) {
	if a.Rows != b.Rows || a.Cols != b.Cols {
		panic(fmt.Sprintf("cuda: %s of %dx%d and %dx%d", op, a.Rows, a.Cols, b.Rows, b.Cols))
	}
}

// devAlloc returns a device block of at least n bytes (0 for n = 0, or
// after a failure, which it records). When the device is out of memory it
// returns the cached blocks to the driver and tries again.
func (b *Backend) devAlloc(n uint64) uint64 {
	if n == 0 || b.err != nil {
		return 0
	}
	c := sizeClass(n)
	if p := b.alloc.take(c); p != 0 {
		return p
	}
	d := b.rt.drv
	var p uint64
	r := d.cuMemAlloc(&p, c)
	if r == cuErrorOutOfMemory && b.alloc.cached > 0 {
		b.fail(d.check("cuStreamSynchronize", d.cuStreamSynchronize(b.stream)))
		for _, q := range b.alloc.drain() {
			b.fail(d.check("cuMemFree_v2", d.cuMemFree(q)))
		}
		r = d.cuMemAlloc(&p, c)
	}
	if err := d.check("cuMemAlloc_v2", r); err != nil {
		b.fail(fmt.Errorf("%w (%d bytes)", err, c))
		return 0
	}
	return p
}

// devFree returns block p of n bytes to the cache.
func (b *Backend) devFree(p, n uint64) {
	if p != 0 {
		b.alloc.put(p, sizeClass(n))
	}
}

// upload queues a copy of n host bytes at src to dst. From pageable
// memory the driver stages the bytes before it returns, so src may change
// as soon as it does.
func (b *Backend) upload(dst uint64, src unsafe.Pointer, n uint64) {
	if b.err == nil && n > 0 {
		b.fail(b.rt.drv.check("cuMemcpyHtoDAsync_v2", b.rt.drv.cuMemcpyHtoDAsync(dst, src, n, b.stream)))
	}
}

// download copies n device bytes at src to dst once the queued work is
// done, and reports the first error since the last Sync.
func (b *Backend) download(dst unsafe.Pointer, src uint64, n uint64) error {
	d := b.rt.drv
	if b.err == nil && n > 0 {
		b.fail(d.check("cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync(dst, src, n, b.stream)))
	}
	if b.err == nil {
		b.fail(d.check("cuStreamSynchronize", d.cuStreamSynchronize(b.stream)))
	}
	return b.takeErr()
}

// hostBytes is the address and size in bytes of a host slice.
func hostBytes[T int32 | float32 | uint16](s []T) (unsafe.Pointer, uint64) {
	if len(s) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&s[0]), uint64(len(s)) * uint64(unsafe.Sizeof(s[0]))
}

// temp uploads n host bytes at src into a new device block, which the
// caller frees with devFree(p, n).
func (b *Backend) temp(src unsafe.Pointer, n uint64) uint64 {
	p := b.devAlloc(n)
	b.upload(p, src, n)
	return p
}

// launch queues kernel name on grid blocks of block threads. Arguments are
// device addresses (uint64), int (passed as a C int), int64 (a long long)
// and float32.
func (b *Backend) launch(name string, grid, block int, args ...any) {
	if b.err != nil || grid == 0 {
		return
	}
	f, ok := b.kernels[name]
	if !ok {
		panic("cuda: no kernel " + name)
	}
	for i, a := range args {
		switch v := a.(type) {
		case uint64:
			b.args.vals[i] = v
		case int:
			if v != int(int32(v)) {
				panic(fmt.Sprintf("cuda: %s argument %d: %d overflows a C int", name, i, v))
			}
			b.args.vals[i] = uint64(uint32(int32(v)))
		case int64:
			b.args.vals[i] = uint64(v)
		case float32:
			b.args.vals[i] = uint64(math.Float32bits(v))
		default:
			panic(fmt.Sprintf("cuda: %s argument %d of type %T", name, i, a))
		}
	}
	r := b.rt.drv.cuLaunchKernel(f, uint32(grid), 1, 1, uint32(block), 1, 1, 0, b.stream, unsafe.Pointer(&b.args.ptrs[0]), nil)
	b.fail(b.rt.drv.check("cuLaunchKernel("+name+")", r))
}

// each launches an elementwise kernel over n elements.
func (b *Backend) each(name string, n int, args ...any) {
	b.launch(name, min((n+threads-1)/threads, maxBlocks), threads, args...)
}
