package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/manifest"
	"github.com/dsfs/dsfs/synth"
)

// TestHostileLayerCount: a config.json claiming far more layers than the
// shards hold mounts as fast as the honest one, with one line about the
// count from the catalog (and, where trace/ can run the model, one from
// it), never a line per layer.
func TestHostileLayerCount(t *testing.T) {
	needMount(t)
	for _, preset := range []string{"v41-tiny", "v3-tiny"} {
		for _, n := range []string{"100000", "1000000", "1000000000"} {
			t.Run(preset+"/"+n, func(t *testing.T) {
				dir := t.TempDir()
				if err := synth.Write(preset, dir); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, manifest.ConfigName)
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range []string{"num_hidden_layers", "n_layers"} {
					var doc map[string]any
					json.Unmarshal(b, &doc)
					if _, ok := doc[key]; !ok {
						continue
					}
					if b, err = manifest.PatchConfig(b, []string{key}, json.Number(n)); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				m := startMount(t, dir)
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("ready after %v, want under 2 s", d)
				}
				log := m.log.String()
				want := 1
				if preset == "v3-tiny" {
					want = 2 // the catalog's line and trace/'s
				}
				if got := strings.Count(log, "num_hidden_layers "+n); got != want || strings.Count(log, "\n") > 8 {
					t.Errorf("%d lines give num_hidden_layers %s, want %d; log:\n%s", got, n, want, log)
				}
			})
		}
	}
}
