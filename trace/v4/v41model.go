package v4

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/backend"
)

// Model41 is a DeepSeek-V4.1 checkpoint in DeepSeek's flat layout,
// checked from its headers against the tensors each layer's role needs
// (and nothing else under layers.N.). Values are read when a layer runs;
// Engram tables row by row.
type Model41 struct {
	Config *Config41
	// Engram is the hashing layout (nil without Engram layers, or when
	// the token map could not be built: see EngramProblem).
	Engram        *EngramHash
	EngramProblem string

	cat          *checkpoint.Catalog
	embed, head  *tensorRef
	norm         *tensorRef
	layers       []*layer41Tensors
	problems     [][]string
	headProblems []string
	mtp          []string
	backend      backend.Backend
}

// engramTensors are one Engram layer's tensors.
type engramTensors struct {
	table, scale           *checkpoint.Tensor // [rows, head_dim] E4M3, [rows, head_dim/32] E8M0
	wkv                    *tensorRef
	qWeight, kWeight       *tensorRef
	rows, headDim, scaleBy int
}

// layer41Tensors are the tensors of one V4.1 layer.
type layer41Tensors struct {
	layerTensors
	role          Role41
	biasVL        *tensorRef
	cWkv, cWgate  *tensorRef // kv sources; wgate above ratio 1
	cNorm         *tensorRef
	idxWk, idxKNm *tensorRef // index-key owners
	engram        *engramTensors
}

// Open41 checks that cat holds a DeepSeek-V4.1 checkpoint in the flat
// layout; inference is inference/config.json (nil when absent) and tok
// the checkpoint's tokenizer (nil when it has none or it cannot be read:
// Engram layers then cannot run).
func Open41(cat *checkpoint.Catalog, inference []byte, tok *tokenizer.Tokenizer) (*Model41, error) {
	if cat.ConfigBytes == nil {
		return nil, errors.New("config.json: missing or unreadable")
	}
	cfg, err := ParseConfig41(cat.ConfigBytes, inference)
	if err != nil {
		return nil, err
	}
	m := &Model41{Config: cfg, cat: cat}
	c := &checker{cat: cat}
	m.embed = c.tensor("embed.weight", kindFloat, cfg.Vocab, cfg.Hidden)
	if m.embed == nil {
		return nil, errors.New(c.problems[0])
	}
	c.problems = nil
	m.head = c.tensor("head.weight", kindFloat, cfg.Vocab, cfg.Hidden)
	m.norm = c.tensor("norm.weight", kindFloat, cfg.Hidden, 0)
	m.headProblems = c.problems
	if len(cfg.EngramLayers) > 0 {
		if tok == nil {
			m.EngramProblem = "tokenizer.json: missing or unreadable; the Engram token map is built from it"
		} else if m.Engram, err = NewEngramHash(cfg, tok); err != nil {
			m.EngramProblem = err.Error()
		}
	}
	m.layers = make([]*layer41Tensors, cfg.Layers)
	m.problems = make([][]string, cfg.Layers)
	for l := range cfg.Layers {
		c.problems = nil
		ly := c.layer41(cfg, l)
		if cfg.Roles[l].Engram && m.EngramProblem != "" {
			c.fail("Engram: %s", m.EngramProblem)
		}
		if len(c.problems) == 0 {
			m.layers[l] = ly
		}
		m.problems[l] = c.problems
	}
	seen := map[string]bool{}
	for _, t := range cat.Tensors {
		if rest, ok := strings.CutPrefix(t.Name, "mtp."); ok {
			stage, _, _ := strings.Cut(rest, ".")
			if !seen[stage] {
				seen[stage] = true
				m.mtp = append(m.mtp, "mtp."+stage)
			}
		}
	}
	return m, nil
}

// SetBackend makes the forwards and logits that follow run their matrix
// products (and the backend.V4Ops and backend.V41Ops b implements) on b; nil,
// the default, runs everything on the host. Like b, the model then
// serves one forward at a time.
func (m *Model41) SetBackend(b backend.Backend) { m.backend = b }

// Backend is the backend SetBackend set, nil for the host engine.
func (m *Model41) Backend() backend.Backend { return m.backend }

// Problems lists what is wrong with the tensors of layer l.
func (m *Model41) Problems(l int) []string { return m.problems[l] }

// Checked is the number of layers checked at Open, for Problems: the
// layers the checkpoint holds tensors for, not what config.json claims.
func (m *Model41) Checked() int { return len(m.problems) }

// HeadProblems lists what is wrong with the final norm and head.
func (m *Model41) HeadProblems() []string { return m.headProblems }

// DSparkStages lists the mtp.N prefixes present: DSpark draft stages,
// which trace/ lists and does not run.
func (m *Model41) DSparkStages() []string { return m.mtp }

// Runnable is the number of leading layers that can run.
func (m *Model41) Runnable() int {
	for l, p := range m.problems {
		if len(p) > 0 {
			return l
		}
	}
	return len(m.problems)
}

// tensor41 is checker.tensor for a V4.1 linear: its a8 input blocks are
// the config's FP8 block, and its name is remembered as expected.
func (c *checker) tensor41(cfg *Config41, want map[string]bool, name string, kind tensorKind, rows, cols int) *tensorRef {
	want[name] = true
	r := c.tensor(name, kind, rows, cols)
	if r != nil && r.quant {
		r.actBlock = cfg.FP8Block
		want[strings.TrimSuffix(name, ".weight")+".scale"] = true
	}
	return r
}

// layer41 checks the tensors model.py's Block(l) loads for l's role, and
// that nothing else is stored under layers.l.
func (c *checker) layer41(cfg *Config41, l int) *layer41Tensors {
	p := fmt.Sprintf("layers.%d.", l)
	d, hd := cfg.Hidden, cfg.HCMult*cfg.Hidden
	mix := (2 + cfg.HCMult) * cfg.HCMult
	role := cfg.Roles[l]
	want := map[string]bool{}
	t := func(name string, kind tensorKind, rows, cols int) *tensorRef {
		return c.tensor41(cfg, want, p+name, kind, rows, cols)
	}
	ly := &layer41Tensors{role: role}
	ly.index = l
	ly.attnNorm = t("attn_norm.weight", kindFloat, d, 0)
	ly.ffnNorm = t("ffn_norm.weight", kindFloat, d, 0)
	hc := func(site string) hcTensors {
		return hcTensors{fn: t(site+"_fn", kindFloat, mix, hd), base: t(site+"_base", kindFloat, mix, 0), scale: t(site+"_scale", kindFloat, 3, 0)}
	}
	ly.hcAttn, ly.hcFFN = hc("hc_attn"), hc("hc_ffn")
	ly.sink = t("attn.attn_sink", kindFloat, cfg.Heads, 0)
	ly.wqA = t("attn.wq_a.weight", kindLinear, cfg.QLoRA, d)
	ly.qNorm = t("attn.q_norm.weight", kindFloat, cfg.QLoRA, 0)
	ly.wqB = t("attn.wq_b.weight", kindLinear, cfg.Heads*cfg.HeadDim, cfg.QLoRA)
	ly.wkv = t("attn.wkv.weight", kindLinear, cfg.HeadDim, d)
	ly.kvNorm = t("attn.kv_norm.weight", kindFloat, cfg.HeadDim, 0)
	ly.woA = t("attn.wo_a.weight", kindLinear, cfg.OGroups*cfg.OLoRA, cfg.Heads*cfg.HeadDim/cfg.OGroups)
	ly.woB = t("attn.wo_b.weight", kindLinear, d, cfg.OGroups*cfg.OLoRA)
	if role.KVSource {
		ly.cWkv = t("attn.compressor.wkv.weight", kindFloat, cfg.HeadDim, d)
		if role.Ratio > 1 {
			ly.cWgate = t("attn.compressor.wgate.weight", kindFloat, cfg.HeadDim, d)
		}
		ly.cNorm = t("attn.compressor.norm.weight", kindFloat, cfg.HeadDim, 0)
	}
	if role.OwnsIndexK {
		ly.idxWk = t("attn.indexer.wk.weight", kindFloat, cfg.IndexDim, cfg.HeadDim)
		ly.idxKNm = t("attn.indexer.k_norm.weight", kindFloat, cfg.IndexDim, 0)
	}
	if role.IndexSource {
		ly.idxWqB = t("attn.indexer.wq_b.weight", kindLinear, cfg.IndexHeads*cfg.IndexDim, cfg.QLoRA)
		ly.idxWeights = t("attn.indexer.weights_proj.weight", kindFloat, cfg.IndexHeads, d)
	}
	ly.gate = t("ffn.gate.weight", kindFloat, cfg.RoutedExperts, d)
	ly.bias = t("ffn.gate.bias", kindFloat, cfg.RoutedExperts, 0)
	// bias_vl exists only with a vision tower; text prompts never use it.
	if c.cat.Tensor(p+"ffn.gate.bias_vl") != nil {
		ly.biasVL = t("ffn.gate.bias_vl", kindFloat, cfg.RoutedExperts, 0)
	}
	ly.experts = make([][3]*tensorRef, cfg.RoutedExperts)
	for e := range ly.experts {
		pe := fmt.Sprintf("ffn.experts.%d.", e)
		ly.experts[e] = [3]*tensorRef{
			t(pe+"w1.weight", kindExpert, cfg.MoEInter, d),
			t(pe+"w2.weight", kindExpert, d, cfg.MoEInter),
			t(pe+"w3.weight", kindExpert, cfg.MoEInter, d),
		}
	}
	ly.shared = [3]*tensorRef{
		t("ffn.shared_experts.w1.weight", kindLinear, cfg.MoEInter, d),
		t("ffn.shared_experts.w2.weight", kindLinear, d, cfg.MoEInter),
		t("ffn.shared_experts.w3.weight", kindLinear, cfg.MoEInter, d),
	}
	if role.Engram {
		ly.engram = c.engram(cfg, want, p, l)
	}
	ts := c.cat.Tensors
	for i := sort.Search(len(ts), func(i int) bool { return ts[i].Name >= p }); i < len(ts) && strings.HasPrefix(ts[i].Name, p); i++ {
		if !want[ts[i].Name] {
			c.fail("%s: tensor %s: not part of a %s layer (%s)", ts[i].Shard.Name, ts[i].Name, role.Role, role.Describe())
		}
	}
	return ly
}

// engram checks an Engram layer's table (read row by row, never whole),
// its projection and gate weights.
func (c *checker) engram(cfg *Config41, want map[string]bool, p string, l int) *engramTensors {
	i := slices.Index(cfg.EngramLayers, l)
	rows := cfg.EngramNumEmbeddings[i]
	cols := (cfg.EngramMaxNgram - 1) * cfg.EngramHeads
	e := &engramTensors{rows: rows, headDim: cfg.EngramHeadDim, scaleBy: cfg.FP8Block}
	name := p + "engram.embed.weight"
	want[name], want[p+"engram.embed.scale"] = true, true
	e.table, e.scale = c.cat.Tensor(name), c.cat.Tensor(p+"engram.embed.scale")
	switch {
	case e.table == nil || e.scale == nil:
		c.fail("tensor %s or its .scale: missing", name)
	case e.table.DType != safetensors.F8E4M3 || len(e.table.Shape) != 2 || e.table.Shape[0] != int64(rows) || e.table.Shape[1] != int64(cfg.EngramHeadDim):
		c.fail("%s: tensor %s: %s %v, want F8_E4M3 [%d, %d] (engram_num_embeddings, engram_head_dim)", e.table.Shard.Name, name, e.table.DType, e.table.Shape, rows, cfg.EngramHeadDim)
	case e.scale.DType != safetensors.F8E8M0 || len(e.scale.Shape) != 2 || e.scale.Shape[0] != int64(rows) || e.scale.Shape[1] != int64(cfg.EngramHeadDim/cfg.FP8Block):
		c.fail("%s: tensor %s: %s %v, want F8_E8M0 [%d, %d]", e.scale.Shard.Name, e.scale.Name, e.scale.DType, e.scale.Shape, rows, cfg.EngramHeadDim/cfg.FP8Block)
	}
	e.wkv = c.tensor41(cfg, want, p+"engram.wkv.weight", kindLinear, cfg.Hidden*(cfg.HCMult+1), cols*cfg.EngramHeadDim)
	e.qWeight = c.tensor41(cfg, want, p+"engram.q_weight", kindFloat, cfg.HCMult, cfg.Hidden)
	e.kWeight = c.tensor41(cfg, want, p+"engram.k_weight", kindFloat, cfg.HCMult, cfg.Hidden)
	return e
}

// LayerTensors returns the number of tensors, elements and bytes the
// checkpoint stores for layer l.
func (m *Model41) LayerTensors(l int) (tensors int, elements, bytes int64) {
	return (&Model{cat: m.cat}).LayerTensors(l)
}

// EmbedRows returns the embedding rows of ids, [len(ids), Hidden].
func (m *Model41) EmbedRows(ids []int) ([]float32, error) {
	return (&Model{Config: m.Config.Config, embed: m.embed}).EmbedRows(ids)
}

// layer41Weights are one V4.1 layer's decoded weights (routed experts and
// Engram rows excepted: read when used).
type layer41Weights struct {
	layerWeights
	cWkv, cWgate *linear
	cNorm        []float32
	idxWk        *linear
	idxKNorm     []float32
	engramWkv    *linear
	engramQK     []float32 // q_weight·k_weight [hc, D]
}

// loadLayer41 decodes layer l's weights, stopping when ctx is done.
func (m *Model41) loadLayer41(ctx context.Context, l int) (*layer41Weights, error) {
	t := m.layers[l]
	ld := &loader{ctx: ctx}
	w := &layer41Weights{}
	ld.attention(&w.layerWeights, &t.layerTensors)
	w.cWkv, w.cWgate, w.cNorm = ld.lin(t.cWkv), ld.lin(t.cWgate), ld.vec(t.cNorm)
	w.idxWk, w.idxKNorm = ld.lin(t.idxWk), ld.vec(t.idxKNm)
	w.idxWqB, w.idxWeights = ld.lin(t.idxWqB), ld.lin(t.idxWeights)
	w.gate = ld.lin(t.gate)
	w.bias = ld.vec(t.bias)
	for i := range w.shared {
		w.shared[i] = ld.lin(t.shared[i])
	}
	if e := t.engram; e != nil {
		w.engramWkv = ld.lin(e.wkv)
		q, k := ld.vec(e.qWeight), ld.vec(e.kWeight)
		if ld.err == nil {
			w.engramQK = make([]float32, len(q))
			for i := range q {
				w.engramQK[i] = q[i] * k[i]
			}
		}
	}
	w.bytes = ld.bytes
	return w, ld.err
}
