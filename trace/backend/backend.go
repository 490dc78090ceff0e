package backend

import "context"

// Buffer is a float32 array that lives where a Backend computes (host
// memory for the CPU, device memory for a GPU). The model never touches its
// values except through Upload and Download.
type Buffer interface {
	Len() int
}

// Weight is a matrix [Rows, Cols] (output × input features, the layout of
// a linear layer) resident on a Backend, in whatever form its kernels
// prefer.
type Weight interface {
	Rows() int
	Cols() int
}

// Mat is a row-major matrix view of a Buffer: element (i, j) is at
// Off + i·Stride + j. Views let one buffer hold several matrices (the heads
// of a projection, the latent and rotary parts of a cache row).
type Mat struct {
	Buf                     Buffer
	Off, Rows, Cols, Stride int
}

// Whole views a buffer as a rows × cols matrix.
func Whole(b Buffer, rows, cols int) Mat {
	return Mat{Buf: b, Rows: rows, Cols: cols, Stride: cols}
}

// ColRange returns the view of columns [c0, c0+n) of m.
func (m Mat) ColRange(c0, n int) Mat {
	return Mat{Buf: m.Buf, Off: m.Off + c0, Rows: m.Rows, Cols: n, Stride: m.Stride}
}

// RowRange returns the view of rows [r0, r0+n) of m.
func (m Mat) RowRange(r0, n int) Mat {
	return Mat{Buf: m.Buf, Off: m.Off + r0*m.Stride, Rows: n, Cols: m.Cols, Stride: m.Stride}
}

// Backend runs the operations of a decoder layer. It is shaped for device
// memory from the start: the model allocates buffers, uploads inputs and
// weights, queues operations and downloads what it must see on the host
// (router logits, the recorded activations). Operations may run
// asynchronously and report failure late: Sync and Download return the
// first error since the last Sync. Backends serve one caller at a time.
type Backend interface {
	// Name is the backend's kind ("cpu"); Device describes the hardware
	// it runs on, for the trace's environment record.
	Name() string
	Device() string

	// Alloc returns a zeroed buffer of n values.
	Alloc(n int) Buffer
	// Upload copies src into b starting at value off.
	Upload(b Buffer, off int, src []float32)
	// Download copies values [off, off+len(dst)) of b into dst, waiting
	// for every queued operation.
	Download(dst []float32, b Buffer, off int) error
	// Free releases b; it must not be used again.
	Free(b Buffer)

	// LoadWeight makes a weight of the host matrix m; the backend may keep
	// m's slices (a host backend uses them as they are), so the caller
	// must not change them until FreeWeight.
	LoadWeight(m HostMatrix) Weight
	FreeWeight(w Weight)

	// MatMul sets dst = x · wᵀ: dst [m, n], x [m, k], w [n, k].
	MatMul(dst, x Mat, w Weight)
	// RMSNorm sets each row of dst to the row of x times
	// 1/sqrt(mean(row²) + eps), times weight (a buffer of x.Cols values).
	RMSNorm(dst, x Mat, weight Buffer, eps float32)
	// RoPE rotates the consecutive pairs (x[2i], x[2i+1]) of each row of x
	// in place by the angle whose cos and sin are row r/group, column i of
	// cos and sin ([rows/group, x.Cols/2]): group rows (the heads of one
	// token) share a position.
	RoPE(x Mat, cos, sin Buffer, group int)
	// Attention is causal multi-query attention over one sequence of T
	// tokens with one shared key and value row per token (MLA's absorbed
	// form): q [T·heads, d] (row t·heads+h is head h of token t), kv [T, d]
	// the keys, whose first out.Cols columns are also the values;
	// out [T·heads, dv]. Row t attends to kv rows 0..t with
	// softmax(scale · q·k).
	Attention(out, q, kv Mat, heads int, scale float32)
	// SiLUMul sets dst = silu(gate) ⊙ up, elementwise.
	SiLUMul(dst, gate, up Mat)
	// Add sets dst = a + b, elementwise.
	Add(dst, a, b Mat)
	// Copy copies src into dst (same shape).
	Copy(dst, src Mat)
	// Gather copies row rows[i] of src into row i of dst.
	Gather(dst, src Mat, rows []int32)
	// ScatterAdd adds scale[i] times row i of src to row rows[i] of dst.
	ScatterAdd(dst, src Mat, rows []int32, scale []float32)

	// Sync waits for every queued operation and returns the first error.
	Sync() error
}

// Cancellable is implemented by backends whose long operations (a matrix
// product over tens of thousands of rows, attention over a long prompt)
// can stop part way, so that a reader killed in the middle of a layer is
// answered within a fraction of a second rather than when the layer ends.
type Cancellable interface {
	// SetContext makes the operations that follow check ctx between
	// blocks of their work and skip the rest of it once ctx is done (their
	// results are then meaningless); Download and Sync report ctx's error.
	// nil ends it.
	SetContext(ctx context.Context)
}

// HostMatrix is a decoded weight in host memory, row-major [Rows, Cols].
// Exactly one of F32 and BF16 is set: BF16 holds the raw bfloat16 bits of a
// checkpoint matrix, which a backend may multiply without widening it all
// first.
type HostMatrix struct {
	Rows, Cols int
	F32        []float32
	BF16       []uint16
}
