package deepseek2

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sync/errgroup"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/trace/backend"
)

// littleEndian reports whether the host stores a uint16 low byte first,
// as safetensors does; then BF16 data is used in place.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// decodable reports whether the engine can decode t to float32, and if
// not, why.
func decodable(t *checkpoint.Tensor) error {
	switch t.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
		return nil
	case safetensors.F8E4M3:
		if t.Format == checkpoint.FormatFP8 && t.Scale != nil {
			return nil
		}
		return fmt.Errorf("F8_E4M3 without a block scale (%s.weight_scale_inv or .scale) that fits it", t.Name)
	}
	return fmt.Errorf("dtype %s is not one the engine decodes (BF16, F16, F32, F8_E4M3 with a block scale)", t.DType)
}

// tensorErr wraps err with the shard and tensor it concerns.
func tensorErr(t *checkpoint.Tensor, err error) error {
	return fmt.Errorf("%s: tensor %s: %w", t.Shard.Name, t.Name, err)
}

// readBytes reads bytes [off, off+n) of t's data.
func readBytes(t *checkpoint.Tensor, off, n int64) ([]byte, error) {
	b := make([]byte, n)
	return b, readInto(t, b, off)
}

// readInto reads len(b) bytes at offset off of t's data. Large reads are
// split over a few goroutines: from the page cache a read is a memory
// copy, which one core does at a fraction of the memory bandwidth.
func readInto(t *checkpoint.Tensor, b []byte, off int64) error {
	const piece = 4 << 20
	parts := min(runtime.GOMAXPROCS(0), len(b)/piece)
	if parts <= 1 {
		_, err := t.ReadAt(b, off)
		return err
	}
	var g errgroup.Group
	for i := range parts {
		lo, hi := len(b)*i/parts, len(b)*(i+1)/parts
		g.Go(func() error {
			_, err := t.ReadAt(b[lo:hi], off+int64(lo))
			return err
		})
	}
	return g.Wait()
}

// Large buffers for weights are recycled, so that a forward neither
// allocates nor zeroes its matrices anew.
var bytePool, floatPool sync.Pool

func getBytes(n int) []byte {
	if p, ok := bytePool.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

func getFloats(n int) []float32 {
	if p, ok := floatPool.Get().(*[]float32); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]float32, n)
}

// readMatrix reads the whole 2-D tensor t: BF16 stays BF16 (a backend may
// multiply it as it is), every other format is decoded to float32.
// release hands the buffers back for reuse once the matrix is no longer
// used.
func readMatrix(t *checkpoint.Tensor) (m backend.HostMatrix, release func(), err error) {
	rows, cols := int(t.Shape[0]), int(t.Shape[1])
	m = backend.HostMatrix{Rows: rows, Cols: cols}
	b := getBytes(int(t.Size))
	if err := readInto(t, b, 0); err != nil {
		return m, nil, err
	}
	if t.DType == safetensors.BF16 {
		m.BF16 = bf16Values(b)
		return m, func() { bytePool.Put(&b) }, nil
	}
	f := getFloats(rows * cols)
	err = decodeParallel(f, b, t, rows, cols)
	bytePool.Put(&b)
	if err != nil {
		return m, nil, err
	}
	m.F32 = f
	return m, func() { floatPool.Put(&f) }, nil
}

// bf16Values views little-endian BF16 bytes as uint16 values, in place
// where the host is little-endian.
func bf16Values(b []byte) []uint16 {
	n := len(b) / 2
	if littleEndian && n > 0 && uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
	}
	v := make([]uint16, n)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}

// decodeParallel decodes a whole matrix over the cores, in runs of rows.
func decodeParallel(f []float32, b []byte, t *checkpoint.Tensor, rows, cols int) error {
	const perPart = 1 << 20 // values
	parts := min(runtime.GOMAXPROCS(0), rows*cols/perPart, rows)
	if parts <= 1 {
		return decodeRows(f, b, t, 0, rows)
	}
	size := t.DType.Bits() / 8
	var g errgroup.Group
	for i := range parts {
		lo, hi := rows*i/parts, rows*(i+1)/parts
		g.Go(func() error {
			return decodeRows(f[lo*cols:hi*cols], b[lo*cols*size:hi*cols*size], t, lo, hi)
		})
	}
	return g.Wait()
}

// readRowsF32 decodes rows [r0, r1) of t (a vector counts as one row of
// its length) to float32.
func readRowsF32(t *checkpoint.Tensor, r0, r1 int) ([]float32, error) {
	cols := int(t.Shape[len(t.Shape)-1])
	rowBytes := int64(cols) * int64(t.DType.Bits()) / 8
	b, err := readBytes(t, int64(r0)*rowBytes, int64(r1-r0)*rowBytes)
	if err != nil {
		return nil, err
	}
	out := make([]float32, (r1-r0)*cols)
	return out, decodeRows(out, b, t, r0, r1)
}

// decodeRows decodes the bytes b of rows [r0, r1) of t into out.
func decodeRows(out []float32, b []byte, t *checkpoint.Tensor, r0, r1 int) error {
	cols := int(t.Shape[len(t.Shape)-1])
	if codecs.DecodeFloat(out, b, t.DType) {
		return nil
	}
	if t.DType != safetensors.F8E4M3 {
		return tensorErr(t, decodable(t))
	}
	return decodeFP8(out, b, t, r0, r1, cols)
}

// decodeFP8 multiplies E4M3 rows [r0, r1) of t by their block scales
// (F32 weight_scale_inv as DeepSeek-V3 stores them, or E8M0), as
// model.py's weight_dequant does in float32.
func decodeFP8(out []float32, b []byte, t *checkpoint.Tensor, r0, r1, cols int) error {
	s := t.Scale
	br, bc := int(t.Block[0]), int(t.Block[1])
	sCols := int(s.Shape[1])
	first, last := r0/br, (r1-1)/br
	sb, err := readBytes(s, int64(first*sCols)*int64(s.DType.Bits()/8), int64((last-first+1)*sCols)*int64(s.DType.Bits()/8))
	if err != nil {
		return err
	}
	scale := make([]float32, (last-first+1)*sCols)
	if !codecs.DecodeScales(scale, sb, s.DType) {
		return tensorErr(s, fmt.Errorf("scale dtype %s is neither F32 nor F8_E8M0", s.DType))
	}
	codecs.DequantFP8Rows(out, b, scale, r0, r1, cols, br, bc, sCols)
	return nil
}
