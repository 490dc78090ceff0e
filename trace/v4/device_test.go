package v4

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/simd"
	"github.com/dsfs/dsfs/trace/backend"
)

// hostOps is backend.V4Ops for the CPU backend, through its buffers' public
// face (download, the host function, upload back), so that the tests run
// the forward's device path for V4's own operations.
type hostOps struct {
	*backend.CPU
	calls map[string]int
}

func (h *hostOps) whole(x backend.Mat) []float32 {
	if x.Off != 0 || x.Stride != x.Cols || x.Buf.Len() != x.Rows*x.Cols {
		panic(fmt.Sprintf("hostOps: %+v is not a whole buffer", x))
	}
	v := make([]float32, x.Rows*x.Cols)
	if err := h.Download(v, x.Buf, 0); err != nil {
		panic(err)
	}
	return v
}

func (h *hostOps) ActQuant(x backend.Mat, block int, fp4 bool) {
	h.calls["ActQuant"]++
	v := h.whole(x)
	if fp4 {
		simd.QuantE2M1(v, block)
	} else {
		simd.QuantE4M3(v, block)
	}
	h.Upload(x.Buf, 0, v)
}

func (h *hostOps) Hadamard(x backend.Mat, scale float32) {
	h.calls["Hadamard"]++
	v := h.whole(x)
	for r := range x.Rows {
		simd.Hadamard(v[r*x.Cols:(r+1)*x.Cols], scale)
	}
	h.Upload(x.Buf, 0, v)
}

func (h *hostOps) SparseAttention(out, q, kv backend.Mat, sink backend.Buffer, idx []int32, k, heads int, scale float32) {
	h.calls["SparseAttention"]++
	if k <= 0 || len(idx) == 0 {
		panic("hostOps: SparseAttention with nothing to attend (the cuda backend refuses it)")
	}
	o := make([]float32, out.Rows*out.Cols)
	s := make([]float32, sink.Len())
	if err := h.Download(s, sink, 0); err != nil {
		panic(err)
	}
	if err := sparseAttention(context.Background(), o, h.whole(q), h.whole(kv), s, idx, k, heads, q.Cols, scale); err != nil {
		panic(err)
	}
	h.Upload(out.Buf, 0, o)
}

// TestBackendMatchesHost runs every layer of v4-tiny and its logits, in
// both precisions, on the golden inputs through a backend.Backend (the CPU
// one, whose products are simd's, alone and with backend.V4Ops) and on the
// host engine: every output is identical bit for bit, so the device path
// moves the same data the host path computes on.
func TestBackendMatchesHost(t *testing.T) {
	host, g := loadGolden(t)
	s := g.Sequences[0]
	for _, tc := range []struct {
		name string
		b    backend.Backend
	}{{"cpu", backend.NewCPU()}, {"cpu+ops", &hostOps{CPU: backend.NewCPU(), calls: map[string]int{}}}} {
		dev := openDir(t, filepath.Join(testdata.Dir(t), "trace", "v4-tiny"))
		dev.SetBackend(tc.b)
		for _, p := range []Precision{A8, FP32} {
			var last *LayerOutput
			for l := range host.Config.Layers {
				in := s.Modes[string(p)].Layers[l].StreamIn.f32(t)
				want, err := host.Forward(context.Background(), l, in, [][]int{s.TokenIDs}, p)
				if err != nil {
					t.Fatal(err)
				}
				got, err := dev.Forward(context.Background(), l, in, [][]int{s.TokenIDs}, p)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct {
					name      string
					got, want []float32
				}{{"attn_out", got.AttnOut, want.AttnOut}, {"ffn_out", got.FFNOut, want.FFNOut},
					{"stream_out", got.StreamOut, want.StreamOut}, {"topk_weights", got.Routes.Weights, want.Routes.Weights}} {
					if !slices.Equal(c.got, c.want) {
						t.Errorf("%s %s layer %d: %s differs from the host engine's (max rel %g)", tc.name, p, l, c.name, relDiff(c.got, c.want))
					}
				}
				if !slices.Equal(got.Routes.IDs, want.Routes.IDs) {
					t.Errorf("%s %s layer %d: routes differ", tc.name, p, l)
				}
				for i := range want.Seqs {
					if !slices.Equal(got.Seqs[i].IndexTopK, want.Seqs[i].IndexTopK) || !slices.Equal(got.Seqs[i].Compressed, want.Seqs[i].Compressed) {
						t.Errorf("%s %s layer %d: compressed KV or indexer picks differ", tc.name, p, l)
					}
				}
				last = got
			}
			want, err := host.Logits(context.Background(), last.StreamOut)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dev.Logits(context.Background(), last.StreamOut)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Logits, want.Logits) {
				t.Errorf("%s %s: logits differ from the host engine's", tc.name, p)
			}
		}
		if h, ok := tc.b.(*hostOps); ok {
			for _, op := range []string{"ActQuant", "Hadamard", "SparseAttention"} {
				if h.calls[op] == 0 {
					t.Errorf("backend.V4Ops.%s never called", op)
				}
			}
		}
	}
}
