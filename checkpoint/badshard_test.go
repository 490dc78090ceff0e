package checkpoint

import (
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

// TestBadShardsAreRecorded: each shard that cannot be opened is listed with
// its reason, its size when there is a file to serve, and the tensors the
// index places in it.
func TestBadShardsAreRecorded(t *testing.T) {
	dir := t.TempDir()
	writeShard(t, dir, "a.safetensors", spec("x", safetensors.F32, 4))
	writeFile(t, dir, "b.safetensors", rawShard(`{"y":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}}`, 4))
	writeIndex(t, dir, map[string]string{"x": "a.safetensors", "y": "b.safetensors", "w": "b.safetensors", "z": "c.safetensors"})
	writeJSON(t, dir, ConfigName, map[string]any{})
	c := mustOpen(t, dir)
	if len(c.BadShards) != 2 {
		t.Fatalf("bad shards %+v, want b and c", c.BadShards)
	}
	b, m := c.BadShards[0], c.BadShards[1]
	if b.Name != "b.safetensors" || b.Size != int64(len(rawShard(`{"y":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}}`, 4))) ||
		!strings.Contains(b.Reason, "Q7") || !slices.Equal(b.Tensors, []string{"w", "y"}) {
		t.Errorf("bad shard b: %+v", b)
	}
	if m.Name != "c.safetensors" || m.Size != -1 || !strings.Contains(m.Reason, "missing") || !slices.Equal(m.Tensors, []string{"z"}) {
		t.Errorf("missing shard c: %+v", m)
	}
	for _, f := range c.Files {
		if strings.HasSuffix(f.Name, ".safetensors") {
			t.Errorf("shard %s listed as an ordinary file", f.Name)
		}
	}
}

// TestIndexNamingANonShardFile: an index entry that names config.json says
// so in one problem, and config.json stays an ordinary file.
func TestIndexNamingANonShardFile(t *testing.T) {
	dir := t.TempDir()
	writeShard(t, dir, "a.safetensors", spec("x", safetensors.F32, 4))
	writeJSON(t, dir, ConfigName, map[string]any{"model_type": "deepseek_v3"})
	writeIndex(t, dir, map[string]string{"x": "a.safetensors", "lm_head.weight": ConfigName, "embed.weight": ConfigName})
	c := mustOpen(t, dir)
	var lines []string
	for _, p := range c.Problems {
		lines = append(lines, p.String())
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "maps 2 tensors (embed.weight first) to config.json, which is not a safetensors file") {
		t.Fatalf("problems:\n%s", strings.Join(lines, "\n"))
	}
	if !slices.ContainsFunc(c.Files, func(f File) bool { return f.Name == ConfigName }) {
		t.Fatalf("config.json left out of Files: %+v", c.Files)
	}
	if len(c.BadShards) != 0 {
		t.Fatalf("config.json recorded as a bad shard: %+v", c.BadShards)
	}
}
