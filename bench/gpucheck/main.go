// Command gpucheck compares the CUDA backend with the CPU backend on a
// machine with a GPU, and times a DeepSeek-V2-Lite-shaped layer. It is
// built elsewhere and carried to the GPU machine by bench/gpu-check.sh,
// which also runs the PyTorch comparison (torch_layer.py) on the files it
// writes.
//
// It runs every layer of the reference checkpoints (testdata/trace)
// and one random V2-Lite-shaped MoE layer (hidden 2048, 16 heads, kv_lora
// 512, 64 experts top-6 of width 1408, 2 shared) on both backends, in
// float32 and bf16 products, and prints per tensor max|Δ| / max|ref|
// against the CPU's float32 results, and whether the expert sets agree on
// every token whose route margin exceeds 1e-3. Then it times the layer's
// forward on 4 × 32 and 1 × 2048 tokens. Last it runs the v4-tiny
// reference checkpoint's layers with the CUDA backend against the host V4
// engine (see v4Tiny), and the v41-tiny one's against the host V4.1
// engine (see v41Tiny). The exit status is 1 when an error
// exceeds 2e-2 or an expert set differs, 2 when the check cannot run.
package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/cuda"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

const (
	tolerance = 2e-2 // max|Δ| / max|ref| per tensor against the CPU
	minMargin = 1e-3 // expert sets must agree where the route margin exceeds this
)

// v2Lite is one MoE layer of DeepSeek-V2-Lite's shape (the spec of
// trace/deepseek2's BenchmarkV2LiteLayer).
func v2Lite() synth.MLASpec {
	return synth.MLASpec{
		Seed: 9, Hidden: 2048, Vocab: 1024, Layers: 1, DenseLayers: 0, MoEInter: 1408,
		Heads: 16, KVLoRA: 512, QKNope: 128, QKRope: 64, VHead: 128,
		Experts: 64, TopK: 6, Shared: 2, Groups: 1, TopKGroups: 1, RoutedScale: 1,
		MaxShardBytes: 256 << 20,
	}
}

func main() {
	testdata := flag.String("testdata", "testdata", "the reference vectors (holding trace/)")
	work := flag.String("work", "/tmp/dsfs-gpucheck", "where the V2-Lite-shaped checkpoint and the PyTorch inputs are written")
	reps := flag.Int("reps", 5, "timed forwards per shape and backend (the median is reported)")
	flag.Parse()
	if err := cuda.Available(); err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck: CUDA unavailable:", err)
		os.Exit(2)
	}
	c := &checker{reps: *reps, cpu: backend.NewCPU()}
	for _, p := range []cuda.Precision{cuda.FP32, cuda.BF16} {
		b, err := cuda.NewBackend(cuda.Options{Precision: p})
		if err != nil {
			fatal(err)
		}
		c.gpus = append(c.gpus, b)
	}
	fmt.Println("device:", c.gpus[0].Device())
	fmt.Println("cpu:   ", c.cpu.Device())
	fmt.Println()
	fmt.Printf("CUDA vs CPU float32: max|Δ|/max|ref| per tensor over every layer (limit %.0e); routes: tokens with margin > %.0e whose expert sets agree\n", tolerance, minMargin)
	fmt.Printf("%-16s %-5s %9s %9s %10s %9s %9s %9s %9s  %s\n", "case", "prec", "attn_out", "ffn_out", "hidden_out", "kv_a_out", "kv_latent", "k_pe", "routes", "")
	for _, name := range []string{"v2lite-tiny", "v3-tiny"} {
		if err := c.golden(filepath.Join(*testdata, "trace", name), name); err != nil {
			fatal(err)
		}
	}
	if err := c.v2Lite(*work); err != nil {
		fatal(err)
	}
	if err := c.v4Tiny(filepath.Join(*testdata, "trace", "v4-tiny")); err != nil {
		fatal(err)
	}
	if err := c.v41Tiny(filepath.Join(*testdata, "trace", "v41-tiny")); err != nil {
		fatal(err)
	}
	for _, b := range c.gpus {
		if err := b.Close(); err != nil {
			fatal(err)
		}
	}
	if c.failed {
		fmt.Println("\nFAIL")
		os.Exit(1)
	}
	fmt.Println("\nok")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "gpucheck:", err)
	os.Exit(2)
}

type checker struct {
	reps   int
	cpu    *backend.CPU
	gpus   []*cuda.Backend // fp32, bf16
	failed bool
}

// result is the comparison of one case in one precision, accumulated over
// layers.
type result struct {
	errs          [6]float64 // attn_out, ffn_out, hidden_out, kv_a_out, kv_latent, k_pe
	agree, routed int        // tokens with a clear route: same expert sets, all
	excused       int        // tokens whose experts differ where the margin allows it
}

// add compares one layer's outputs. A token whose expert set differs
// although its margin is below minMargin is left out of ffn_out and
// hidden_out: a near-tie may go either way in bf16, and then that token's
// output legitimately differs by much more than rounding.
func (r *result) add(got, want *deepseek2.Output) {
	var skip []bool
	if want.Routes != nil && got.Routes != nil {
		k := want.Routes.K
		skip = make([]bool, len(want.Routes.Margin))
		for t, m := range want.Routes.Margin {
			a := slices.Sorted(slices.Values(got.Routes.IDs[t*k : (t+1)*k]))
			b := slices.Sorted(slices.Values(want.Routes.IDs[t*k : (t+1)*k]))
			same := slices.Equal(a, b)
			switch {
			case m > minMargin:
				r.routed++
				if same {
					r.agree++
				}
			case !same:
				skip[t] = true
				r.excused++
			}
		}
	}
	for i, p := range []struct {
		got, want []float32
		skip      []bool
	}{
		{got.AttnOut, want.AttnOut, nil}, {got.FFNOut, want.FFNOut, skip}, {got.HiddenOut, want.HiddenOut, skip},
		{got.KVA, want.KVA, nil}, {got.KVLatent, want.KVLatent, nil}, {got.KPE, want.KPE, nil},
	} {
		r.errs[i] = math.Max(r.errs[i], relErr(p.got, p.want, p.skip))
	}
}

func (c *checker) print(name string, p cuda.Precision, r *result) {
	ok := r.agree == r.routed
	fmt.Printf("%-16s %-5s", name, p)
	for _, e := range r.errs {
		fmt.Printf(" %9.2e", e)
		ok = ok && e <= tolerance
	}
	verdict := "ok"
	if !ok {
		verdict = "FAIL"
		c.failed = true
	}
	fmt.Printf(" %9s  %s", fmt.Sprintf("%d/%d", r.agree, r.routed), verdict)
	if r.excused > 0 {
		fmt.Printf(" (%d near-tie tokens routed differently, left out of ffn_out and hidden_out)", r.excused)
	}
	fmt.Println()
}

// relErr is max|got - want| / max|want| over the rows (one per token) not
// marked in skip (NaN anywhere gives NaN).
func relErr(got, want []float32, skip []bool) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	cols := len(want)
	if len(skip) > 0 {
		cols = len(want) / len(skip)
	}
	var scale, worst float64
	for i := range want {
		if len(skip) > 0 && skip[i/cols] {
			continue
		}
		scale = math.Max(scale, math.Abs(float64(want[i])))
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			return math.NaN()
		}
		worst = math.Max(worst, d)
	}
	if scale == 0 {
		return worst
	}
	return worst / scale
}

// open opens a checkpoint for the model.
func open(dir string) (*deepseek2.Model, *checkpoint.Catalog, error) {
	cat, err := checkpoint.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	m, err := deepseek2.Open(cat)
	if err != nil {
		cat.Close()
		return nil, nil, fmt.Errorf("%s: %w", dir, err)
	}
	return m, cat, nil
}

// golden runs every layer of a reference checkpoint on its sequences, each
// layer fed the CPU's output of the one before.
func (c *checker) golden(dir, name string) error {
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		return err
	}
	var g struct {
		Sequences []struct {
			TokenIDs []int `json:"token_ids"`
		} `json:"sequences"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		return fmt.Errorf("%s/golden.json: %w", dir, err)
	}
	var ids, lens []int
	for _, s := range g.Sequences {
		ids = append(ids, s.TokenIDs...)
		lens = append(lens, len(s.TokenIDs))
	}
	m, cat, err := open(dir)
	if err != nil {
		return err
	}
	defer cat.Close()
	h, err := m.EmbedRows(ids)
	if err != nil {
		return err
	}
	results := make([]result, len(c.gpus))
	for l := range m.Config.Layers {
		want, err := m.Forward(context.Background(), c.cpu, l, h, lens)
		if err != nil {
			return fmt.Errorf("%s: cpu: %w", name, err)
		}
		for i, b := range c.gpus {
			got, err := m.Forward(context.Background(), b, l, h, lens)
			if err != nil {
				return fmt.Errorf("%s: cuda %s: %w", name, b.Precision(), err)
			}
			results[i].add(got, want)
		}
		h = want.HiddenOut
	}
	for i, b := range c.gpus {
		c.print(name, b.Precision(), &results[i])
	}
	return nil
}

// shape is a batch of sequences for the V2-Lite-shaped layer.
type shape struct {
	Name string `json:"name"`
	Lens []int  `json:"lens"`
}

// timing is what torch_layer.py reads: where the layer's inputs are and
// how long each backend took.
type timing struct {
	Checkpoint string       `json:"checkpoint"`
	Scale      float64      `json:"softmax_scale"`
	Shapes     []timedShape `json:"shapes"`
	Device     string       `json:"device"`
}

type timedShape struct {
	shape
	Hidden string             `json:"hidden"`  // float32 [tokens, 2048] input
	Cos    string             `json:"cos"`     // float32 [tokens, rope/2] rotary tables
	Sin    string             `json:"sin"`     //
	CPUOut string             `json:"cpu_out"` // float32 [tokens, 2048] the CPU's hidden_out
	MS     map[string]float64 `json:"ms"`      // median forward time per backend
	LoadMS map[string]float64 `json:"load_ms"` // of which reading and uploading weights
}

// v2Lite writes the V2-Lite-shaped checkpoint, compares and times its
// layer, and leaves timing.json and the inputs for torch_layer.py in work.
func (c *checker) v2Lite(work string) error {
	dir := filepath.Join(work, "v2lite-layer")
	start := time.Now()
	if err := synth.WriteMLA(v2Lite(), dir); err != nil {
		return err
	}
	fmt.Printf("\n(V2-Lite-shaped checkpoint written in %.1f s)\n", time.Since(start).Seconds())
	m, cat, err := open(dir)
	if err != nil {
		return err
	}
	defer cat.Close()
	out := timing{Checkpoint: dir, Scale: m.Config.SoftmaxScale(), Device: c.gpus[0].Device()}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []shape{{"4x32", []int{32, 32, 32, 32}}, {"1x2048", []int{2048}}} {
		n := 0
		var pos []int
		for _, t := range s.Lens {
			n += t
			for p := range t {
				pos = append(pos, p)
			}
		}
		ids := make([]int, n)
		for i := range ids {
			ids[i] = rng.IntN(m.Config.Vocab)
		}
		h, err := m.EmbedRows(ids)
		if err != nil {
			return err
		}
		ts := timedShape{shape: s, MS: map[string]float64{}, LoadMS: map[string]float64{}}
		want, err := c.run(m, c.cpu, "cpu", h, s.Lens, &ts)
		if err != nil {
			return err
		}
		for _, b := range c.gpus {
			name := "cuda-" + b.Precision().String()
			got, err := c.run(m, b, name, h, s.Lens, &ts)
			if err != nil {
				return err
			}
			var r result
			r.add(got, want)
			c.print("v2lite "+s.Name, b.Precision(), &r)
		}
		cos, sin := m.Config.RopeTables(pos)
		for _, f := range []struct {
			field *string
			file  string
			v     []float32
		}{
			{&ts.Hidden, s.Name + ".hidden.f32", h}, {&ts.Cos, s.Name + ".cos.f32", cos},
			{&ts.Sin, s.Name + ".sin.f32", sin}, {&ts.CPUOut, s.Name + ".cpu_out.f32", want.HiddenOut},
		} {
			*f.field = filepath.Join(work, f.file)
			if err := writeF32(*f.field, f.v); err != nil {
				return err
			}
		}
		out.Shapes = append(out.Shapes, ts)
	}
	fmt.Printf("\nV2-Lite-shaped layer forward, median of %d (ms; in brackets reading + uploading weights)\n", c.reps)
	fmt.Printf("%-8s %18s %18s %18s\n", "shape", "cpu", "cuda-fp32", "cuda-bf16")
	for _, s := range out.Shapes {
		fmt.Printf("%-8s", s.Name)
		for _, k := range []string{"cpu", "cuda-fp32", "cuda-bf16"} {
			fmt.Printf(" %18s", fmt.Sprintf("%.1f (%.1f)", s.MS[k], s.LoadMS[k]))
		}
		fmt.Println()
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(work, "timing.json"), b, 0o644)
}

// run runs the layer once to warm up and reps times more, records the
// median times in ts under name, and returns the last output. The CPU runs
// once timed: it is the reference, not a contender.
func (c *checker) run(m *deepseek2.Model, b backend.Backend, name string, h []float32, lens []int, ts *timedShape) (*deepseek2.Output, error) {
	reps := c.reps
	if name == "cpu" {
		reps = 1
	}
	var out *deepseek2.Output
	var times, loads []time.Duration
	for i := range reps + 1 {
		o, err := m.Forward(context.Background(), b, 0, h, lens)
		if err != nil {
			return nil, fmt.Errorf("v2lite %s: %w", name, err)
		}
		out = o
		if i > 0 {
			times, loads = append(times, o.Time), append(loads, o.LoadTime)
		}
	}
	ts.MS[name] = median(times)
	ts.LoadMS[name] = median(loads)
	return out, nil
}

func median(d []time.Duration) float64 {
	slices.SortFunc(d, cmp.Compare)
	return float64(d[len(d)/2].Microseconds()) / 1000
}

func writeF32(path string, v []float32) error {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return os.WriteFile(path, b, 0o644)
}
