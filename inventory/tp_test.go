package inventory

import (
	"reflect"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
)

func TestTPCut(t *testing.T) {
	expert := func(proj string) checkpoint.Tensor {
		return checkpoint.Tensor{Role: checkpoint.RoleRoutedExpert, Proj: proj, Format: checkpoint.FormatMXFP4, DType: safetensors.I8}
	}
	cases := []struct {
		name  string
		t     checkpoint.Tensor
		shape []int64
		ranks int
		want  *TPCut
	}{
		{"layers.3.ffn.experts.7.w1.weight", expert("w1"), []int64{2304, 2560}, 2, &TPCut{2, "rows", 1152, true}},
		{"layers.3.ffn.experts.7.w3.weight", expert("w3"), []int64{2304, 2560}, 8, &TPCut{8, "rows", 288, true}},
		{"layers.3.ffn.experts.7.w2.weight", expert("w2"), []int64{5120, 1152}, 2, &TPCut{2, "cols(logical)", 1152, true}},
		// 2304 over 16 ranks is 144 elements: not whole 32-element groups.
		{"layers.3.ffn.experts.7.w2.weight", expert("w2"), []int64{5120, 1152}, 16, &TPCut{16, "cols(logical)", 144, false}},
		{"layers.3.ffn.experts.7.w1.scale", checkpoint.Tensor{Role: checkpoint.RoleRoutedExpert, Proj: "w1", ScaleOf: &checkpoint.Tensor{}},
			[]int64{2304, 160}, 2, nil},
		{"layers.0.ffn.shared_experts.w2.weight", checkpoint.Tensor{Role: checkpoint.RoleSharedExpert, Proj: "w2", Format: checkpoint.FormatFP8},
			[]int64{5120, 2304}, 2, &TPCut{2, "cols", 1152, true}},
		{"layers.0.ffn.w1.weight", checkpoint.Tensor{Role: checkpoint.RoleDense, Proj: "w1"}, []int64{6144, 5120}, 3, &TPCut{3, "rows", 2048, true}},
		{"layers.0.attn.wq_b.weight", checkpoint.Tensor{Role: checkpoint.RoleAttention}, []int64{16384, 1024}, 2, &TPCut{2, "rows", 8192, true}},
		{"layers.0.attn.wo_b.weight", checkpoint.Tensor{Role: checkpoint.RoleAttention}, []int64{5120, 8192}, 2, &TPCut{2, "cols", 4096, true}},
		{"layers.0.attn.wq_a.weight", checkpoint.Tensor{Role: checkpoint.RoleAttention}, []int64{1024, 5120}, 2, nil},
		{"model.layers.0.self_attn.o_proj.weight", checkpoint.Tensor{Role: checkpoint.RoleAttention}, []int64{7168, 16384}, 2, &TPCut{2, "cols", 8192, true}},
		{"head.weight", checkpoint.Tensor{Role: checkpoint.RoleHead}, []int64{129280, 5120}, 2, &TPCut{2, "rows(vocab)", 64640, true}},
		// An odd count never splits evenly.
		{"embed.weight", checkpoint.Tensor{Role: checkpoint.RoleEmbed}, []int64{65, 64}, 2, &TPCut{2, "rows(vocab)", 32, false}},
		{"layers.0.attn_norm.weight", checkpoint.Tensor{Role: checkpoint.RoleNorm}, []int64{5120}, 2, nil},
		{"layers.3.ffn.experts.7.w1.weight", expert("w1"), []int64{2304, 2560}, 1, nil},
	}
	for _, c := range cases {
		tn := c.t
		tn.Name, tn.Shape = c.name, c.shape
		if got := tpCut(&tn, c.ranks); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %v over %d: %+v, want %+v", c.name, c.shape, c.ranks, got, c.want)
		}
	}
}

func TestGeneralise(t *testing.T) {
	cases := []struct {
		name string
		mtp  bool
		want string
	}{
		{"layers.3.ffn.experts.17.w1.scale", true, "layers.3.ffn.experts.N.w1.scale"},
		{"mtp.2.ffn.experts.5.w2.scale", true, "mtp.S.ffn.experts.N.w2.scale"},
		{"mtp.2.ffn.experts.5.w2.weight", false, "mtp.2.ffn.experts.N.w2.weight"},
		{"mtp.2.ffn.shared_experts.w2.scale", true, "mtp.S.ffn.shared_experts.w2.scale"},
		{"layers.1.attn.wq_a.scale", true, "layers.1.attn.wq_a.scale"},
		{"model.layers.3.mlp.experts.1.gate_proj.weight_scale_inv", true, "model.layers.3.mlp.experts.N.gate_proj.weight_scale_inv"},
	}
	for _, c := range cases {
		if got := generalise(c.name, c.mtp); got != c.want {
			t.Errorf("generalise(%q, %v) = %q, want %q", c.name, c.mtp, got, c.want)
		}
	}
}
