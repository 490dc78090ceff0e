package deepseek2

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
)

// Model is a DeepSeek-V2/V3 checkpoint ready to run layer by layer. Open
// checks every tensor a layer needs by name, shape and dtype from the
// headers alone; values are read when a layer runs.
type Model struct {
	Config *Config
	Naming Naming

	cat    *checkpoint.Catalog
	embed  *checkpoint.Tensor
	layers []*layer // nil for a layer with problems
	// problems[l] lists what is wrong with layer l's tensors.
	problems [][]string
}

// layer is the tensors of one decoder layer.
type layer struct {
	index              int
	attnNorm, ffnNorm  *checkpoint.Tensor
	wq, wqA, qNorm     *checkpoint.Tensor // wq, or wqA + qNorm + wqB
	wqB                *checkpoint.Tensor
	wkvA, kvNorm, wkvB *checkpoint.Tensor
	wo                 *checkpoint.Tensor
	dense              [3]*checkpoint.Tensor // w1, w2, w3 of a dense FFN
	gate, bias         *checkpoint.Tensor    // the router; bias may be nil
	experts            [][3]*checkpoint.Tensor
	shared             [3]*checkpoint.Tensor // nil entries without shared experts
	// all is every tensor of the layer in the catalog, for accounting.
	all []*checkpoint.Tensor
}

// Open checks that cat holds a model this engine runs. It fails for a
// configuration it cannot run (an *trace.Unsupported says what is missing)
// or without an embedding table; problems confined to a layer are reported
// by Problems, and layers from the first bad one on cannot run.
func Open(cat *checkpoint.Catalog) (*Model, error) {
	if cat.ConfigBytes == nil {
		return nil, errors.New("config.json: missing or unreadable")
	}
	cfg, err := ParseConfig(cat.ConfigBytes)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, cat: cat}
	switch {
	case cat.Tensor("model.embed_tokens.weight") != nil:
		m.Naming = NamingHF
	case cat.Tensor("embed.weight") != nil:
		m.Naming = NamingFlat
	default:
		return nil, errors.New("no embedding table (model.embed_tokens.weight or embed.weight)")
	}
	c := checker{m: m}
	m.embed = c.tensor(m.Naming.Name("embed.weight"), cfg.Vocab, cfg.Hidden)
	if len(c.problems) > 0 {
		return nil, errors.New(c.problems[0])
	}
	// A config may name more layers than the checkpoint holds (a hostile
	// one 10^9): check one by one only up to the first layer past the last
	// that has tensors, and let that layer's problem speak for the rest.
	last := -1
	for _, t := range cat.Tensors {
		last = max(last, t.Layer)
	}
	n := min(cfg.Layers, last+2)
	m.layers = make([]*layer, n)
	m.problems = make([][]string, n)
	empty := false
	for l := range n {
		c.problems = nil
		ly := c.layer(l)
		if len(c.problems) == 0 {
			m.layers[l] = ly
		}
		m.problems[l] = c.problems
		empty = len(ly.all) == 0
	}
	if n < cfg.Layers && empty {
		m.problems[n-1] = []string{fmt.Sprintf("no tensors in the checkpoint, nor for layers %d-%d (config.json num_hidden_layers %d)", n, cfg.Layers-1, cfg.Layers)}
	}
	return m, nil
}

// Checked is the number of layers Open checked tensor by tensor: the
// config's layer count, or fewer when the config names layers the
// checkpoint holds no tensors for, in which case the last checked layer's
// problem covers every layer from it on.
func (m *Model) Checked() int { return len(m.problems) }

// Catalog returns the checkpoint the model reads.
func (m *Model) Catalog() *checkpoint.Catalog { return m.cat }

// Problems lists what is wrong with the tensors of layer l (nil when it can
// run), for l < Checked().
func (m *Model) Problems(l int) []string { return m.problems[l] }

// Runnable is the number of leading layers that can run: every layer
// before the first with a problem.
func (m *Model) Runnable() int {
	for l, p := range m.problems {
		if len(p) > 0 {
			return l
		}
	}
	return len(m.problems)
}

// LayerTensors returns the number of tensors, elements and bytes the
// checkpoint stores for layer l.
func (m *Model) LayerTensors(l int) (tensors int, elements, bytes int64) {
	ly := m.layers[l]
	if ly == nil {
		return 0, 0, 0
	}
	for _, t := range ly.all {
		tensors++
		bytes += t.Size
		n := int64(1)
		for _, d := range t.Shape {
			n *= d
		}
		elements += n
	}
	return tensors, elements, bytes
}

// checker resolves tensors by name and collects what is wrong with them.
type checker struct {
	m        *Model
	problems []string
}

func (c *checker) fail(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// tensor finds the tensor with the flat name's spelling in the model's
// naming and checks its shape (a vector when cols is 0) and dtype.
func (c *checker) tensor(name string, rows, cols int) *checkpoint.Tensor {
	t := c.m.cat.Tensor(name)
	want := []int64{int64(rows)}
	if cols > 0 {
		want = append(want, int64(cols))
	}
	switch {
	case t == nil:
		c.fail("tensor %s: missing", name)
		return nil
	case !slices.Equal(t.Shape, want):
		c.fail("%s: tensor %s: shape %v, want %v", t.Shard.Name, name, t.Shape, want)
		return nil
	}
	if err := decodable(t); err != nil {
		c.fail("%s: tensor %s: %v", t.Shard.Name, name, err)
		return nil
	}
	return t
}

func (c *checker) layer(l int) *layer {
	cfg, n := c.m.Config, c.m.Naming
	name := func(rest string) string { return n.Name(layerName(l, rest)) }
	ly := &layer{index: l}
	prefix := n.Name(layerName(l, ""))
	ts := c.m.cat.Tensors
	for i := sort.Search(len(ts), func(i int) bool { return ts[i].Name >= prefix }); i < len(ts) && strings.HasPrefix(ts[i].Name, prefix); i++ {
		ly.all = append(ly.all, ts[i])
	}
	if len(ly.all) == 0 {
		c.fail("no tensors named %s* in the checkpoint", prefix)
		return ly
	}
	ly.attnNorm = c.tensor(name("attn_norm.weight"), cfg.Hidden, 0)
	ly.ffnNorm = c.tensor(name("ffn_norm.weight"), cfg.Hidden, 0)
	qOut := cfg.Heads * cfg.QKHead()
	if cfg.QLoRA > 0 {
		ly.wqA = c.tensor(name("attn.wq_a.weight"), cfg.QLoRA, cfg.Hidden)
		ly.qNorm = c.tensor(name("attn.q_norm.weight"), cfg.QLoRA, 0)
		ly.wqB = c.tensor(name("attn.wq_b.weight"), qOut, cfg.QLoRA)
	} else {
		ly.wq = c.tensor(name("attn.wq.weight"), qOut, cfg.Hidden)
	}
	ly.wkvA = c.tensor(name("attn.wkv_a.weight"), cfg.KVLoRA+cfg.QKRope, cfg.Hidden)
	ly.kvNorm = c.tensor(name("attn.kv_norm.weight"), cfg.KVLoRA, 0)
	ly.wkvB = c.tensor(name("attn.wkv_b.weight"), cfg.Heads*(cfg.QKNope+cfg.VHead), cfg.KVLoRA)
	ly.wo = c.tensor(name("attn.wo.weight"), cfg.Hidden, cfg.Heads*cfg.VHead)
	mlp := func(prefix string, inter int) (w [3]*checkpoint.Tensor) {
		w[0] = c.tensor(n.Name(prefix+".w1.weight"), inter, cfg.Hidden)
		w[1] = c.tensor(n.Name(prefix+".w2.weight"), cfg.Hidden, inter)
		w[2] = c.tensor(n.Name(prefix+".w3.weight"), inter, cfg.Hidden)
		return w
	}
	if !cfg.IsMoE(l) {
		ly.dense = mlp(layerName(l, "ffn"), cfg.Inter)
	} else {
		ly.gate = c.tensor(name("ffn.gate.weight"), cfg.RoutedExperts, cfg.Hidden)
		if cfg.TopKMethod == TopKNoAuxTC {
			ly.bias = c.tensor(name("ffn.gate.bias"), cfg.RoutedExperts, 0)
		}
		// Each expert needs three tensors of the layer: a count the layer
		// cannot hold is one problem, not three per expert named.
		if cfg.RoutedExperts > len(ly.all)/3 {
			c.fail("n_routed_experts %d: layer %d holds only %d tensors", cfg.RoutedExperts, l, len(ly.all))
			return ly
		}
		ly.experts = make([][3]*checkpoint.Tensor, cfg.RoutedExperts)
		for e := range ly.experts {
			for i, p := range []string{"w1", "w2", "w3"} {
				rows, cols := cfg.MoEInter, cfg.Hidden
				if p == "w2" {
					rows, cols = cols, rows
				}
				ly.experts[e][i] = c.tensor(n.Name(expertName(l, e, p)), rows, cols)
			}
		}
		if cfg.SharedExperts > 0 {
			ly.shared = mlp(layerName(l, "ffn.shared_experts"), cfg.SharedInter())
		}
	}
	return ly
}

// EmbedRows returns the embedding rows of ids, [len(ids), Hidden].
func (m *Model) EmbedRows(ids []int) ([]float32, error) {
	d := m.Config.Hidden
	out := make([]float32, len(ids)*d)
	for i, id := range ids {
		if id < 0 || id >= m.Config.Vocab {
			return nil, fmt.Errorf("token id %d outside the vocabulary [0, %d)", id, m.Config.Vocab)
		}
		row, err := readRowsF32(m.embed, id, id+1)
		if err != nil {
			return nil, err
		}
		copy(out[i*d:], row)
	}
	return out, nil
}
