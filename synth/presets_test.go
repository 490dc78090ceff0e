package synth

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestContentsIsWhatIsWritten writes every preset and checks that
// Contents, which help texts state, counts what is on disk. The presets of
// over 256 MiB of data are written as holes when they can be (a Spec's
// shard plan does not look at values), so the test stays quick.
func TestContentsIsWhatIsWritten(t *testing.T) {
	modelTypes := map[Family]string{FamilyV41: "deepseek_v41", FamilyV4: "deepseek_v4", FamilyV3: "deepseek_v3", FamilyV2: "deepseek_v2"}
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			want, err := p.Contents()
			if err != nil {
				t.Fatal(err)
			}
			if want.Shards == 0 || want.Tensors == 0 || want.Bytes == 0 {
				t.Fatalf("Contents = %+v", want)
			}
			if p.Description == "" || p.Purpose == "" {
				t.Errorf("no description or purpose")
			}
			dir := t.TempDir()
			switch {
			case p.MLA != nil:
				if testing.Short() && want.Bytes > 256<<20 {
					t.Skip("writes the data")
				}
				err = WriteMLA(*p.MLA, dir)
			case want.Bytes > 256<<20:
				s := p.Spec
				s.Sparse = true
				err = WriteSpec(s, dir)
			default:
				err = Write(p.Name, dir)
			}
			if err != nil {
				t.Fatal(err)
			}
			c := openCheckpoint(t, dir)
			got := Contents{Family: want.Family, Shards: len(c.headers)}
			for name, h := range c.headers {
				got.Tensors += len(h.Tensors)
				got.Bytes += c.sizes[name] - h.DataStart
			}
			shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			if len(shards) != got.Shards {
				t.Errorf("%d shard files, the index names %d", len(shards), got.Shards)
			}
			if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
				got.Tokenizer = true
			}
			if got != want {
				t.Errorf("written: %+v\nContents: %+v", got, want)
			}
			var cfg struct {
				ModelType string `json:"model_type"`
			}
			b, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &cfg); err != nil || cfg.ModelType != modelTypes[want.Family] {
				t.Errorf("config.json model_type %q (%v), Contents says %s", cfg.ModelType, err, want.Family)
			}
		})
	}
}
