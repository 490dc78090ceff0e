// Package nvfp4 is the engine of the nvfp4/ view: it transcodes a
// checkpoint's MXFP4 routed and MTP experts to NVFP4 without reading a
// weight, and describes what it made (FORMATS.md "nvfp4/").
//
// # The transcode
//
// An MXFP4 expert matrix is E2M1 codes with one E8M0 scale, a power of
// two, per 32 weights. NVFP4 reads the same codes with an E4M3 scale per
// 16 weights and one F32 scale per matrix, weight_scale_2 = 2^g. So the
// codes are served as they are (the source bytes), and only the scales are
// computed: each 32-block's scale s becomes E4M3(s/2^g), written for both
// of its 16-blocks. That is exact whenever s/2^g lies in E4M3's power-of-two
// range; a block outside it is clamped, and lossy only if one of its codes
// is not zero.
//
// # Groups and the global exponent
//
// g is chosen from scale bytes alone, over a group: w1 and w3 of one expert
// share one g (loaders fuse gate and up), w2 has its own. The partner may
// sit in another shard, so a group's g takes reading every scale of the
// group. A Transcoder memoises each group's g, computed once on first use,
// and a mount makes one Transcoder: nvfp4/, nvfp4+engram-fp4/ and
// manifest/'s descriptions all ask it, and each group's scales are read
// once for g.
//
// # What a view gets
//
// Rewrite replaces an expert weight and its scale by three tensors: the
// weight (a Range of the source), weight_scale (row blocks computed from
// the scale rows with the group's g) and weight_scale_2 (a 4-byte
// vfile.Small, laid out last in its file, since its g may read other
// shards: opening a file never waits for it). ConfigPatch and
// InferencePatch say in config.json and inference/config.json that the
// experts are NVFP4; Files are TRANSCODE.json (per expert: g and the
// clamped, lossy and NaN blocks) and hf_quant_config.json (the ModelOpt
// description). Describe gives manifest/ the same figures for one
// weight_scale. Package views lays all of it out.
package nvfp4

import (
	"context"
	"encoding/binary"
	"math"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
)

// WeightScaleCodec is the codec a weight_scale's record names
// (tensorfile.Out.Codec), by which manifest/ knows the tensors Describe
// describes.
const WeightScaleCodec = "nvfp4_weight_scale"

// Transcoder transcodes the MXFP4 experts of one catalog to NVFP4. It is
// safe for concurrent use.
type Transcoder struct {
	cat     *checkpoint.Catalog
	opt     Options
	experts []*checkpoint.Tensor // the weights it transcodes, in catalog order
	cal     *calibration         // nil: every input_scale is 1.0

	mu     sync.Mutex
	groups map[string]*group // by group name

	blocks, clamped atomic.Int64 // weight_scale blocks computed so far, and of those clamped
}

// Options are how a Transcoder transcodes.
type Options struct {
	// MTP converts the experts of the MTP blocks too. By default they stay
	// MXFP4, their .weight and .scale served byte for byte, as NVIDIA's
	// NVFP4 build leaves them and as SGLang's and vLLM's draft models read
	// them; the quantisation configs then list mtp.* as not NVFP4.
	MTP bool
	// Calibration gives the experts' input scales; nil: 1.0 everywhere.
	Calibration *Calibration
	// Disk keeps a calibration's result across mounts; nil: none.
	Disk *diskcache.Cache
	// Producer names the program and its version in the quantisation
	// configs.
	Producer Producer
}

// Producer is the "producer" entry of the quantisation configs.
type Producer struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Codec   string `json:"codec"` // codecs.Version: what decides the bytes
}

// New returns the transcoder of cat's experts. It reads headers only.
func New(cat *checkpoint.Catalog, opt Options) *Transcoder {
	n := &Transcoder{cat: cat, opt: opt, groups: make(map[string]*group)}
	for _, t := range cat.Tensors {
		if n.converts(t) {
			n.experts = append(n.experts, t)
		}
	}
	if opt.Calibration != nil {
		n.cal = &calibration{Calibration: opt.Calibration, n: n}
	}
	return n
}

// converts reports whether t is an expert weight the transcoder converts:
// an MXFP4 routed expert, or an MTP block's with Options.MTP.
func (n *Transcoder) converts(t *checkpoint.Tensor) bool {
	return (t.Role == checkpoint.RoleRoutedExpert || n.opt.MTP && t.Role == checkpoint.RoleMTPExpert) &&
		t.Format == checkpoint.FormatMXFP4 && t.Scale != nil
}

// Rewrite returns the NVFP4 tensors of an expert weight and true, nothing
// and true for its scale (replaced by the weight's tensors), and false for
// any other tensor.
func (n *Transcoder) Rewrite(t *checkpoint.Tensor) ([]tensorfile.Out, bool) {
	if t.ScaleOf != nil && n.converts(t.ScaleOf) {
		return nil, true
	}
	if !n.converts(t) {
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
		var clamped int
		err = t.Scale.View(lo*scaleRow, (hi-lo)*scaleRow, func(src []byte) error {
			clamped = codecs.NVFP4WeightScale(dst, src, ge)
			return nil
		})
		if err != nil {
			return err
		}
		n.blocks.Add((hi - lo) * scaleRow)
		n.clamped.Add(int64(clamped))
		return nil
	})
	scale.Cheap = true // one table lookup per byte
	// g is memoised per mount: the scalar needs no block of its own.
	global := vfile.Small{ID: id2, N: 4,
		Compute: func(ctx context.Context, dst []byte) error {
			ge, err := g.g()
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint32(dst, math.Float32bits(codecs.WeightScale2(ge)))
			return nil
		}}
	input := vfile.Small{ID: id2[:len(id2)-len("weight_scale_2")] + "input_scale", N: 4,
		Compute: func(ctx context.Context, dst []byte) error {
			v, err := n.inputScale(ctx, t)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint32(dst, math.Float32bits(v))
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
			Codec: WeightScaleCodec, Sources: scaleSources},
		// Last in the file: g takes every scale of the group to compute,
		// and a calibrated input scale the trace of every layer, and a
		// reader of the header must not wait for them.
		{Name: input.ID[view:], DType: safetensors.F32, Shape: []int64{}, Data: input,
			Codec: "nvfp4_input_scale", Tail: true},
		{Name: id2[view:], DType: safetensors.F32, Shape: []int64{}, Data: global,
			Codec: "nvfp4_weight_scale_2", Sources: g.scales, Tail: true},
	}, true
}

// Files are the report and, when the view holds NVFP4 experts, their
// ModelOpt description: a checkpoint without MXFP4 experts (V2, V3) gets
// no hf_quant_config.json claiming a quantisation it does not hold.
func (n *Transcoder) Files() map[string]*vfile.Node {
	files := map[string]*vfile.Node{"TRANSCODE.json": {Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) {
		r, err := n.report(ctx)
		if err != nil {
			return nil, err
		}
		return vfile.JSON(r)
	})}}
	if len(n.experts) > 0 {
		files["hf_quant_config.json"] = &vfile.Node{File: vfile.NewFile(vfile.Bytes(n.hfQuantConfig()))}
	}
	return files
}

// base strips a tensor name's last component (".weight", ".scale").
func base(name string) string { return strings.TrimSuffix(name, path.Ext(name)) }

// workers is how many goroutines a whole-checkpoint pass uses.
func workers() int { return runtime.GOMAXPROCS(0) }
