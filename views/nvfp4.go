package views

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
	"golang.org/x/sync/errgroup"
)

// nvfp4 transcodes MXFP4 expert matrices to NVFP4 (FORMATS.md "nvfp4/").
type nvfp4 struct {
	set     *Set
	experts []*checkpoint.Tensor // the weights it transcodes, by name
}

// nvGroups memoises the global-exponent groups of a catalog's experts for
// the whole mount: nvfp4/, nvfp4+engram-fp4/ and manifest/'s descriptions
// share them, so each group's scales are read once.
type nvGroups struct {
	cat    *checkpoint.Catalog
	mu     sync.Mutex
	groups map[string]*nvGroup // by group name
}

// nvGroup is the set of matrices that share one global exponent: w1 and w3
// of one expert, or w2 alone.
type nvGroup struct {
	scales []*checkpoint.Tensor

	once sync.Once
	ge   int
	err  error
}

// g returns the group's global exponent, reading its scales the first time.
func (g *nvGroup) g() (int, error) { return g.from(nil) }

// from returns the group's global exponent, computed from bufs (the
// scales' bytes, in the order of scales) when it is not known yet; nil
// bufs are read.
func (g *nvGroup) from(bufs [][]byte) (int, error) {
	g.once.Do(func() {
		if bufs == nil {
			if bufs, g.err = g.read(); g.err != nil {
				return
			}
		}
		g.ge = codecs.GlobalExponent(bufs...)
	})
	return g.ge, g.err
}

// read returns the bytes of the group's scales.
func (g *nvGroup) read() ([][]byte, error) {
	bufs := make([][]byte, len(g.scales))
	for i, sc := range g.scales {
		bufs[i] = make([]byte, sc.Size)
		if _, err := sc.ReadAt(bufs[i], 0); err != nil {
			return nil, err
		}
	}
	return bufs, nil
}

func nvfp4Rewriter(s *Set) (Rewriter, error) {
	n := &nvfp4{set: s}
	for _, t := range s.Cat.Tensors {
		if isNVFP4Expert(t) {
			n.experts = append(n.experts, t)
		}
	}
	return n, nil
}

func (n *nvfp4) String() string { return "nvfp4" }

// isNVFP4Expert reports whether t is an expert weight this view transcodes.
func isNVFP4Expert(t *checkpoint.Tensor) bool {
	return (t.Role == checkpoint.RoleRoutedExpert || t.Role == checkpoint.RoleMTPExpert) &&
		t.Format == checkpoint.FormatMXFP4 && t.Scale != nil
}

// groupName names the global-exponent group of an expert weight.
func groupName(t *checkpoint.Tensor) string {
	b := base(t.Name)
	if t.Proj == "w3" {
		return strings.TrimSuffix(b, "w3") + "w1"
	}
	return b
}

// group returns the memoised global-exponent group of an expert weight.
func (n *nvfp4) group(t *checkpoint.Tensor) *nvGroup { return n.set.nvGroups.group(t) }

// group returns the memoised global-exponent group of an expert weight.
func (n *nvGroups) group(t *checkpoint.Tensor) *nvGroup {
	name := groupName(t)
	n.mu.Lock()
	defer n.mu.Unlock()
	if g, ok := n.groups[name]; ok {
		return g
	}
	g := &nvGroup{scales: []*checkpoint.Tensor{t.Scale}}
	if t.Proj == "w1" || t.Proj == "w3" {
		other := "w3"
		if t.Proj == "w3" {
			other = "w1"
		}
		partner := n.cat.Tensor(strings.TrimSuffix(base(t.Name), t.Proj) + other + ".weight")
		if partner != nil && isNVFP4Expert(partner) {
			g.scales = append(g.scales, partner.Scale)
		}
	}
	sort.Slice(g.scales, func(i, j int) bool { return g.scales[i].Name < g.scales[j].Name })
	n.groups[name] = g
	return g
}

func (n *nvfp4) Rewrite(t *checkpoint.Tensor) ([]tensorfile.Out, bool) {
	if t.ScaleOf != nil && isNVFP4Expert(t.ScaleOf) {
		return nil, true // the scale is replaced by the weight's outputs
	}
	if !isNVFP4Expert(t) {
		return nil, false
	}
	rows := t.Shape[0] // [out, in/2] bytes
	g := n.group(t)
	// One string holds the block IDs and names of both scales, so a
	// checkpoint's ~50k experts cost one allocation each for them.
	b := base(t.Name)
	id2 := "nvfp4/" + b + ".weight_scale_2"
	id := id2[:len(id2)-len("_2")]
	const view = len("nvfp4/")
	scaleRow := t.Scale.Shape[1]
	scale := tensorfile.RowBlocks(id, rows, 2*scaleRow, func(ctx context.Context, lo, hi int64, dst []byte) error {
		ge, err := g.g()
		if err != nil {
			return err
		}
		src := make([]byte, (hi-lo)*scaleRow)
		if _, err := t.Scale.ReadAt(src, lo*scaleRow); err != nil {
			return err
		}
		codecs.NVFP4WeightScale(dst, src, ge)
		return nil
	})
	// g is memoised per mount: the scalar needs no block of its own.
	global := vfile.Small{ID: id2, N: 4,
		Compute: func(ctx context.Context, dst []byte) error {
			ge, err := g.g()
			if err != nil {
				return err
			}
			putF32(dst, codecs.WeightScale2(ge))
			return nil
		}}
	// weight_scale reads its own scale and, for g, the group's others.
	scaleSources := make([]*checkpoint.Tensor, 1, len(g.scales))
	scaleSources[0] = t.Scale
	for _, sc := range g.scales {
		if sc != t.Scale {
			scaleSources = append(scaleSources, sc)
		}
	}
	name := t.Name // shared with the catalog when it is base + ".weight", as usual
	if !strings.HasSuffix(name, ".weight") {
		name = b + ".weight"
	}
	return []tensorfile.Out{
		{Name: name, DType: safetensors.U8, Shape: t.Shape[:2:2], Data: vfile.Range{R: t.Shard, Off: t.Offset, N: t.Size},
			Codec: tensorfile.Copy, Sources: []*checkpoint.Tensor{t}},
		{Name: id[view:], DType: safetensors.F8E4M3, Shape: []int64{rows, 2 * scaleRow}, Data: scale,
			Codec: "nvfp4_weight_scale", Sources: scaleSources},
		// Last in the file: g takes every scale of the group to compute,
		// and a reader of the header must not wait for it.
		{Name: id2[view:], DType: safetensors.F32, Shape: []int64{}, Data: global,
			Codec: "nvfp4_weight_scale_2", Sources: g.scales, Tail: true},
	}, true
}

// ConfigPatch sets quantization_config.expert_dtype, and the top-level
// expert_dtype where DeepSeek-V4 writes one, so config.json says one thing.
func (n *nvfp4) ConfigPatch() map[string]any {
	p := n.set.Cat.Config.QuantPatch(len(n.experts), "expert_dtype", "nvfp4")
	if _, ok := n.set.Cat.Config.Raw["expert_dtype"]; ok && p != nil {
		p["expert_dtype"] = "nvfp4"
	}
	return p
}

// InferencePatch says the experts are NVFP4 in inference/config.json too,
// whenever config.json says so.
func (n *nvfp4) InferencePatch() map[string]string {
	if n.ConfigPatch() == nil {
		return nil
	}
	return map[string]string{"expert_dtype": "nvfp4"}
}

// Files are the report and, when the view holds NVFP4 experts, their
// ModelOpt description: a checkpoint without MXFP4 experts (V2, V3) gets
// no hf_quant_config.json claiming a quantisation it does not hold.
func (n *nvfp4) Files() map[string]*vfile.Node {
	files := map[string]*vfile.Node{"TRANSCODE.json": jsonDoc(n.report)}
	if len(n.experts) > 0 {
		files["hf_quant_config.json"] = &vfile.Node{File: vfile.NewFile(vfile.Bytes(n.hfQuantConfig()))}
	}
	return files
}

// nvReport is one row of nvfp4/TRANSCODE.json.
type nvReport struct {
	Tensor string `json:"tensor"`
	Shard  string `json:"shard"`
	G      int    `json:"g"`
	codecs.NVFP4Counts
}

// counts returns the block counts of an expert weight whose scale bytes
// are sc, under global exponent g. Clamped blocks follow from the scales
// alone; only their codes are read, to tell whether they are lossy.
func counts(t *checkpoint.Tensor, sc []byte, g int) (codecs.NVFP4Counts, error) {
	const blockBytes = codecs.MXBlock / 2
	var clamped []int
	for i, b := range sc {
		if k := int(b) - 127 - g; b != codecs.E8M0NaN && (k < codecs.E4M3MinPow2 || k > codecs.E4M3MaxPow2) {
			clamped = append(clamped, i)
		}
	}
	// A tensor with many clamped blocks is read whole; otherwise only the
	// clamped blocks' codes, block by block.
	if len(clamped) > len(sc)/64 {
		w := make([]byte, t.Size)
		if _, err := t.ReadAt(w, 0); err != nil {
			return codecs.NVFP4Counts{}, err
		}
		return codecs.CountNVFP4(w, sc, g), nil
	}
	c := codecs.NVFP4Counts{Blocks: int64(len(sc) - len(clamped))}
	for _, b := range sc {
		if b == codecs.E8M0NaN {
			c.NaN++
		}
	}
	var blk [blockBytes]byte
	for _, i := range clamped {
		if _, err := t.ReadAt(blk[:], int64(i*blockBytes)); err != nil {
			return codecs.NVFP4Counts{}, err
		}
		c.Add(codecs.CountNVFP4(blk[:], sc[i:i+1], g))
	}
	return c, nil
}

// report counts clamped and lossy blocks of every expert in parallel, a
// global-exponent group at a time: each scale is read once, for the
// group's exponent (kept for the weight_scale blocks) and its counts, and
// the codes of clamped blocks.
func (n *nvfp4) report(ctx context.Context) (any, error) {
	rows := make([]nvReport, len(n.experts))
	byGroup := make(map[*nvGroup][]int) // expert indices
	var order []*nvGroup
	for i, t := range n.experts {
		g := n.group(t)
		if byGroup[g] == nil {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], i)
	}
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(workers())
	for _, grp := range order {
		eg.Go(func() error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			bufs, err := grp.read()
			if err != nil {
				return err
			}
			ge, err := grp.from(bufs)
			if err != nil {
				return err
			}
			for _, i := range byGroup[grp] {
				t := n.experts[i]
				k := slices.Index(grp.scales, t.Scale)
				c, err := counts(t, bufs[k], ge)
				if err != nil {
					return err
				}
				rows[i] = nvReport{Tensor: base(t.Name), Shard: t.Shard.Name, G: ge, NVFP4Counts: c}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	var total codecs.NVFP4Counts
	for _, r := range rows {
		total.Add(r.NVFP4Counts)
	}
	return struct {
		View    string             `json:"view"`
		Codec   string             `json:"codec_version"`
		Experts int                `json:"experts"`
		Totals  codecs.NVFP4Counts `json:"totals"`
		Tensors []nvReport         `json:"tensors"`
	}{"nvfp4", codecs.Version, len(rows), total, rows}, nil
}

// hfQuantConfig is the ModelOpt description of the view: W4A16 NVFP4
// experts (no activation calibration exists, so no input_scale), every
// other module excluded.
func (n *nvfp4) hfQuantConfig() []byte {
	quant := make(map[string]bool, len(n.experts))
	for _, t := range n.experts {
		quant[base(t.Name)] = true
	}
	exclude := []string{}
	seen := make(map[string]bool)
	for _, t := range n.set.Cat.Tensors {
		m := base(t.Name)
		if quant[m] || (t.ScaleOf != nil && quant[base(t.ScaleOf.Name)]) || seen[m] || !strings.HasSuffix(t.Name, ".weight") {
			continue
		}
		seen[m] = true
		exclude = append(exclude, m)
	}
	sort.Strings(exclude)
	return vfile.MustJSON(map[string]any{
		"producer": map[string]any{"name": "dsfs", "version": codecs.Version},
		"quantization": map[string]any{
			"quant_algo":          "W4A16_NVFP4",
			"kv_cache_quant_algo": nil,
			"group_size":          16,
			"exclude_modules":     exclude,
		},
	})
}
