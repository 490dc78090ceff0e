package inventory

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dustin/go-humanize"
)

// OverviewSchema names the layout of an Overview document.
const OverviewSchema = "dsfs-summary/1"

// Overview is what the headers alone tell about a checkpoint (summary.json):
// it costs no data read.
type Overview struct {
	Schema  string      `json:"schema"`
	Root    string      `json:"root"`
	Config  ConfigFacts `json:"config"`
	Shards  int         `json:"shards"`
	Tensors int         `json:"tensors"`
	Bytes   int64       `json:"bytes"` // tensor data
	// ByFormat counts tensors by the catalog's format (scales apart from
	// their weights), ByRole by role, ByDType by dtype, ByShard by shard.
	ByFormat map[string]Tally `json:"by_format"`
	ByRole   map[string]Tally `json:"by_role"`
	ByDType  map[string]Tally `json:"by_dtype"`
	ByShard  map[string]Tally `json:"by_shard"`
	Model    ModelFacts       `json:"model"`
	// Problems is every fault the catalog found in the headers, index and
	// config.
	Problems []checkpoint.Problem `json:"problems"`
}

// Tally counts tensors and their bytes.
type Tally struct {
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
}

// ConfigFacts are the config.json settings the catalog reads.
type ConfigFacts struct {
	ModelType     string   `json:"model_type,omitempty"`
	Architectures []string `json:"architectures,omitempty"`
	NumLayers     int      `json:"num_hidden_layers,omitempty"`
	HiddenSize    int      `json:"hidden_size,omitempty"`
	RoutedExperts int      `json:"n_routed_experts,omitempty"`
	MTPLayers     int      `json:"num_nextn_predict_layers,omitempty"`
	TorchDType    string   `json:"torch_dtype,omitempty"`
	QuantMethod   string   `json:"quant_method,omitempty"`
	BlockSize     []int64  `json:"weight_block_size,omitempty"`
	ScaleFmt      string   `json:"scale_fmt,omitempty"`
	ExpertDType   string   `json:"expert_dtype,omitempty"`
}

// ModelFacts is the model's structure as its tensor names show it.
type ModelFacts struct {
	Layers     int   `json:"layers"`      // main decoder layers with tensors
	LayerRange []int `json:"layer_range"` // [first, last], empty when none
	MoELayers  int   `json:"moe_layers"`  // layers with routed experts
	// ExpertsPerLayer is [fewest, most] routed experts of a MoE layer.
	ExpertsPerLayer []int `json:"experts_per_layer"`
	MTP             []int `json:"mtp"` // multi-token-prediction blocks (DSpark stages)
	// MTPExpertsPerBlock is the number of routed experts of each MTP
	// block, in the order of MTP (DeepSeek-V4.1-Flash: [128, 128, 128]).
	MTPExpertsPerBlock []int `json:"mtp_experts_per_block"`
	EngramLayers       []int `json:"engram_layers"`
	// Vision counts the whole vision path: the tower, its projector into
	// the language model and the image-span tokens.
	Vision VisionFacts `json:"vision"`
}

// VisionFacts counts the tensors of the vision path by part.
type VisionFacts struct {
	Tensors     int   `json:"tensors"` // all three parts
	Bytes       int64 `json:"bytes"`
	Tower       int   `json:"tower"`
	Projector   int   `json:"projector"`
	ImageTokens int   `json:"image_tokens"`
}

// NewOverview describes cat from its headers.
func NewOverview(cat *checkpoint.Catalog) *Overview {
	o := &Overview{
		Schema: OverviewSchema, Root: cat.Dir, Shards: len(cat.Shards), Tensors: len(cat.Tensors),
		ByFormat: map[string]Tally{}, ByRole: map[string]Tally{}, ByDType: map[string]Tally{}, ByShard: map[string]Tally{},
		Problems: cat.Problems,
	}
	if o.Problems == nil {
		o.Problems = []checkpoint.Problem{}
	}
	c := cat.Config
	o.Config = ConfigFacts{
		ModelType: c.ModelType, Architectures: c.Architectures, NumLayers: c.NumLayers, HiddenSize: c.HiddenSize,
		RoutedExperts: c.RoutedExperts, MTPLayers: c.MTPLayers, TorchDType: c.TorchDType,
		QuantMethod: c.Quant.Method, ScaleFmt: c.Quant.ScaleFmt, ExpertDType: c.Quant.ExpertDType,
	}
	if b := c.Quant.WeightBlockSize; b != [2]int64{} {
		o.Config.BlockSize = b[:]
	}
	tally := func(m map[string]Tally, k string, n int64) {
		t := m[k]
		t.Count++
		t.Bytes += n
		m[k] = t
	}
	layers := map[int]bool{}
	experts := map[int]map[int]bool{} // MoE layer -> experts
	mtp := map[int]bool{}
	mtpExperts := map[[2]int]bool{}
	engram := map[int]bool{}
	for _, t := range cat.Tensors {
		o.Bytes += t.Size
		tally(o.ByFormat, string(t.Format), t.Size)
		tally(o.ByRole, string(t.Role), t.Size)
		tally(o.ByDType, string(t.DType), t.Size)
		tally(o.ByShard, t.Shard.Name, t.Size)
		switch {
		case t.MTP >= 0:
			mtp[t.MTP] = true
			if t.Role == checkpoint.RoleMTPExpert {
				mtpExperts[[2]int{t.MTP, t.Expert}] = true
			}
		case t.Layer >= 0:
			layers[t.Layer] = true
			if t.Role == checkpoint.RoleRoutedExpert {
				if experts[t.Layer] == nil {
					experts[t.Layer] = map[int]bool{}
				}
				experts[t.Layer][t.Expert] = true
			}
		}
		if t.Role == checkpoint.RoleEngram && t.Layer >= 0 {
			engram[t.Layer] = true
		}
		switch v := &o.Model.Vision; t.Role {
		case checkpoint.RoleVision:
			v.Tower++
		case checkpoint.RoleVisionProjector:
			v.Projector++
		case checkpoint.RoleImageToken:
			v.ImageTokens++
		default:
			continue
		}
		o.Model.Vision.Tensors++
		o.Model.Vision.Bytes += t.Size
	}
	m := &o.Model
	ls := slices.Sorted(maps.Keys(layers))
	m.Layers, m.LayerRange = len(ls), []int{}
	if len(ls) > 0 {
		m.LayerRange = []int{ls[0], ls[len(ls)-1]}
	}
	m.MoELayers, m.ExpertsPerLayer = len(experts), []int{}
	for _, es := range experts {
		n := len(es)
		if len(m.ExpertsPerLayer) == 0 {
			m.ExpertsPerLayer = []int{n, n}
		}
		m.ExpertsPerLayer[0], m.ExpertsPerLayer[1] = min(m.ExpertsPerLayer[0], n), max(m.ExpertsPerLayer[1], n)
	}
	m.MTP = slices.Sorted(maps.Keys(mtp))
	m.MTPExpertsPerBlock = make([]int, len(m.MTP))
	for i, b := range m.MTP {
		for k := range mtpExperts {
			if k[0] == b {
				m.MTPExpertsPerBlock[i]++
			}
		}
	}
	m.EngramLayers = slices.Sorted(maps.Keys(engram))
	if m.MTP == nil {
		m.MTP = []int{}
	}
	if m.EngramLayers == nil {
		m.EngramLayers = []int{}
	}
	return o
}

// Markdown renders the overview for people: the same facts as tables.
func (o *Overview) Markdown() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: manifest\n\n", filepath.Base(o.Root))
	fmt.Fprintf(&b, "Source `%s`: %d shards, %d tensors, %s of tensor data.\n\n", o.Root, o.Shards, o.Tensors, humanize.IBytes(uint64(o.Bytes)))
	b.WriteString("This directory is the checkpoint's inventory. `summary.json` and this page come from the\n" +
		"headers alone. `manifest.json` has one record per tensor (byte range, sha256, value checks,\n" +
		"tensor-parallel cut) and is computed when first read, which reads every byte once;\n" +
		"`shards/NAME.json` does the same for one shard; `views/VIEW.json` says where every tensor of a\n" +
		"derived view comes from. `.dsfs/stats.json` at the top of the mount shows the hashing progress.\n\n")

	b.WriteString("## Model\n\n| | |\n|---|---|\n")
	c := o.Config
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	if c.ModelType != "" {
		row("model_type", c.ModelType)
	}
	if len(c.Architectures) > 0 {
		row("architectures", strings.Join(c.Architectures, ", "))
	}
	if c.QuantMethod != "" {
		row("quantization", fmt.Sprintf("%s, block %v, scales %s, experts %s", c.QuantMethod, c.BlockSize, c.ScaleFmt, c.ExpertDType))
	}
	m := o.Model
	row("decoder layers", fmt.Sprintf("%d %v", m.Layers, m.LayerRange))
	row("MoE layers", m.MoELayers)
	if len(m.ExpertsPerLayer) == 2 {
		row("routed experts per MoE layer", fmt.Sprintf("%d to %d", m.ExpertsPerLayer[0], m.ExpertsPerLayer[1]))
	}
	row("MTP blocks", fmt.Sprintf("%v (routed experts per block: %v)", m.MTP, m.MTPExpertsPerBlock))
	row("Engram tables in layers", fmt.Sprint(m.EngramLayers))
	row("vision path", fmt.Sprintf("%d tensors, %s (tower %d, projector %d, image tokens %d)",
		m.Vision.Tensors, humanize.IBytes(uint64(m.Vision.Bytes)), m.Vision.Tower, m.Vision.Projector, m.Vision.ImageTokens))

	table := func(title, key string, t map[string]Tally) {
		fmt.Fprintf(&b, "\n## By %s\n\n| %s | tensors | bytes |\n|---|---:|---:|\n", title, key)
		for _, k := range slices.Sorted(maps.Keys(t)) {
			fmt.Fprintf(&b, "| %s | %d | %s |\n", k, t[k].Count, humanize.IBytes(uint64(t[k].Bytes)))
		}
	}
	table("format", "format", o.ByFormat)
	table("role", "role", o.ByRole)
	table("dtype", "dtype", o.ByDType)
	table("shard", "shard", o.ByShard)

	b.WriteString("\n## Problems\n\n")
	if len(o.Problems) == 0 {
		b.WriteString("None found in the headers, index or config.\n")
	}
	// summary.json lists every problem; here they are grouped, so that a
	// fault repeated per tensor is one line.
	groups, omitted := checkpoint.GroupProblems(o.Problems)
	for _, g := range groups {
		p := checkpoint.Problem{File: g.File, Reason: g.Reason}
		if g.Count == 1 && len(g.Tensors) == 1 {
			p.Tensor = g.Tensors[0]
		}
		fmt.Fprintf(&b, "- %s", p)
		if g.Count > 1 {
			fmt.Fprintf(&b, " (%d tensors", g.Count)
			if len(g.Tensors) > 0 {
				fmt.Fprintf(&b, ": %s", strings.Join(g.Tensors, ", "))
				if len(g.Tensors) < g.Count {
					b.WriteString(", ...")
				}
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
	}
	if omitted > 0 {
		fmt.Fprintf(&b, "- and %d more problems, listed in summary.json\n", omitted)
	}
	return []byte(b.String())
}
