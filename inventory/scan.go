package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
)

const (
	// chunkBytes is how much of a tensor one pread fetches: large enough
	// that the system call vanishes, small enough per worker.
	chunkBytes = 4 << 20
	// stepBytes is how much of a chunk is hashed and then checked while it
	// is still in the core's cache.
	stepBytes = 128 << 10
)

// scanner reads tensors, hashing and checking each buffer in one pass. One
// scanner serves one worker; its tables are reused from tensor to tensor.
type scanner struct {
	buf, sbuf []byte
	quant     *quantScan
	half      *halfHist
	bytes     byteHist
	progress  *Progress
	read      int64 // tensor bytes read since the count was last reset
}

func newScanner(p *Progress) *scanner {
	return &scanner{buf: make([]byte, chunkBytes), quant: newQuantScan(), half: new(halfHist), progress: p}
}

// scanned is what reading a tensor gave.
type scanned struct {
	sha    string
	values *Values
}

// scan hashes t and checks its values. A tensor of a quantised dtype whose
// scale does not fit (unfit) is hashed and reported with shape_ok false.
func (s *scanner) scan(ctx context.Context, t *checkpoint.Tensor, unfit bool) (scanned, error) {
	var (
		v   Values
		sha string
		err error
		acc valueAcc
	)
	switch {
	case t.Scale != nil && t.Format == checkpoint.FormatMXFP4:
		sha, err = s.scanMXFP4(ctx, t)
		v.Pair = s.quant.checks(t)
	case t.Scale != nil && t.Format == checkpoint.FormatFP8:
		sha, err = s.scanFP8(ctx, t)
		v.Pair = s.quant.checks(t)
	case t.DType == safetensors.F8E8M0:
		sha, err = s.stream(ctx, t, 1, nil, s.bytes.add)
		v.Scale = s.bytes.scaleStats()
	case t.DType == safetensors.BF16 || t.DType == safetensors.F16:
		sha, err = s.stream(ctx, t, 2, nil, s.half.add)
		decode := codecs.BF16ToFloat32
		if t.DType == safetensors.F16 {
			decode = codecs.F16ToFloat32
		}
		s.half.fold(&acc, decode)
		v.Float = acc.floatStats()
	case t.DType == safetensors.F32:
		sha, err = s.stream(ctx, t, 4, nil, acc.addF32)
		v.Float = acc.floatStats()
	case t.DType == safetensors.F64:
		sha, err = s.stream(ctx, t, 8, nil, acc.addF64)
		v.Float = acc.floatStats()
	default:
		sha, err = s.stream(ctx, t, 1, nil, func([]byte) {})
		if unfit {
			v.Pair = &PairChecks{ShapeOK: false}
		}
	}
	if err != nil {
		return scanned{}, err
	}
	res := scanned{sha: sha}
	if v != (Values{}) {
		res.values = &v
	}
	return res, nil
}

// stream reads t in chunks of whole units (blocks or row strips) and, for
// each step of a chunk, hashes it and passes it to check. prepare, if set,
// is called with each chunk's tensor offset and length before its steps,
// to read what the checks need beside the data (scales).
func (s *scanner) stream(ctx context.Context, t *checkpoint.Tensor, unit int64,
	prepare func(off, n int64) error, check func(p []byte)) (string, error) {
	h := sha256.New()
	if t.Size == 0 {
		return hex.EncodeToString(h.Sum(nil)), nil // and unit may be 0
	}
	chunk := max(unit, chunkBytes/unit*unit)
	step := max(unit, stepBytes/unit*unit)
	if int64(len(s.buf)) < chunk {
		s.buf = make([]byte, chunk)
	}
	for off := int64(0); off < t.Size; off += chunk {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n := min(chunk, t.Size-off)
		p := s.buf[:n]
		if err := readFull(t, p, off); err != nil {
			return "", err
		}
		if prepare != nil {
			if err := prepare(off, n); err != nil {
				return "", err
			}
		}
		for len(p) > 0 {
			q := p[:min(step, int64(len(p)))]
			h.Write(q)
			check(q)
			p = p[len(q):]
			s.read += int64(len(q))
			s.progress.add(int64(len(q)))
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readFull reads bytes [off, off+len(p)) of tensor t.
func readFull(t *checkpoint.Tensor, p []byte, off int64) error {
	_, err := t.ReadAt(p, off)
	return err
}

// scanMXFP4 reads an MXFP4 weight with its scale: weight byte i belongs to
// block i/16, whose scale is byte i/16 of the scale tensor.
func (s *scanner) scanMXFP4(ctx context.Context, t *checkpoint.Tensor) (string, error) {
	const blockBytes = codecs.MXBlock / 2
	q := s.quant
	q.reset(fp4Format)
	var chunkOff, pos int64 // tensor offsets of the chunk and of its next step
	return s.stream(ctx, t, blockBytes,
		func(off, n int64) error {
			chunkOff, pos = off, off
			s.sbuf = grow(s.sbuf, n/blockBytes)
			return readFull(t.Scale, s.sbuf, off/blockBytes)
		},
		func(p []byte) {
			first := (pos - chunkOff) / blockBytes
			q.count(p)
			q.blocksE8M0(p, s.sbuf[first:first+int64(len(p))/blockBytes], blockBytes)
			pos += int64(len(p))
		})
}

// scanFP8 reads an FP8 weight [rows, cols] with its block scale
// [ceil(rows/br), ceil(cols/bc)] (E8M0 or F32), a strip of br rows at a
// time.
func (s *scanner) scanFP8(ctx context.Context, t *checkpoint.Tensor) (string, error) {
	cols := t.Shape[1]
	br, bc := t.Block[0], t.Block[1]
	q := s.quant
	q.reset(fp8Format)
	e8m0 := t.Scale.DType == safetensors.F8E8M0
	srowBytes := t.Scale.Shape[1] * int64(t.Scale.DType.Bits()/8)
	var row, srow0 int64 // the next row to check; the first scale row read
	return s.stream(ctx, t, br*cols,
		func(off, n int64) error {
			row = off / cols
			srow0 = row / br
			srows := (n/cols + br - 1) / br
			s.sbuf = grow(s.sbuf, srows*srowBytes)
			return readFull(t.Scale, s.sbuf, srow0*srowBytes)
		},
		func(p []byte) {
			q.count(p)
			if br == 1 && cols%bc == 0 && e8m0 {
				// Row blocks (Engram tables): the step's scales are
				// consecutive, one per bc bytes.
				first := (row - srow0) * srowBytes
				q.blocksE8M0(p, s.sbuf[first:first+int64(len(p))/bc], int(bc))
				row += int64(len(p)) / cols
				return
			}
			for ; len(p) > 0; p = p[cols:] {
				scales := s.sbuf[(row/br-srow0)*srowBytes:][:srowBytes]
				if e8m0 {
					q.blocksE8M0(p[:cols], scales, int(bc))
				} else {
					q.blocksF32(p[:cols], scales, int(bc))
				}
				row++
			}
		})
}

func grow(b []byte, n int64) []byte {
	if int64(cap(b)) < n {
		return make([]byte, n)
	}
	return b[:n]
}
