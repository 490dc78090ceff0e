package inventory

import (
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
)

// scaleGroup is the element count a TP share should be a multiple of so
// that no rank splits a block scale: MXFP4 groups and FP8 block edges.
const scaleGroup = 32

// attentionCuts are the attention projections an engine splits, by the
// end of the weight's module name: column-parallel ones by rows (output
// features), row-parallel ones by columns. DeepSeek-V4 flat names first,
// then Hugging Face (V2/V3) names.
var attentionCuts = []struct{ suffix, axis string }{
	{"attn.wq_b", "rows"},
	{"attn.wo_a", "rows"},
	{"attn.wo_b", "cols"},
	{"self_attn.q_proj", "rows"},
	{"self_attn.q_b_proj", "rows"},
	{"self_attn.kv_b_proj", "rows"},
	{"self_attn.o_proj", "cols"},
}

// tpCut returns the cut of weight t across ranks tensor-parallel ranks, or
// nil when t is not split (replicated tensors, scales, ranks < 2). It
// generalises the seed's table of draft tensors by role: FFN gate/up
// projections by rows, down projections by columns (routed experts by
// their logical, unpacked columns), attention as attentionCuts, and
// embedding and head by vocabulary rows.
func tpCut(t *checkpoint.Tensor, ranks int) *TPCut {
	if ranks < 2 || len(t.Shape) != 2 || t.ScaleOf != nil {
		return nil
	}
	module, ok := strings.CutSuffix(t.Name, ".weight")
	if !ok {
		return nil
	}
	axis := ""
	switch t.Role {
	case checkpoint.RoleRoutedExpert, checkpoint.RoleMTPExpert, checkpoint.RoleSharedExpert, checkpoint.RoleDense:
		switch t.Proj {
		case "w1", "w3":
			axis = "rows"
		case "w2":
			axis = "cols"
			if t.Format == checkpoint.FormatMXFP4 {
				axis = "cols(logical)"
			}
		}
	case checkpoint.RoleAttention:
		for _, c := range attentionCuts {
			if strings.HasSuffix(module, c.suffix) {
				axis = c.axis
				break
			}
		}
	case checkpoint.RoleEmbed, checkpoint.RoleHead:
		axis = "rows(vocab)"
	}
	var n int64
	switch axis {
	case "":
		return nil
	case "rows", "rows(vocab)":
		n = t.Shape[0]
	case "cols":
		n = t.Shape[1]
	case "cols(logical)":
		n = 2 * t.Shape[1] // two E2M1 codes per byte
	}
	per := n / int64(ranks)
	return &TPCut{Ranks: ranks, Axis: axis, PerRank: per, Aligned32: n%int64(ranks) == 0 && per%scaleGroup == 0}
}
