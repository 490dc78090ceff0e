package inventory

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/x448/float16"
)

// This file computes what a record should say the slow and obvious way:
// decode every element to a float, then count, compare and reduce. The
// inventory counts encodings and folds them instead; the tests hold the
// two to each other.

// rawData reads tensor name of a checkpoint dir straight from its shard,
// parsing the header anew.
type rawData struct {
	dir   string
	files map[string][]byte
	heads map[string]*safetensors.Header
}

func newRawData(dir string) *rawData {
	return &rawData{dir: dir, files: map[string][]byte{}, heads: map[string]*safetensors.Header{}}
}

func (r *rawData) tensor(t *testing.T, shard, name string) []byte {
	t.Helper()
	b, ok := r.files[shard]
	if !ok {
		var err error
		if b, err = os.ReadFile(filepath.Join(r.dir, shard)); err != nil {
			t.Fatal(err)
		}
		h, err := safetensors.ParseHeader(b[8:8+binary.LittleEndian.Uint64(b)], int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		r.files[shard], r.heads[shard] = b, h
	}
	h := r.heads[shard]
	e, ok := h.Find(name)
	if !ok {
		t.Fatalf("%s: no tensor %s", shard, name)
	}
	return b[h.DataStart+e.Begin : h.DataStart+e.End]
}

func refSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// refExact reports whether v is exact in float16 and in bfloat16: NaN is
// not, infinities are, a finite value must survive float16 and have no
// bits below bfloat16's mantissa.
func refExact(v float64) (f16, bf16 bool) {
	if math.IsNaN(v) {
		return false, false
	}
	f := float32(v)
	if float64(f) != v {
		return false, false
	}
	return float16.Fromfloat32(f).Float32() == f, math.Float32bits(f)&0xffff == 0
}

// refAcc reduces values one at a time.
type refAcc struct {
	n, nonfinite, zeros     int64
	min, max, absMax, minNZ *float64
	notF16, notBF16         bool
}

func (a *refAcc) add(v float64) {
	a.n++
	f16, bf16 := refExact(v)
	a.notF16, a.notBF16 = a.notF16 || !f16, a.notBF16 || !bf16
	if math.IsNaN(v) || math.IsInf(v, 0) {
		a.nonfinite++
		return
	}
	if v == 0 {
		a.zeros++
	}
	if a.min == nil || v < *a.min {
		a.min = ptr(v)
	}
	if a.max == nil || v > *a.max {
		a.max = ptr(v)
	}
	if a.absMax == nil || math.Abs(v) > *a.absMax {
		a.absMax = ptr(math.Abs(v))
	}
	if v != 0 && (a.minNZ == nil || math.Abs(v) < *a.minNZ) {
		a.minNZ = ptr(math.Abs(v))
	}
}

func (a *refAcc) floatStats() *FloatStats {
	return &FloatStats{N: a.n, NonFinite: a.nonfinite, Min: a.min, Max: a.max, AbsMax: a.absMax, MinNonzeroAbs: a.minNZ,
		Zeros: a.zeros, ExactFP16: !a.notF16 && a.nonfinite == 0, ExactBF16: !a.notBF16 && a.nonfinite == 0}
}

func (a *refAcc) decoded() *Decoded {
	return &Decoded{AbsMax: a.absMax, MinNonzeroAbs: a.minNZ, Zeros: a.zeros, NonFinite: a.nonfinite,
		ExactFP16: !a.notF16, ExactBF16: !a.notBF16}
}

// refValues computes the checks of catalogued tensor tn from the raw bytes
// of its data (and of its scale, for a quantised weight).
func refValues(tn *checkpoint.Tensor, data, scale []byte) *Values {
	var a refAcc
	switch {
	case tn.Scale != nil && tn.Format == checkpoint.FormatMXFP4:
		dec := make([]float32, 2*len(data))
		codecs.DecodeMXFP4(dec, data, scale)
		for _, v := range dec {
			a.add(float64(v))
		}
		hist := make([]int64, 16)
		for _, b := range data {
			hist[b&15]++
			hist[b>>4]++
		}
		rows := tn.Shape[len(tn.Shape)-2]
		return &Values{Pair: &PairChecks{ShapeOK: true, CodeHist: hist, NegZeroCodes: hist[8],
			PadRows: (32 - rows%32) % 32, PadCols: (32 - 2*tn.Shape[len(tn.Shape)-1]%32) % 32, Decoded: a.decoded()}}
	case tn.Scale != nil && tn.Format == checkpoint.FormatFP8:
		rows, cols := tn.Shape[0], tn.Shape[1]
		br, bc := tn.Block[0], tn.Block[1]
		sc := tn.Scale.Shape[1]
		var nan, negZero int64
		var codeMax float64
		for r := range rows {
			for c := range cols {
				b := data[r*cols+c]
				w := codecs.E4M3ToFloat32(b)
				var s float32
				if tn.Scale.DType == safetensors.F8E8M0 {
					s = codecs.E8M0ToFloat32(scale[(r/br)*sc+c/bc])
				} else {
					s = math.Float32frombits(binary.LittleEndian.Uint32(scale[4*((r/br)*sc+c/bc):]))
				}
				a.add(float64(w * s))
				switch {
				case b == 0x7f || b == 0xff:
					nan++
				case b == 0x80:
					negZero++
				}
				if !math.IsNaN(float64(w)) {
					codeMax = math.Max(codeMax, math.Abs(float64(w)))
				}
			}
		}
		return &Values{Pair: &PairChecks{ShapeOK: true, NegZeroCodes: negZero, NaNCodes: &nan, CodeAbsMax: &codeMax,
			PadRows: (br - rows%br) % br, PadCols: (bc - cols%bc) % bc, Decoded: a.decoded()}}
	case tn.DType == safetensors.F8E8M0:
		s := &ScaleStats{N: int64(len(data)), ExpHist: ExpHist{}}
		counts := map[int]int64{}
		for _, b := range data {
			if b == 255 {
				s.NaN++
				continue
			}
			e := int(b) - 127
			counts[e]++
			if s.ExpMin == nil || e < *s.ExpMin {
				s.ExpMin = ptr(e)
			}
			if s.ExpMax == nil || e > *s.ExpMax {
				s.ExpMax = ptr(e)
			}
		}
		for e := -127; e <= 127; e++ {
			if counts[e] > 0 {
				s.ExpHist = append(s.ExpHist, ExpCount{e, counts[e]})
			}
		}
		return &Values{Scale: s}
	case tn.DType == safetensors.BF16:
		for i := 0; i < len(data); i += 2 {
			a.add(float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(data[i:])) << 16)))
		}
	case tn.DType == safetensors.F16:
		for i := 0; i < len(data); i += 2 {
			a.add(float64(float16.Frombits(binary.LittleEndian.Uint16(data[i:])).Float32()))
		}
	case tn.DType == safetensors.F32:
		for i := 0; i < len(data); i += 4 {
			a.add(float64(math.Float32frombits(binary.LittleEndian.Uint32(data[i:]))))
		}
	case tn.DType == safetensors.F64:
		for i := 0; i < len(data); i += 8 {
			a.add(math.Float64frombits(binary.LittleEndian.Uint64(data[i:])))
		}
	default:
		return nil
	}
	return &Values{Float: a.floatStats()}
}
