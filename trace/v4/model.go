package v4

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/trace/backend"
)

// Model is a DeepSeek-V4 checkpoint in DeepSeek's flat layout, checked
// from its headers: every tensor each layer needs, by name, dtype and
// shape. Values are read when a layer runs.
type Model struct {
	Config *Config

	cat               *checkpoint.Catalog
	embed, head, norm *tensorRef
	hcHead            hcTensors
	layers            []*layerTensors // nil for a layer with problems
	problems          [][]string      // per layer
	headProblems      []string        // the hc head, final norm and head
	backend           backend.Backend // nil: the host engine
}

// hcTensors are one hyper-connection site's mixing weights: fn [m, hc·D],
// base [m] and scale [3] (the hc head: [hc, hc·D], [hc], [1]).
type hcTensors struct{ fn, base, scale *tensorRef }

// compressorTensors are a Compressor's weights.
type compressorTensors struct{ ape, wkv, wgate, norm *tensorRef }

// layerTensors are the tensors of one decoder layer.
type layerTensors struct {
	index             int
	attnNorm, ffnNorm *tensorRef
	hcAttn, hcFFN     hcTensors

	sink                  *tensorRef
	wqA, qNorm, wqB       *tensorRef
	wkv, kvNorm, woA, woB *tensorRef
	compressor            *compressorTensors // nil for SWA layers
	idxWqB, idxWeights    *tensorRef         // CSA layers
	idxCompressor         *compressorTensors // CSA layers
	gate, bias, tid2eid   *tensorRef         // bias or tid2eid
	experts               [][3]*tensorRef    // w1, w2, w3
	shared                [3]*tensorRef
}

// Open checks that cat holds a DeepSeek-V4 checkpoint in the flat layout.
// inference is DeepSeek's inference/config.json when the checkpoint has
// one (nil otherwise). It fails for a configuration it cannot read or
// without an embedding table; problems confined to a layer are reported
// by Problems.
func Open(cat *checkpoint.Catalog, inference []byte) (*Model, error) {
	if cat.ConfigBytes == nil {
		return nil, errors.New("config.json: missing or unreadable")
	}
	cfg, err := ParseConfig(cat.ConfigBytes, inference)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, cat: cat}
	c := &checker{cat: cat}
	m.embed = c.tensor("embed.weight", kindFloat, cfg.Vocab, cfg.Hidden)
	if m.embed == nil {
		return nil, errors.New(c.problems[0])
	}
	c.problems = nil
	hd := cfg.HCMult * cfg.Hidden
	m.head = c.tensor("head.weight", kindFloat, cfg.Vocab, cfg.Hidden)
	m.norm = c.tensor("norm.weight", kindFloat, cfg.Hidden, 0)
	m.hcHead = hcTensors{
		fn:    c.tensor("hc_head_fn", kindFloat, cfg.HCMult, hd),
		base:  c.tensor("hc_head_base", kindFloat, cfg.HCMult, 0),
		scale: c.tensor("hc_head_scale", kindFloat, 1, 0),
	}
	m.headProblems = c.problems
	// A config may name more layers than the checkpoint holds (a hostile
	// one 10^9, with as many compress_ratios): check one by one only up to
	// the first layer past the last that has tensors, and let that layer's
	// problem speak for the rest.
	last := -1
	for _, t := range cat.Tensors {
		last = max(last, t.Layer)
	}
	n := min(cfg.Layers, last+2)
	m.layers = make([]*layerTensors, n)
	m.problems = make([][]string, n)
	for l := range n {
		c.problems = nil
		ly := c.layer(cfg, l)
		if len(c.problems) == 0 {
			m.layers[l] = ly
		}
		m.problems[l] = c.problems
	}
	if n < cfg.Layers {
		m.problems[n-1] = []string{fmt.Sprintf("no tensors in the checkpoint, nor for layers %d-%d (config.json num_hidden_layers %d)", n, cfg.Layers-1, cfg.Layers)}
	}
	return m, nil
}

// Checked is the number of layers Open checked tensor by tensor: the
// config's layer count, or fewer when the config names layers the
// checkpoint holds no tensors for, in which case the last checked layer's
// problem covers every layer from it on.
func (m *Model) Checked() int { return len(m.problems) }

// Problems lists what is wrong with the tensors of layer l (nil when it
// can run), for l < Checked().
func (m *Model) Problems(l int) []string { return m.problems[l] }

// HeadProblems lists what is wrong with the hc head, final norm and head.
func (m *Model) HeadProblems() []string { return m.headProblems }

// Runnable is the number of leading layers that can run.
func (m *Model) Runnable() int {
	for l, p := range m.problems {
		if len(p) > 0 {
			return l
		}
	}
	return len(m.problems)
}

func (c *checker) hc(prefix string, rows, cols, scales int) hcTensors {
	return hcTensors{
		fn:    c.tensor(prefix+"_fn", kindFloat, rows, cols),
		base:  c.tensor(prefix+"_base", kindFloat, rows, 0),
		scale: c.tensor(prefix+"_scale", kindFloat, scales, 0),
	}
}

func (c *checker) compressor(prefix string, ratio, hd int, cfg *Config) *compressorTensors {
	coff := 1
	if ratio == 4 {
		coff = 2
	}
	return &compressorTensors{
		ape:   c.tensor(prefix+".ape", kindFloat, ratio, coff*hd),
		wkv:   c.tensor(prefix+".wkv.weight", kindFloat, coff*hd, cfg.Hidden),
		wgate: c.tensor(prefix+".wgate.weight", kindFloat, coff*hd, cfg.Hidden),
		norm:  c.tensor(prefix+".norm.weight", kindFloat, hd, 0),
	}
}

// layer checks the tensors model.py's Block(l) loads.
func (c *checker) layer(cfg *Config, l int) *layerTensors {
	p := fmt.Sprintf("layers.%d.", l)
	d, hd := cfg.Hidden, cfg.HCMult*cfg.Hidden
	mix := (2 + cfg.HCMult) * cfg.HCMult
	ly := &layerTensors{index: l}
	ly.attnNorm = c.tensor(p+"attn_norm.weight", kindFloat, d, 0)
	ly.ffnNorm = c.tensor(p+"ffn_norm.weight", kindFloat, d, 0)
	ly.hcAttn = c.hc(p+"hc_attn", mix, hd, 3)
	ly.hcFFN = c.hc(p+"hc_ffn", mix, hd, 3)
	a := p + "attn."
	ly.sink = c.tensor(a+"attn_sink", kindFloat, cfg.Heads, 0)
	ly.wqA = c.tensor(a+"wq_a.weight", kindLinear, cfg.QLoRA, d)
	ly.qNorm = c.tensor(a+"q_norm.weight", kindFloat, cfg.QLoRA, 0)
	ly.wqB = c.tensor(a+"wq_b.weight", kindLinear, cfg.Heads*cfg.HeadDim, cfg.QLoRA)
	ly.wkv = c.tensor(a+"wkv.weight", kindLinear, cfg.HeadDim, d)
	ly.kvNorm = c.tensor(a+"kv_norm.weight", kindFloat, cfg.HeadDim, 0)
	ly.woA = c.tensor(a+"wo_a.weight", kindLinear, cfg.OGroups*cfg.OLoRA, cfg.Heads*cfg.HeadDim/cfg.OGroups)
	ly.woB = c.tensor(a+"wo_b.weight", kindLinear, d, cfg.OGroups*cfg.OLoRA)
	if r := cfg.Ratio(l); r > 0 {
		ly.compressor = c.compressor(a+"compressor", r, cfg.HeadDim, cfg)
		if r == 4 {
			ly.idxWqB = c.tensor(a+"indexer.wq_b.weight", kindLinear, cfg.IndexHeads*cfg.IndexDim, cfg.QLoRA)
			ly.idxWeights = c.tensor(a+"indexer.weights_proj.weight", kindFloat, cfg.IndexHeads, d)
			ly.idxCompressor = c.compressor(a+"indexer.compressor", r, cfg.IndexDim, cfg)
		}
	}
	f := p + "ffn."
	ly.gate = c.tensor(f+"gate.weight", kindFloat, cfg.RoutedExperts, d)
	if cfg.HashRouted(l) {
		ly.tid2eid = c.tensor(f+"gate.tid2eid", kindIDs, cfg.Vocab, cfg.TopK)
	} else {
		ly.bias = c.tensor(f+"gate.bias", kindFloat, cfg.RoutedExperts, 0)
	}
	// Three matrices an expert: a config claiming more experts than the
	// checkpoint has tensors for (a hostile one 10^9) is one problem, not
	// one per claimed matrix.
	if n := len(c.cat.Tensors); 3*cfg.RoutedExperts > n {
		c.fail("n_routed_experts %d: the checkpoint holds %d tensors in all, fewer than 3 per expert", cfg.RoutedExperts, n)
		return ly
	}
	ly.experts = make([][3]*tensorRef, cfg.RoutedExperts)
	for e := range ly.experts {
		pe := fmt.Sprintf("%sexperts.%d.", f, e)
		ly.experts[e] = [3]*tensorRef{
			c.tensor(pe+"w1.weight", kindExpert, cfg.MoEInter, d),
			c.tensor(pe+"w2.weight", kindExpert, d, cfg.MoEInter),
			c.tensor(pe+"w3.weight", kindExpert, cfg.MoEInter, d),
		}
	}
	ly.shared = [3]*tensorRef{
		c.tensor(f+"shared_experts.w1.weight", kindLinear, cfg.MoEInter, d),
		c.tensor(f+"shared_experts.w2.weight", kindLinear, d, cfg.MoEInter),
		c.tensor(f+"shared_experts.w3.weight", kindLinear, cfg.MoEInter, d),
	}
	return ly
}

// LayerTensors returns the number of tensors, elements and bytes the
// checkpoint stores for layer l (every tensor named layers.l.*).
func (m *Model) LayerTensors(l int) (tensors int, elements, bytes int64) {
	prefix := fmt.Sprintf("layers.%d.", l)
	ts := m.cat.Tensors
	for i := sort.Search(len(ts), func(i int) bool { return ts[i].Name >= prefix }); i < len(ts) && strings.HasPrefix(ts[i].Name, prefix); i++ {
		tensors++
		bytes += ts[i].Size
		n := int64(1)
		for _, d := range ts[i].Shape {
			n *= d
		}
		elements += n
	}
	return tensors, elements, bytes
}

// EmbedRows returns the embedding rows of ids, [len(ids), Hidden].
func (m *Model) EmbedRows(ids []int) ([]float32, error) {
	d := m.Config.Hidden
	out := make([]float32, len(ids)*d)
	for i, id := range ids {
		if id < 0 || id >= m.Config.Vocab {
			return nil, fmt.Errorf("token id %d outside the vocabulary [0, %d)", id, m.Config.Vocab)
		}
		if err := m.embed.row(out[i*d:(i+1)*d], id); err != nil {
			return nil, err
		}
	}
	return out, nil
}
