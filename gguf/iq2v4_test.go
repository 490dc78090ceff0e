package gguf_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/codecs/iq2xxs"
	"github.com/dsfs/dsfs/codecs/q2k"
	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/synth"
)

// openSynthV4 writes synth's v4-tiny (the V4-Flash layout with every
// routed expert row whole 256-weight blocks, so q2/ quantises them, and a
// synthesised tokenizer of its 1024 tokens).
func openSynthV4(t testing.TB) *checkpoint.Catalog {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "v4-synth")
	if err := synth.Write("v4-tiny", dir); err != nil {
		t.Fatal(err)
	}
	cat, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

// TestDeepseek4IQ2XXS checks the IQ2_XXS recipe of a deepseek4 checkpoint
// against its rule: each stacked routed expert tensor is, expert after
// expert, the exact MXFP4 decode quantised by ggml's IQ2_XXS (unit
// importance; gate, up) or Q2_K (reference path; down), and marked as
// q2/'s blocks; every other tensor, and the order, is the MXFP4 recipe's;
// general.file_type is MOSTLY_IQ2_XXS.
func TestDeepseek4IQ2XXS(t *testing.T) {
	cat := openSynthV4(t)
	m, err := recipe(t, "IQ2_XXS").Plan(cat)
	if err != nil {
		t.Fatal(err)
	}
	mx, err := recipe(t, "MXFP4").Plan(cat)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tensors) != len(mx.Tensors) || !strings.HasSuffix(m.Name, "-IQ2_XXS") {
		t.Fatalf("%s: %d tensors, MXFP4/ has %d", m.Name, len(m.Tensors), len(mx.Tensors))
	}
	const layers, experts = 4, 8
	quantised := 0
	for i, ten := range m.Tensors {
		ref := mx.Tensors[i]
		if ten.Name != ref.Name || fmt.Sprint(ten.Ne) != fmt.Sprint(ref.Ne) {
			t.Fatalf("tensor %d: %s %v, MXFP4/ has %s %v", i, ten.Name, ten.Ne, ref.Name, ref.Ne)
		}
		if !strings.HasSuffix(ten.Name, "_exps.weight") {
			if ten.Type != ref.Type || !bytes.Equal(tensorBytes(t, ten), tensorBytes(t, ref)) {
				t.Errorf("%s: %s, differs from MXFP4/'s %s", ten.Name, ten.Type.Name, ref.Type.Name)
			}
			continue
		}
		var l int
		var proj string
		fmt.Sscanf(ten.Name, "blk.%d.ffn_%s", &l, &proj)
		src := map[string]string{"gate_exps.weight": "w1", "down_exps.weight": "w2", "up_exps.weight": "w3"}[proj]
		typ := gguf.IQ2_XXS
		if src == "w2" {
			typ = gguf.Q2_K
		}
		if ten.Type != typ {
			t.Errorf("%s: %s, want %s", ten.Name, ten.Type.Name, typ.Name)
			continue
		}
		var want []byte
		for e := range experts {
			w := cat.Tensor(fmt.Sprintf("layers.%d.ffn.experts.%d.%s.weight", l, e, src))
			if p := ten.Parts[e]; p.Src != w || !p.Q2 || p.Rows != w.Shape[0] {
				t.Errorf("%s: part %d is %v rows of %v (q2 %v), want expert %d", ten.Name, e, p.Rows, p.Src.Name, p.Q2, e)
			}
			v := make([]float32, w.Shape[0]*w.Shape[1]*2)
			codecs.DecodeMXFP4(v, sourceBytes(t, w), sourceBytes(t, w.Scale))
			b := make([]byte, typ.RowBytes(w.Shape[1]*2)*w.Shape[0])
			if typ == gguf.Q2_K {
				q2k.QuantizeRef(b, v)
			} else {
				iq2xxs.Quantize(b, v, nil)
			}
			want = append(want, b...)
		}
		if !bytes.Equal(tensorBytes(t, ten), want) {
			t.Errorf("%s: bytes differ from q2/'s rule", ten.Name)
		}
		quantised++
	}
	if quantised != layers*3 {
		t.Errorf("%d quantised expert tensors, want %d", quantised, layers*3)
	}
	files, err := m.Files(0)
	if err != nil {
		t.Fatal(err)
	}
	if ft := readHeader(t, files[0]).KV["general.file_type"]; ft != uint32(gguf.FileTypeMostlyIQ2_XXS) {
		t.Errorf("general.file_type %v, want %d", ft, gguf.FileTypeMostlyIQ2_XXS)
	}
}

// TestDeepseek4IQ2XXSRefuses checks that a deepseek4 checkpoint whose
// experts q2/ keeps native (v4-tiny's 128-weight rows) gets no IQ2_XXS/,
// with one line saying why, while its MXFP4/ is made.
func TestDeepseek4IQ2XXSRefuses(t *testing.T) {
	cat := openV4(t)
	if _, err := recipe(t, "MXFP4").Plan(cat); err != nil {
		t.Fatal(err)
	}
	_, err := recipe(t, "IQ2_XXS").Plan(cat)
	if err == nil || !strings.Contains(err.Error(), "MXFP4/") || strings.Contains(err.Error(), "\n") {
		t.Errorf("IQ2_XXS of v4-tiny: %v", err)
	}
}

// TestTokenizerKeptOnce: the files of both deepseek4 recipes of one
// Recipes list, the single file and the first split alike, hold the very
// same bytes of the tokenizer's tokens, encoded once.
func TestTokenizerKeptOnce(t *testing.T) {
	cat := openSynthV4(t)
	var first []byte
	files := 0
	for _, r := range gguf.Recipes() {
		if r.Name != "IQ2_XXS" && r.Name != "MXFP4" {
			continue
		}
		m, err := r.Plan(cat)
		if err != nil {
			t.Fatal(err)
		}
		for _, split := range []int64{0, 1 << 20} {
			gfs, err := m.Files(split)
			if err != nil {
				t.Fatal(err)
			}
			tokens := gfs[0].Layout.Header[1] // the piece after the tokens' key
			if first == nil {
				first = tokens
			}
			if unsafe.SliceData(tokens) != unsafe.SliceData(first) || len(tokens) != len(first) {
				t.Errorf("%s, split %d: %s holds a tokenizer of its own", r.Name, split, gfs[0].Name)
			}
			files++
		}
	}
	if files != 4 || len(first) < 1000 {
		t.Fatalf("%d files, tokens piece of %d bytes", files, len(first))
	}
}
