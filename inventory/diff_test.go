package inventory

import (
	"context"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/synth"
)

func rec(name, dtype string, shape []int64, sha string) Record {
	return Record{Name: name, File: "m.safetensors", DType: dtype, Shape: shape, SHA256: sha}
}

func TestDiff(t *testing.T) {
	sq := []int64{4, 4}
	a := []Record{
		rec("same.weight", "BF16", sq, "aa"),
		rec("changed.weight", "BF16", sq, "bb"),
		rec("gone.weight", "BF16", sq, "cc"),
		// MXFP4 -> NVFP4: the weight keeps its bytes as U8, the scale
		// becomes weight_scale and weight_scale_2.
		rec("e.w1.weight", "I8", sq, "dd"),
		rec("e.w1.scale", "F8_E8M0", []int64{4, 1}, "ee"),
		// FP8 -> FP4 Engram: both tensors keep their names.
		rec("g.weight", "F8_E4M3", []int64{4, 64}, "ff"),
		rec("g.scale", "F8_E8M0", []int64{4, 2}, "gg"),
		rec("unhashed.weight", "BF16", sq, ""),
	}
	b := []Record{
		rec("same.weight", "BF16", sq, "aa"),
		rec("changed.weight", "BF16", sq, "b2"),
		rec("e.w1.weight", "U8", sq, "dd"),
		rec("e.w1.weight_scale", "F8_E4M3", []int64{4, 2}, "e1"),
		rec("e.w1.weight_scale_2", "F32", []int64{}, "e2"),
		rec("g.weight", "I8", []int64{4, 32}, "f2"),
		rec("g.scale", "F8_E8M0", []int64{4, 2}, "g2"),
		rec("unhashed.weight", "BF16", sq, "hh"),
		rec("new.weight", "BF16", sq, "ii"),
	}
	c := Diff(a, b)
	want := map[string]Status{
		"same.weight": Same, "changed.weight": Different, "gone.weight": MissingInB,
		"e.w1.weight": Same, "e.w1.scale": Requantised, "g.weight": Requantised, "g.scale": Requantised,
		"unhashed.weight": Unhashed, "new.weight": MissingInA,
	}
	got := map[string]Status{}
	for _, ch := range c.Changes {
		got[ch.Name] = ch.Status
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
	counts := map[Status]int{Same: 2, Different: 1, MissingInB: 1, Requantised: 3, Unhashed: 1, MissingInA: 1}
	if !reflect.DeepEqual(c.Counts, counts) {
		t.Errorf("counts %v, want %v", c.Counts, counts)
	}
	for _, ch := range c.Changes {
		switch ch.Name {
		case "e.w1.scale":
			if !reflect.DeepEqual(ch.As, []string{"e.w1.weight_scale", "e.w1.weight_scale_2"}) {
				t.Errorf("e.w1.scale re-quantised as %v", ch.As)
			}
		case "e.w1.weight":
			if !strings.Contains(ch.Note, "U8") {
				t.Errorf("e.w1.weight: note %q does not say the dtype changed", ch.Note)
			}
		}
	}
	text := c.Text()
	for _, line := range []string{"re-quantised     e.w1.scale: as e.w1.weight_scale, e.w1.weight_scale_2", "missing in A     new.weight", "1 different bytes"} {
		if !strings.Contains(text, line) {
			t.Errorf("text lacks %q:\n%s", line, text)
		}
	}
	if strings.Contains(text, "same.weight") {
		t.Errorf("text lists an unchanged tensor:\n%s", text)
	}
}

// TestDiffCheckpoints compares v41-tiny with a copy of it that has one
// changed tensor.
func TestDiffCheckpoints(t *testing.T) {
	dir := copyDir(t, tinyDir)
	if err := synth.PatchTensor(dir, "layers.1.ffn.gate.bias", func(b []byte) { binary.LittleEndian.PutUint32(b, 0) }); err != nil {
		t.Fatal(err)
	}
	a, err := New(open(t, tinyDir), Options{}).Records(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(open(t, dir), Options{}).Records(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := Diff(a, b)
	if c.Counts[Different] != 1 || c.Counts[Same] != len(a)-1 || len(c.Changes) != len(a) {
		t.Fatalf("counts %v for %d tensors", c.Counts, len(a))
	}
	for _, ch := range c.Changes {
		if ch.Status == Different && ch.Name != "layers.1.ffn.gate.bias" {
			t.Errorf("%s differs", ch.Name)
		}
	}
}
