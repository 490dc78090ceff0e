package views

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/vfile"
)

// TestBuildIsDeterministic builds every view of v41-tiny several times,
// concurrently as Build does, and checks that each build gives the same
// tree (paths, sizes, segments), warnings and stats keys.
func TestBuildIsDeterministic(t *testing.T) {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	describe := func() string {
		s, err := Build(cat, Options{Values: noHash})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var b strings.Builder
		s.Root.Walk(func(p string, n *vfile.Node) error {
			fmt.Fprintf(&b, "%s %v %v", p, n.Attr, n.From)
			if n.File != nil {
				fmt.Fprintf(&b, " %d:", n.File.Size())
				for _, seg := range n.File.Segments() {
					fmt.Fprintf(&b, " %T/%d", seg, seg.Len())
				}
			}
			b.WriteByte('\n')
			return nil
		})
		fmt.Fprintf(&b, "warnings %q\nstats %v\n", s.Warnings(), slices.Sorted(func(yield func(string) bool) {
			for k := range s.Stats() {
				if !yield(k) {
					return
				}
			}
		}))
		return b.String()
	}
	want := describe()
	for range 3 {
		if got := describe(); got != want {
			t.Fatalf("two builds differ:\n%s\nvs\n%s", got, want)
		}
	}
}

// closeCounter is a closer a test view starts, counting its closes.
type closeCounter struct{ closed *atomic.Int64 }

func (c closeCounter) Close() error { c.closed.Add(1); return nil }

// TestBuildFailureReportsFirstViewAndClosesAll: with views built
// concurrently and transient ones started first, a failed build reports
// the first failing view in registry order, as building them one after
// another does, and closes what every view started.
func TestBuildFailureReportsFirstViewAndClosesAll(t *testing.T) {
	cat, err := checkpoint.Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	var started, closed atomic.Int64
	view := func(name string, fail, transient bool) View {
		return View{Name: name, Transient: transient, build: func(s *Set, name string) (Built, error) {
			started.Add(1)
			b := Built{Root: vfile.Dir(""), Closers: []io.Closer{closeCounter{&closed}}}
			if fail {
				return b, errors.New(name + " failed")
			}
			return b, nil
		}}
	}
	// d, transient, starts first and fails: b, before it, still reports.
	registry := []View{view("a", false, false), view("b", true, false), view("c", false, false),
		view("d", true, true), view("e", false, false)}
	for range 20 {
		started.Store(0)
		closed.Store(0)
		s, err := build(cat, Options{}, registry)
		if err == nil {
			s.Close()
			t.Fatal("built")
		}
		if err.Error() != "view b: b failed" {
			t.Fatalf("error %q, want view b's", err)
		}
		if closed.Load() != started.Load() {
			t.Fatalf("%d views started, %d closed", started.Load(), closed.Load())
		}
	}
}

// TestNVFP4OutputsShared: nvfp4/ and nvfp4+engram-fp4/ serve the same
// expert tensors, made once: their records point to the same outputs, so
// the second view costs a pointer per tensor, not a second copy.
func TestNVFP4OutputsShared(t *testing.T) {
	s, _ := tinySet(t)
	shared := 0
	for _, sh := range s.Cat.Shards {
		a, b := s.Root.Child("nvfp4").Child(sh.Name), s.Root.Child("nvfp4+engram-fp4").Child(sh.Name)
		if a == nil || b == nil {
			continue
		}
		ra, rb := s.laidOut[a.File], s.laidOut[b.File]
		for _, o := range ra.outs {
			if o.Codec == "nvfp4_weight_scale" {
				if !slices.Contains(rb.outs, o) {
					t.Fatalf("%s: %s is made twice", sh.Name, o.Name)
				}
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatal("v41-tiny has no NVFP4 experts")
	}
}
