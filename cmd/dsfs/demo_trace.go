package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace"
)

// presetNames lists the synth presets for a flag's help.
func presetNames() string {
	var names []string
	for _, p := range synth.Presets() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// mlaPreset reports whether a preset is a DeepSeek-V2/V3 checkpoint,
// which has no MXFP4 experts to sample.
func mlaPreset(name string) bool {
	for _, p := range synth.Presets() {
		if p.Name == name {
			return p.MLA != nil
		}
	}
	return false
}

// printTraceSample shows what trace/ computes: the routing of the first
// MoE layer, read through the mount (which runs the layers up to it), or
// why trace/ cannot run this checkpoint.
func printTraceSample(w io.Writer, dir string) error {
	if b, err := os.ReadFile(filepath.Join(dir, "ERROR.txt")); err == nil {
		fmt.Fprintf(w, "\n%s", b)
		if _, err := os.Stat(filepath.Join(dir, "layers")); err != nil {
			return nil
		}
	}
	layers, err := filepath.Glob(filepath.Join(dir, "layers", "*.json"))
	if err != nil || len(layers) == 0 {
		return err
	}
	for _, p := range layers {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var rec struct {
			Layer    int `json:"layer"`
			TimingMS struct {
				Forward float64 `json:"forward"`
			} `json:"timing_ms"`
			MLA struct {
				LatentCacheBytes int64 `json:"latent_cache_bytes"`
				EagerCacheBytes  int64 `json:"eager_cache_bytes"`
			} `json:"mla"`
			Routing *trace.RoutingTrace `json:"routing"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if rec.Routing == nil {
			continue
		}
		r := rec.Routing
		fmt.Fprintf(w, "\ntrace/layers/%s: layer %d ran in %.1f ms", filepath.Base(p), rec.Layer, rec.TimingMS.Forward)
		if rec.MLA.LatentCacheBytes > 0 { // V2/V3's MLA
			fmt.Fprintf(w, "; latent cache %d B against %d B of eager K/V", rec.MLA.LatentCacheBytes, rec.MLA.EagerCacheBytes)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  routes %d, gini %.3f, effective experts %.2f\n", r.AggregateMetrics.Routes, r.AggregateMetrics.Gini, r.AggregateMetrics.EffectiveExperts)
		pr := r.PerPrompt[min(1, len(r.PerPrompt)-1)]
		for i, tr := range pr.TokenRoutes[:min(6, len(pr.TokenRoutes))] {
			piece := "null"
			if tr.DecodedPiece != nil {
				piece = fmt.Sprintf("%q", *tr.DecodedPiece)
			}
			var es []string
			for _, e := range tr.ExpertsByWeight {
				es = append(es, fmt.Sprintf("%d (%.2f)", e.Expert, e.Weight))
			}
			fmt.Fprintf(w, "  %s token %d %-12s -> experts %s\n", pr.ID, i, piece, strings.Join(es, ", "))
		}
		return nil
	}
	return nil
}
