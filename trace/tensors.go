package trace

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

// Activation is one tensor of layers/NN.safetensors: an activation of one
// prompt, [tokens, Cols] of DType.
type Activation struct {
	Name   string // <prompt id>.<kind>
	DType  safetensors.DType
	Rows   int
	Cols   int
	prompt int // index into the prompts
	kind   string
}

// Shape is the tensor's shape.
func (a Activation) Shape() []int64 { return []int64{int64(a.Rows), int64(a.Cols)} }

// RowBytes is the size of one row.
func (a Activation) RowBytes() int64 { return int64(a.Cols) * 4 }

// The activations recorded per prompt, in the order they are listed.
var kinds = []string{"attn_out", "ffn_out", "hidden_out", "kv_latent", "k_pe", "topk_ids", "topk_weights"}

// Activations lists the tensors of layer l's safetensors file; their
// shapes follow from the config and the prompts alone.
func (t *Tracer) Activations(l int) []Activation {
	cfg := t.model.Config
	var out []Activation
	for pi, p := range t.prompts {
		for _, k := range kinds {
			a := Activation{Name: p.ID + "." + k, DType: safetensors.F32, Rows: len(p.TokenIDs), prompt: pi, kind: k}
			switch k {
			case "attn_out", "ffn_out", "hidden_out":
				a.Cols = cfg.Hidden
			case "kv_latent":
				a.Cols = cfg.KVLoRA
			case "k_pe":
				a.Cols = cfg.QKRope
			case "topk_ids", "topk_weights":
				if !cfg.IsMoE(l) {
					continue
				}
				a.Cols = cfg.TopK
				if k == "topk_ids" {
					a.DType = safetensors.I32
				}
			}
			out = append(out, a)
		}
	}
	return out
}

// ReadActivation writes rows [r0, r1) of activation a of layer l into dst
// as little-endian values, running the layer if needed.
func (t *Tracer) ReadActivation(ctx context.Context, l int, a Activation, r0, r1 int, dst []byte) error {
	out, _, err := t.Layer(ctx, l)
	if err != nil {
		return err
	}
	first := 0
	for _, n := range t.lens[:a.prompt] {
		first += n
	}
	if int64(len(dst)) != int64(r1-r0)*a.RowBytes() || r0 < 0 || r1 > a.Rows {
		return fmt.Errorf("%s: rows [%d, %d) into %d bytes", a.Name, r0, r1, len(dst))
	}
	if a.kind == "topk_ids" {
		k := out.Routes.K
		for i, id := range out.Routes.IDs[(first+r0)*k : (first+r1)*k] {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(id))
		}
		return nil
	}
	src := activationValues(out, a.kind)
	for i, v := range src[(first+r0)*a.Cols : (first+r1)*a.Cols] {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return nil
}

// activationValues returns the float32 rows of one kind, every prompt's.
func activationValues(out *deepseek2.Output, kind string) []float32 {
	switch kind {
	case "attn_out":
		return out.AttnOut
	case "ffn_out":
		return out.FFNOut
	case "hidden_out":
		return out.HiddenOut
	case "kv_latent":
		return out.KVLatent
	case "k_pe":
		return out.KPE
	case "topk_weights":
		return out.Routes.Weights
	}
	panic("trace: unknown activation " + kind)
}
