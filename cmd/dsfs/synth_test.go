package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/views"
)

// TestSynthHelpListsPresets: dsfs synth --help names every preset with its
// description, purpose and the shard count Contents computes (which
// synth's TestContentsIsWhatIsWritten holds equal to what is written).
func TestSynthHelpListsPresets(t *testing.T) {
	stdout, stderr, status := dsfs(t, "synth", "--help")
	if status != 0 || stderr != "" {
		t.Fatalf("status %d, stderr %q", status, stderr)
	}
	_, list, ok := strings.Cut(stdout, "\npresets:\n")
	if !ok {
		t.Fatalf("no list of presets:\n%s", stdout)
	}
	// An entry starts with a line "  NAME ..."; its other lines are
	// indented further.
	entries := make(map[string]string)
	var name string
	for _, line := range strings.Split(list, "\n") {
		if rest, ok := strings.CutPrefix(line, "  "); ok && !strings.HasPrefix(rest, " ") {
			name, _, _ = strings.Cut(rest, " ")
		}
		entries[name] += line + "\n"
	}
	for _, p := range synth.Presets() {
		c, err := p.Contents()
		if err != nil {
			t.Fatal(err)
		}
		entry, ok := entries[p.Name]
		if !ok {
			t.Errorf("preset %s is not listed:\n%s", p.Name, list)
			continue
		}
		for _, want := range []string{p.Description, "for " + p.Purpose, fmt.Sprintf(": %d shards, %d tensors", c.Shards, c.Tensors), presetViewsText(c)} {
			if !strings.Contains(entry, want) {
				t.Errorf("preset %s: the help lacks %q:\n%s", p.Name, want, entry)
			}
		}
	}
	if strings.Contains(stdout, "see --help") {
		t.Errorf("synth --help still points at itself:\n%s", stdout)
	}
}

// TestPresetViews holds presetViews, which synth --help prints, against
// the trace/ and gguf/ built from each preset's checkpoint; presets of
// more than 256 MiB of real data are left out (they take seconds to
// write), and follow the same rule.
func TestPresetViews(t *testing.T) {
	for _, p := range synth.Presets() {
		t.Run(p.Name, func(t *testing.T) {
			c, err := p.Contents()
			if err != nil {
				t.Fatal(err)
			}
			if c.Bytes > 256<<20 && (p.MLA != nil || !p.Spec.Sparse) {
				t.Skipf("writes %d bytes of data", c.Bytes)
			}
			dir := t.TempDir()
			if err := synth.Write(p.Name, dir); err != nil {
				t.Fatal(err)
			}
			src, err := openSource(dir, views.Options{Views: []string{"trace", "gguf"}})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			dirs := make(map[string][]string)
			for _, v := range src.set.Root.Children {
				dirs[v.Name] = childNames(v)
			}
			trace, gguf := presetViews(c)
			if built := !slices.Contains(dirs["trace"], "ERROR.txt"); built != trace {
				t.Errorf("synth --help says %q, and trace/ holds %v", presetViewsText(c), dirs["trace"])
			}
			if built := !slices.Contains(dirs["gguf"], "ERROR.txt"); built != gguf {
				t.Errorf("synth --help says %q, and gguf/ holds %v", presetViewsText(c), dirs["gguf"])
			}
		})
	}
}

func childNames(n *vfile.Node) []string {
	var names []string
	for _, c := range n.Children {
		names = append(names, c.Name)
	}
	return names
}
