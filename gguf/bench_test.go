package gguf_test

import (
	"context"
	"testing"

	"github.com/dsfs/dsfs/gguf"
)

// benchmarkFill computes every part of the tensors of one type of a
// recipe of synth's v4-tiny on one goroutine; MB/s is of output.
func benchmarkFill(b *testing.B, recipeName string, typ gguf.Type) {
	cat := openSynthV4(b)
	var r gguf.Recipe
	for _, x := range gguf.Recipes() {
		if x.Name == recipeName {
			r = x
		}
	}
	m, err := r.Plan(cat)
	if err != nil {
		b.Fatal(err)
	}
	var ts []gguf.Tensor
	var n int64
	for _, t := range m.Tensors {
		if t.Type == typ {
			ts = append(ts, t)
			n += t.Bytes()
		}
	}
	if n == 0 {
		b.Fatalf("%s: no %s tensor", recipeName, typ.Name)
	}
	b.SetBytes(n)
	ctx := context.Background()
	for b.Loop() {
		for _, t := range ts {
			for _, p := range t.Parts {
				dst := make([]byte, p.Rows*t.RowBytes())
				if err := t.Fill(ctx, p, 0, p.Rows, dst); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// BenchmarkFillQ8_0 is the FP8 dequantisation and Q8_0 encoding of
// MXFP4/'s dense matrices.
func BenchmarkFillQ8_0(b *testing.B) { benchmarkFill(b, "MXFP4", gguf.Q8_0) }

// BenchmarkFillMXFP4 is the converter's repack of the routed experts.
func BenchmarkFillMXFP4(b *testing.B) { benchmarkFill(b, "MXFP4", gguf.MXFP4) }

// BenchmarkFillIQ2XXS is q2/'s quantisation of the gate and up experts
// (through every core, as q2/ computes a block).
func BenchmarkFillIQ2XXS(b *testing.B) { benchmarkFill(b, "IQ2_XXS", gguf.IQ2_XXS) }
