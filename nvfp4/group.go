package nvfp4

import (
	"sort"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
)

// group is the set of matrices that share one global exponent: w1 and w3
// of one expert, or w2 alone.
type group struct {
	scales []*checkpoint.Tensor // by name

	once sync.Once
	ge   int
	err  error
}

// g returns the group's global exponent, computed from its scales the
// first time. They are looked at where they lie (checkpoint.Tensor.View):
// reading every expert's scales for its g must not leave their bytes to
// the collector, nor copy them.
func (g *group) g() (int, error) {
	g.once.Do(func() {
		g.err = viewAll(g.scales, nil, func(scales [][]byte) error {
			g.ge = codecs.GlobalExponent(scales...)
			return nil
		})
		if g.err != nil {
			g.ge = 0
		}
	})
	return g.ge, g.err
}

// viewAll calls fn with the bytes of seen and of every tensor of ts, each
// seen in place (checkpoint.Tensor.View), all at once.
func viewAll(ts []*checkpoint.Tensor, seen [][]byte, fn func([][]byte) error) error {
	if len(ts) == 0 {
		return fn(seen)
	}
	return ts[0].View(0, ts[0].Size, func(b []byte) error {
		return viewAll(ts[1:], append(seen, b), fn)
	})
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
func (n *Transcoder) group(t *checkpoint.Tensor) *group {
	name := groupName(t)
	n.mu.Lock()
	defer n.mu.Unlock()
	if g, ok := n.groups[name]; ok {
		return g
	}
	g := &group{scales: []*checkpoint.Tensor{t.Scale}}
	if t.Proj == "w1" || t.Proj == "w3" {
		other := "w3"
		if t.Proj == "w3" {
			other = "w1"
		}
		partner := n.cat.Tensor(strings.TrimSuffix(base(t.Name), t.Proj) + other + ".weight")
		if partner != nil && n.converts(partner) {
			g.scales = append(g.scales, partner.Scale)
		}
	}
	sort.Slice(g.scales, func(i, j int) bool { return g.scales[i].Name < g.scales[j].Name })
	n.groups[name] = g
	return g
}
