package inventory

import (
	"fmt"
	"slices"
	"strings"
)

// Status is how a tensor compares between two checkpoints A and B.
type Status string

// The statuses Diff gives. A tensor is re-quantised when B holds its module
// in another representation: the same name with another dtype or shape and
// other bytes, or other tensor names for the same module (an MXFP4 scale
// that became NVFP4 weight_scale and weight_scale_2); a scale whose weight
// is re-quantised and whose bytes changed is re-quantised with it.
const (
	Same        Status = "same bytes"
	Different   Status = "different bytes"
	Requantised Status = "re-quantised"
	MissingInB  Status = "missing in B"
	MissingInA  Status = "missing in A"
	// Unhashed is a tensor of the same name, dtype and shape on both sides
	// whose bytes cannot be compared: a side was not hashed.
	Unhashed Status = "unhashed"
)

// Statuses lists every Status in the order reports show them.
var Statuses = []Status{Same, Different, Requantised, MissingInB, MissingInA, Unhashed}

// Side is a tensor as one checkpoint has it.
type Side struct {
	File   string  `json:"file"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	SHA256 string  `json:"sha256,omitempty"`
}

// Change is one tensor's comparison.
type Change struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	A      *Side  `json:"a,omitempty"`
	B      *Side  `json:"b,omitempty"`
	// As names B's tensors that stand for a tensor of A that B lacks.
	As []string `json:"as,omitempty"`
	// Note says what else differs (a dtype relabelled over the same
	// bytes).
	Note string `json:"note,omitempty"`
}

// Comparison is the tensor-by-tensor comparison of two checkpoints.
type Comparison struct {
	A       string         `json:"a"` // what A and B are (paths)
	B       string         `json:"b"`
	Counts  map[Status]int `json:"counts"`
	Changes []Change       `json:"tensors"` // A's tensors by name, then those only B has
}

func sideOf(r *Record) *Side {
	return &Side{File: r.File, DType: r.DType, Shape: r.Shape, SHA256: r.SHA256}
}

// module is a tensor name without its last component: the weight and its
// scales share it.
func module(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return name
}

// Diff compares the records of checkpoint a with those of b.
func Diff(a, b []Record) *Comparison {
	inA := make(map[string]*Record, len(a))
	for i := range a {
		inA[a[i].Name] = &a[i]
	}
	inB := make(map[string]*Record, len(b))
	onlyB := make(map[string][]string) // module -> B's names A lacks
	for i := range b {
		r := &b[i]
		inB[r.Name] = r
		if inA[r.Name] == nil {
			onlyB[module(r.Name)] = append(onlyB[module(r.Name)], r.Name)
		}
	}
	c := &Comparison{Counts: make(map[Status]int)}
	claimed := make(map[string]bool)
	requant := make(map[string]bool) // modules with a re-quantised tensor
	for _, ra := range sortedRecords(a) {
		ch := Change{Name: ra.Name, A: sideOf(ra)}
		rb := inB[ra.Name]
		switch {
		case rb == nil && len(onlyB[module(ra.Name)]) > 0:
			ch.Status, ch.As = Requantised, onlyB[module(ra.Name)]
			for _, n := range ch.As {
				claimed[n] = true
			}
		case rb == nil:
			ch.Status = MissingInB
		default:
			ch.B = sideOf(rb)
			ch.Status, ch.Note = compare(ra, rb)
		}
		if ch.Status == Requantised {
			requant[module(ra.Name)] = true
		}
		c.Changes = append(c.Changes, ch)
	}
	for i := range c.Changes {
		ch := &c.Changes[i]
		if ch.Status == Different && requant[module(ch.Name)] {
			ch.Status = Requantised
		}
		c.Counts[ch.Status]++
	}
	for _, rb := range sortedRecords(b) {
		if inA[rb.Name] == nil && !claimed[rb.Name] {
			c.Changes = append(c.Changes, Change{Name: rb.Name, Status: MissingInA, B: sideOf(rb)})
			c.Counts[MissingInA]++
		}
	}
	return c
}

// compare compares two tensors of the same name.
func compare(a, b *Record) (Status, string) {
	layout := a.DType == b.DType && slices.Equal(a.Shape, b.Shape)
	hashed := a.SHA256 != "" && b.SHA256 != ""
	switch {
	case hashed && a.SHA256 == b.SHA256 && layout:
		return Same, ""
	case hashed && a.SHA256 == b.SHA256:
		return Same, fmt.Sprintf("same bytes as %s %v, was %s %v", b.DType, b.Shape, a.DType, a.Shape)
	case !layout:
		return Requantised, fmt.Sprintf("%s %v -> %s %v", a.DType, a.Shape, b.DType, b.Shape)
	case hashed:
		return Different, ""
	}
	return Unhashed, ""
}

func sortedRecords(rs []Record) []*Record {
	out := make([]*Record, len(rs))
	for i := range rs {
		out[i] = &rs[i]
	}
	slices.SortFunc(out, func(x, y *Record) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// Text renders the comparison for people: the counts, then one line per
// tensor that is not the same bytes.
func (c *Comparison) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "A %s\nB %s\n", c.A, c.B)
	for _, s := range Statuses {
		if n := c.Counts[s]; n > 0 {
			fmt.Fprintf(&b, "%8d %s\n", n, s)
		}
	}
	for _, ch := range c.Changes {
		if ch.Status == Same && ch.Note == "" {
			continue
		}
		fmt.Fprintf(&b, "%-16s %s", ch.Status, ch.Name)
		switch {
		case ch.Note != "":
			fmt.Fprintf(&b, ": %s", ch.Note)
		case len(ch.As) > 0:
			fmt.Fprintf(&b, ": as %s", strings.Join(ch.As, ", "))
		case ch.A != nil && ch.B == nil:
			fmt.Fprintf(&b, " (%s %v in %s)", ch.A.DType, ch.A.Shape, ch.A.File)
		case ch.B != nil && ch.A == nil:
			fmt.Fprintf(&b, " (%s %v in %s)", ch.B.DType, ch.B.Shape, ch.B.File)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
