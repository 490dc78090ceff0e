package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
)

// Record is what the inventory knows about one tensor. The JSON field names
// are the seed's.
type Record struct {
	Name  string  `json:"name"`
	File  string  `json:"file"` // the shard, relative to the checkpoint dir
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	// ByteRange is [begin, end) of the data, absolute in File.
	ByteRange [2]int64 `json:"byte_range"`
	NBytes    int64    `json:"nbytes"`
	// NBytesOK says that NBytes is the shape's element count times the
	// dtype's size.
	NBytesOK bool `json:"nbytes_ok"`
	// SHA256 is the hex digest of the data; empty when not hashed.
	SHA256 string `json:"sha256,omitempty"`
	Role   string `json:"role"`
	// Official is the official storage format in the seed's words: mxfp4
	// and fp8 for a quantised weight paired with its scale, e8m0 for an
	// E8M0 tensor, and the dtype in lower case for everything else (a
	// quantised dtype without a fitting scale included, where the seed
	// would have failed).
	Official string `json:"official"`
	// Format is the catalog's finer format (mxfp4_scale, fp8_scale, ...).
	Format string `json:"format"`
	// Scale names the scale tensor of a quantised weight (also when it does
	// not fit: Values.Pair.ShapeOK says so); ScaleOf the weight of a scale.
	Scale   string  `json:"scale,omitempty"`
	ScaleOf string  `json:"scale_of,omitempty"`
	Block   []int64 `json:"block,omitempty"` // FP8 scale block [rows, cols]
	// Values are the value-domain checks; nil when not read.
	Values *Values `json:"values,omitempty"`
	// TP is the planned tensor-parallel cut. The seed calls this field tp2;
	// a key that changes with --tp would break readers, so it is tp here
	// and carries its rank count.
	TP *TPCut `json:"tp,omitempty"`
	// Error says why the data could not be read (the file changed or was
	// truncated); SHA256 and Values are then empty.
	Error string `json:"error,omitempty"`
}

// Values holds the checks of one tensor; exactly one field is set, and it
// is written as the seed's "values" object of that kind.
type Values struct {
	Float *FloatStats // F32, F64, BF16, F16 tensors
	Scale *ScaleStats // E8M0 tensors
	Pair  *PairChecks // a quantised weight with its scale
}

// MarshalJSON writes the set field.
func (v Values) MarshalJSON() ([]byte, error) {
	switch {
	case v.Float != nil:
		return json.Marshal(v.Float)
	case v.Scale != nil:
		return json.Marshal(v.Scale)
	case v.Pair != nil:
		return json.Marshal(v.Pair)
	}
	return []byte("{}"), nil
}

// UnmarshalJSON reads any of the three kinds, told apart by their keys.
func (v *Values) UnmarshalJSON(b []byte) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	*v = Values{}
	switch {
	case keys["shape_ok"] != nil:
		v.Pair = new(PairChecks)
		return json.Unmarshal(b, v.Pair)
	case keys["exp_hist"] != nil:
		v.Scale = new(ScaleStats)
		return json.Unmarshal(b, v.Scale)
	case keys["exact_fp16"] != nil:
		v.Float = new(FloatStats)
		return json.Unmarshal(b, v.Float)
	}
	return nil
}

// FloatStats are the checks of a float tensor.
type FloatStats struct {
	N         int64 `json:"n"`
	NonFinite int64 `json:"nonfinite"`
	// Min, Max, AbsMax and MinNonzeroAbs range over the finite values
	// (where the seed's torch reductions give NaN), null when there are
	// none.
	Min           *float64 `json:"min"`
	Max           *float64 `json:"max"`
	AbsMax        *float64 `json:"absmax"`
	MinNonzeroAbs *float64 `json:"min_nonzero_abs"`
	Zeros         int64    `json:"zeros"`
	// ExactFP16 and ExactBF16 say every value survives a round trip
	// through that type; false when any value is not finite, as in the
	// seed.
	ExactFP16 bool `json:"exact_fp16"`
	ExactBF16 bool `json:"exact_bf16"`
}

// ScaleStats are the checks of an E8M0 tensor (block scales).
type ScaleStats struct {
	N   int64 `json:"n"`
	NaN int64 `json:"nan"` // byte 255
	// ExpMin, ExpMax and ExpHist count the exponents b-127 of the non-NaN
	// bytes (the seed counts byte 255 as exponent 128); ExpMin and ExpMax
	// are null when every byte is NaN.
	ExpMin  *int    `json:"exp_min"`
	ExpMax  *int    `json:"exp_max"`
	ExpHist ExpHist `json:"exp_hist"`
}

// ExpHist counts scale exponents; it is written as the seed's object of
// decimal exponent -> count, in exponent order.
type ExpHist []ExpCount

// ExpCount is one bin of an ExpHist.
type ExpCount struct {
	Exp   int
	Count int64
}

// MarshalJSON writes {"exp": count, ...} in exponent order.
func (h ExpHist) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range h {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%d", strconv.Itoa(c.Exp), c.Count)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads the object MarshalJSON writes.
func (h *ExpHist) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*h = make(ExpHist, 0, len(m))
	for k, n := range m {
		e, err := strconv.Atoi(k)
		if err != nil {
			return fmt.Errorf("exp_hist: key %q is not an exponent", k)
		}
		*h = append(*h, ExpCount{e, n})
	}
	sort.Slice(*h, func(i, j int) bool { return (*h)[i].Exp < (*h)[j].Exp })
	return nil
}

// PairChecks are the checks of a quantised weight read with its scale.
type PairChecks struct {
	// ShapeOK says the scale's shape fits the weight. When it does not,
	// nothing else is checked.
	ShapeOK bool `json:"shape_ok"`
	// CodeHist counts the E2M1 codes 0..15 of an MXFP4 weight.
	CodeHist []int64 `json:"code_hist,omitempty"`
	// NegZeroCodes counts E2M1 code 8 (MXFP4) or E4M3 byte 0x80 (FP8).
	NegZeroCodes int64 `json:"neg_zero_codes"`
	// NaNCodes counts the E4M3 NaN bytes 0x7F and 0xFF (FP8 only).
	NaNCodes *int64 `json:"nan_codes,omitempty"`
	// CodeAbsMax is the largest |E4M3| before scaling (FP8 only).
	CodeAbsMax *float64 `json:"code_absmax,omitempty"`
	// PadRows and PadCols are the elements that fill the last scale block
	// of each dimension (the seed assumes 32; this uses the block).
	PadRows int64    `json:"pad_rows"`
	PadCols int64    `json:"pad_cols"`
	Decoded *Decoded `json:"decoded,omitempty"`
}

// Decoded describes the float32 values of a quantised weight decoded with
// its scale, as codecs decodes them.
type Decoded struct {
	AbsMax        *float64 `json:"absmax"` // over finite values; null when none
	MinNonzeroAbs *float64 `json:"min_nonzero_abs"`
	Zeros         int64    `json:"zeros"`
	// NonFinite counts NaN (a NaN scale or code) and infinite (overflow)
	// values; the seed has no such field.
	NonFinite int64 `json:"nonfinite"`
	ExactFP16 bool  `json:"exact_fp16"` // every value survives float16
	ExactBF16 bool  `json:"exact_bf16"`
}

// TPCut is the cut of a tensor across tensor-parallel ranks.
type TPCut struct {
	Ranks   int    `json:"ranks"`
	Axis    string `json:"axis"`     // rows, cols, cols(logical) (packed FP4 columns), rows(vocab)
	PerRank int64  `json:"per_rank"` // elements of the cut axis per rank
	// Aligned32 says the cut is even and every rank's share is whole
	// 32-element scale groups.
	Aligned32 bool `json:"aligned_32"`
}

// official is the seed's name of a tensor's format.
func official(t *checkpoint.Tensor) string {
	switch t.Format {
	case checkpoint.FormatMXFP4:
		return "mxfp4"
	case checkpoint.FormatFP8:
		return "fp8"
	}
	if t.DType == safetensors.F8E8M0 {
		return "e8m0"
	}
	return strings.ToLower(string(t.DType))
}

// header returns the record of t with everything the headers tell.
func header(cat *checkpoint.Catalog, t *checkpoint.Tensor, tp int) Record {
	r := Record{
		Name:      t.Name,
		File:      t.Shard.Name,
		DType:     string(t.DType),
		Shape:     t.Shape,
		ByteRange: [2]int64{t.Offset, t.Offset + t.Size},
		NBytes:    t.Size,
		Role:      string(t.Role),
		Official:  official(t),
		Format:    string(t.Format),
		TP:        tpCut(t, tp),
	}
	if r.Shape == nil {
		r.Shape = []int64{}
	}
	want, err := safetensors.ByteLen(t.DType, t.Shape)
	r.NBytesOK = err == nil && want == t.Size
	if t.Scale != nil {
		r.Scale = t.Scale.Name
	} else if s := unfitScale(cat, t); s != nil {
		r.Scale = s.Name
	}
	if t.ScaleOf != nil {
		r.ScaleOf = t.ScaleOf.Name
	}
	if t.Block != [2]int64{} {
		r.Block = []int64{t.Block[0], t.Block[1]}
	}
	return r
}

// unfitScale returns the scale tensor that a quantised weight t has by
// name but that the catalog did not pair with it (its shape or dtype does
// not fit), or nil.
func unfitScale(cat *checkpoint.Catalog, t *checkpoint.Tensor) *checkpoint.Tensor {
	if t.Scale != nil || !quantised(t.DType) {
		return nil
	}
	base, ok := strings.CutSuffix(t.Name, ".weight")
	if !ok {
		return nil
	}
	for _, name := range []string{base + ".scale", t.Name + "_scale_inv"} {
		if s := cat.Tensor(name); s != nil && s.ScaleOf == nil {
			return s
		}
	}
	return nil
}
