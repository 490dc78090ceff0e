package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/sourcefile"
)

const (
	shard1 = "model-00001-of-00003.safetensors"
	shard2 = "model-00002-of-00003.safetensors"
	shard3 = "model-00003-of-00003.safetensors"
)

// goodCheckpoint writes config.json and two valid shards of a small V4.1
// layout, and returns the weight map (without an index written) so that a
// case can add to it.
func goodCheckpoint(t *testing.T, dir string) map[string]string {
	t.Helper()
	writeJSON(t, dir, ConfigName, map[string]any{"model_type": "deepseek_v41", "num_hidden_layers": 2,
		"quantization_config": map[string]any{"quant_method": "fp8", "weight_block_size": []int{32, 32}}})
	writeShard(t, dir, shard1,
		spec("layers.0.ffn.experts.0.w1.weight", i8, 32, 32),
		spec("layers.0.ffn.experts.0.w1.scale", e8m0, 32, 2),
		spec("embed.weight", bf16, 16, 64))
	writeShard(t, dir, shard2,
		spec("layers.1.attn.wq_a.weight", e4m3, 64, 64),
		spec("layers.1.attn.wq_a.scale", e8m0, 2, 2),
		spec("head.weight", bf16, 16, 64))
	return map[string]string{
		"layers.0.ffn.experts.0.w1.weight": shard1, "layers.0.ffn.experts.0.w1.scale": shard1, "embed.weight": shard1,
		"layers.1.attn.wq_a.weight": shard2, "layers.1.attn.wq_a.scale": shard2, "head.weight": shard2,
	}
}

// lengthPrefixed is a shard whose length prefix says n whatever follows.
func lengthPrefixed(n uint64, rest string) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	return string(b[:]) + rest
}

// TestBadInput checks every bad input of FORMATS.md: each gives exactly
// one problem naming its file (and tensor) and reason, and the good shards
// still open.
func TestBadInput(t *testing.T) {
	outside := t.TempDir() // a valid shard outside the checkpoint: never to be opened
	writeShard(t, outside, "evil.safetensors", spec("evil", f32, 1))
	const x = `"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	tests := []struct {
		name       string
		shard3     string // content of shard3 ("" for none)
		entries    map[string]string
		file       string
		tensor     string
		reason     string
		goodShards int
		setup      func(t *testing.T, dir string)
	}{
		{name: "header length beyond the file", shard3: lengthPrefixed(1000, `{}`), file: shard3, reason: "runs past the end"},
		{name: "header over 100 MB", shard3: lengthPrefixed(100_000_001, `{}`), file: shard3, reason: "exceeds the 100000000-byte limit"},
		{name: "JSON that does not parse", shard3: rawShard(`{"x":{"dtype":"F32",`, 0), file: shard3, tensor: "x", reason: "header JSON"},
		{name: "header not UTF-8", shard3: rawShard("{\"\xff\":{}}", 0), file: shard3, reason: "not valid UTF-8"},
		{name: "unknown dtype", shard3: rawShard(`{"x":{"dtype":"F7","shape":[2],"data_offsets":[0,2]}}`, 2), file: shard3, tensor: "x", reason: `unknown dtype "F7"`},
		{name: "shape x size != range", shard3: rawShard(`{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), file: shard3, tensor: "x", reason: "needs 12 bytes, data_offsets give 8"},
		{name: "overlap", shard3: rawShard(`{`+x+`,"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12), file: shard3, tensor: "y", reason: "overlap"},
		{name: "gap", shard3: rawShard(`{`+x+`,"y":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}`, 16), file: shard3, tensor: "y", reason: "gap"},
		{name: "past the end", shard3: rawShard(`{`+x+`}`, 4), file: shard3, reason: "past the end"},
		{name: "trailing bytes", shard3: rawShard(`{`+x+`}`, 12), file: shard3, reason: "trailing bytes"},
		{name: "metadata not string to string", shard3: rawShard(`{"__metadata__":{"k":1},`+x+`}`, 8), file: shard3, reason: "__metadata__"},
		{name: "duplicate key", shard3: rawShard(`{`+x+`,`+x+`}`, 8), file: shard3, tensor: "x", reason: "duplicate key"},
		{name: "index entry absolute", entries: map[string]string{"evil": filepath.Join(outside, "evil.safetensors")}, file: IndexName, reason: "is an absolute path; refused"},
		{name: "index entry with ..", entries: map[string]string{"evil": "../" + filepath.Base(outside) + "/evil.safetensors"}, file: IndexName, reason: "has a .. component; refused"},
		{name: "index entry with inner ..", entries: map[string]string{"evil": "sub/../../evil.safetensors"}, file: IndexName, reason: "has a .. component; refused"},
		// The shard stays listed for its other tensors: the one entry is the
		// only fault, and the tensor is still found where it is.
		{name: "index entry with .. for one tensor of a good shard", entries: map[string]string{"embed.weight": "../" + shard1}, file: IndexName, reason: "has a .. component; refused"},
		{name: "missing shard", entries: map[string]string{"x": shard3}, file: shard3, reason: "missing (index entries: 1)"},
		{name: "scale shape mismatch", shard3: string(shardBytes(t, spec("w.weight", e4m3, 64, 64), spec("w.scale", e8m0, 3, 2))),
			entries: map[string]string{"w.weight": shard3, "w.scale": shard3}, file: shard3, tensor: "w.scale", reason: "does not fit weight w.weight", goodShards: 3},
		{name: "index tensor missing from its shard", shard3: string(shardBytes(t, spec("y", f32, 1))), entries: map[string]string{"x": shard3, "y": shard3},
			file: shard3, tensor: "x", reason: "listed in the index but not in the shard", goodShards: 3},
		{name: "tensor not in the index", shard3: string(shardBytes(t, spec("x", f32, 1), spec("stray", f32, 1))), entries: map[string]string{"x": shard3},
			file: shard3, tensor: "stray", reason: "in the shard but not in the index", goodShards: 3},
		{name: "tensor the index puts elsewhere", shard3: string(shardBytes(t, spec("x", f32, 1), spec("embed.weight", bf16, 16, 64))), entries: map[string]string{"x": shard3},
			file: shard3, tensor: "embed.weight", reason: "the index places it in " + shard1, goodShards: 3},
		{name: "shard is a directory", entries: map[string]string{"x": "sub"}, file: "sub", reason: "not a regular file",
			setup: func(t *testing.T, dir string) { os.Mkdir(filepath.Join(dir, "sub"), 0o755) }},
		// Opening a pipe for reading would block until a writer came.
		{name: "shard is a named pipe", entries: map[string]string{"x": "pipe.safetensors"}, file: "pipe.safetensors", reason: "not a regular file",
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "pipe.safetensors"), 0o644); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			wm := goodCheckpoint(t, dir)
			if tt.shard3 != "" {
				writeFile(t, dir, shard3, tt.shard3)
				if tt.entries == nil {
					wm["x"] = shard3
				}
			}
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			for k, v := range tt.entries {
				wm[k] = v
			}
			writeIndex(t, dir, wm)
			c := mustOpen(t, dir)
			if len(c.Problems) != 1 {
				t.Fatalf("%d problems, want 1: %v", len(c.Problems), c.Problems)
			}
			p := c.Problems[0]
			if p.File != tt.file || p.Tensor != tt.tensor || !strings.Contains(p.Reason, tt.reason) {
				t.Errorf("problem %q, want file %q tensor %q reason containing %q", p, tt.file, tt.tensor, tt.reason)
			}
			if tt.goodShards == 0 {
				tt.goodShards = 2
			}
			if len(c.Shards) != tt.goodShards || c.Shard(shard1) == nil || c.Shard(shard2) == nil {
				t.Errorf("shards %v, want the %d good ones", shardNames(c), tt.goodShards)
			}
			for _, name := range []string{"embed.weight", "head.weight", "layers.0.ffn.experts.0.w1.weight"} {
				if c.Tensor(name) == nil {
					t.Errorf("good tensor %s not catalogued", name)
				}
			}
			if c.Tensor("evil") != nil {
				t.Errorf("a tensor of a refused entry was catalogued")
			}
			for _, f := range c.Files {
				if f.Name == shard3 {
					t.Errorf("shard %s listed among plain files", shard3)
				}
			}
		})
	}
}

func shardBytes(t *testing.T, specs ...safetensors.Spec) []byte {
	t.Helper()
	dir := t.TempDir()
	writeShard(t, dir, "s", specs...)
	b, err := os.ReadFile(filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func shardNames(c *Catalog) []string {
	var names []string
	for _, s := range c.Shards {
		names = append(names, s.Name)
	}
	return names
}

// TestHFCacheSnapshot opens a Hugging Face cache snapshot, where every file
// is a symbolic link into ../../blobs, outside the snapshot directory.
func TestHFCacheSnapshot(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "models--deepseek-ai--DeepSeek-V4.1")
	flat := t.TempDir()
	wm := goodCheckpoint(t, flat)
	writeIndex(t, flat, wm)
	writeFile(t, flat, "tokenizer.json", "{}")
	snap := filepath.Join(repo, "snapshots", "1bae0e1088993b9b82de08f59de5be5a34e42170")
	if err := os.MkdirAll(filepath.Join(repo, "blobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(flat)
	for i, e := range entries {
		blob := fmt.Sprintf("%064x", i)
		if err := os.Rename(filepath.Join(flat, e.Name()), filepath.Join(repo, "blobs", blob)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	c := mustOpen(t, snap)
	if len(c.Problems) != 0 || len(c.Shards) != 2 || len(c.Tensors) != 6 {
		t.Fatalf("problems %v, shards %v, %d tensors; want none, 2, 6", c.Problems, shardNames(c), len(c.Tensors))
	}
	if c.Config.ModelType != "deepseek_v41" {
		t.Errorf("config not read through its link: %+v", c.Config)
	}
	var files []string
	for _, f := range c.Files {
		files = append(files, f.Name)
		if f.Size == 0 {
			t.Errorf("%s: size of the link, not of its blob", f.Name)
		}
	}
	if got := strings.Join(files, " "); got != "config.json model.safetensors.index.json tokenizer.json" {
		t.Errorf("files %q", got)
	}
	buf := make([]byte, 4)
	w := c.Tensor("embed.weight")
	if _, err := w.Shard.ReadAt(buf, w.Offset); err != nil {
		t.Fatal(err)
	}
}

// TestLinkedDir opens a checkpoint through a symbolic link to its directory.
func TestLinkedDir(t *testing.T) {
	dir := t.TempDir()
	writeIndex(t, dir, goodCheckpoint(t, dir))
	link := filepath.Join(t.TempDir(), "model")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, link)
	if c.Dir != link || len(c.Problems) != 0 || len(c.Shards) != 2 || len(c.Files) != 2 {
		t.Fatalf("dir %s, problems %v, shards %v, files %v", c.Dir, c.Problems, shardNames(c), c.Files)
	}
	if want := filepath.Join(link, ConfigName); c.Files[0].Path != want || c.Shards[0].Path != filepath.Join(link, shard1) {
		t.Errorf("paths %s, %s; want them under %s", c.Files[0].Path, c.Shards[0].Path, link)
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	wm := goodCheckpoint(t, dir)
	writeIndex(t, dir, wm)
	writeFile(t, dir, "tokenizer.json", "{}")
	writeFile(t, dir, ".gitattributes", "*.safetensors filter=lfs")
	writeFile(t, dir, "original/params.json", "{}")
	writeFile(t, dir, ".cache/huggingface/download/x.metadata", "x")
	writeFile(t, dir, "stray.safetensors", "not in the index")
	if err := os.Symlink("nowhere", filepath.Join(dir, "dangling.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("original", filepath.Join(dir, "linked-dir")); err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, dir)
	var files []string
	for _, f := range c.Files {
		files = append(files, f.Name)
		if f.Path != filepath.Join(dir, filepath.FromSlash(f.Name)) {
			t.Errorf("%s: path %s", f.Name, f.Path)
		}
	}
	want := ".gitattributes config.json model.safetensors.index.json original/params.json stray.safetensors tokenizer.json"
	if got := strings.Join(files, " "); got != want {
		t.Errorf("files\n%s, want\n%s", got, want)
	}
	if len(c.Problems) != 1 || c.Problems[0] != (Problem{File: "dangling.txt", Reason: "broken symbolic link"}) {
		t.Errorf("problems %v, want the dangling link", c.Problems)
	}
	index, err := os.ReadFile(filepath.Join(dir, IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(index); c.IndexSHA256 != hex.EncodeToString(sum[:]) || string(c.ConfigBytes) == "" {
		t.Errorf("index hash %q or config bytes not kept", c.IndexSHA256)
	}
}

// TestShardSources checks the three ways of finding shards and what an
// unusable index falls back to.
func TestShardSources(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, dir string)
		shards   string
		problems string
	}{
		{"single model.safetensors", func(t *testing.T, dir string) {
			writeJSON(t, dir, ConfigName, map[string]any{})
			writeShard(t, dir, singleName, spec("a", f32, 1))
			writeShard(t, dir, "consolidated.safetensors", spec("a", f32, 1))
		}, "model.safetensors", ""},
		{"every top-level file", func(t *testing.T, dir string) {
			writeJSON(t, dir, ConfigName, map[string]any{})
			writeShard(t, dir, "b.safetensors", spec("b", f32, 1), spec("dup", f32, 1))
			writeShard(t, dir, "a.safetensors", spec("a", f32, 1), spec("dup", f32, 1))
			writeShard(t, dir, "sub/c.safetensors", spec("c", f32, 1))
		}, "a.safetensors b.safetensors", "b.safetensors: tensor dup: also in a.safetensors; this copy is ignored"},
		{"index that does not parse", func(t *testing.T, dir string) {
			writeJSON(t, dir, ConfigName, map[string]any{})
			writeShard(t, dir, "a.safetensors", spec("a", f32, 1))
			writeFile(t, dir, IndexName, `{"weight_map": {`)
		}, "a.safetensors", IndexName + ": does not parse: unexpected end of JSON input; opening every *.safetensors file instead"},
		{"index without weight_map", func(t *testing.T, dir string) {
			writeJSON(t, dir, ConfigName, map[string]any{})
			writeShard(t, dir, "a.safetensors", spec("a", f32, 1))
			writeFile(t, dir, IndexName, `{"metadata": {}}`)
		}, "a.safetensors", IndexName + ": has no weight_map object; opening every *.safetensors file instead"},
		{"index entry not a string", func(t *testing.T, dir string) {
			writeJSON(t, dir, ConfigName, map[string]any{})
			writeShard(t, dir, "a.safetensors", spec("a", f32, 1), spec("b", f32, 1))
			writeFile(t, dir, IndexName, `{"weight_map": {"a": "a.safetensors", "b": 7}}`)
		}, "a.safetensors", IndexName + ": tensor b: weight_map value 7 is not a file name"},
		{"index entry cleaned", func(t *testing.T, dir string) {
			writeJSON(t, dir, ConfigName, map[string]any{})
			writeShard(t, dir, "a.safetensors", spec("a", f32, 1), spec("b", f32, 1))
			writeIndex(t, dir, map[string]string{"a": "./a.safetensors", "b": "a.safetensors"})
		}, "a.safetensors", ""},
		{"config that does not parse", func(t *testing.T, dir string) {
			writeFile(t, dir, ConfigName, `{"model_type": `)
			writeShard(t, dir, singleName, spec("a", f32, 1))
		}, "model.safetensors", ConfigName + ": not a JSON object: unexpected EOF"},
		{"no config", func(t *testing.T, dir string) {
			writeShard(t, dir, singleName, spec("a", f32, 1))
		}, "model.safetensors", ConfigName + ": missing"},
		{"config only", func(t *testing.T, dir string) {
			writeJSON(t, dir, ConfigName, map[string]any{})
		}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			c := mustOpen(t, dir)
			if got := strings.Join(shardNames(c), " "); got != tt.shards {
				t.Errorf("shards %q, want %q", got, tt.shards)
			}
			var ps []string
			for _, p := range c.Problems {
				ps = append(ps, p.String())
			}
			if got := strings.Join(ps, "\n"); got != tt.problems {
				t.Errorf("problems\n%s\nwant\n%s", got, tt.problems)
			}
		})
	}
}

func TestOpenFails(t *testing.T) {
	empty := t.TempDir()
	notDir := filepath.Join(t.TempDir(), "file")
	writeFile(t, filepath.Dir(notDir), "file", "x")
	onlyReadme := t.TempDir()
	writeFile(t, onlyReadme, "README.md", "x")
	missing := filepath.Join(empty, "missing")
	for _, tc := range []struct{ dir, want string }{
		{missing, "source checkpoint directory " + missing + ": no such file or directory"},
		{notDir, "source checkpoint directory " + notDir + ": not a directory"},
		{empty, empty + ": no config.json and no safetensors files"},
		{onlyReadme, onlyReadme + ": no config.json and no safetensors files"},
	} {
		c, err := Open(tc.dir)
		if err == nil {
			c.Close()
			t.Errorf("Open(%s) succeeded", tc.dir)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Open(%s): %q, want %q", tc.dir, err, tc.want)
		}
	}
	if _, err := Open(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a missing directory: %v is not fs.ErrNotExist", err)
	}
}

func TestProblemsSorted(t *testing.T) {
	dir := t.TempDir()
	writeShard(t, dir, "b.safetensors", spec("w.weight", e4m3, 64, 64), spec("w.scale", e8m0, 3, 3))
	writeShard(t, dir, "a.safetensors", spec("v.weight", e4m3, 64, 64), spec("v.scale", e8m0, 5, 3))
	writeFile(t, dir, "c.safetensors", "junk")
	c := mustOpen(t, dir)
	var files []string
	for _, p := range c.Problems {
		files = append(files, p.File)
	}
	if got := strings.Join(files, " "); got != "a.safetensors b.safetensors c.safetensors config.json" {
		t.Errorf("problem order %q", got)
	}
}

// TestTraceCheckpoints opens the shared V3 and V2-Lite reference
// checkpoints in place.
func TestTraceCheckpoints(t *testing.T) {
	tests := []struct {
		dir             string
		tensors, routed int
		modelType       string
	}{
		{"v3-tiny", 201, 3 * 16 * 3, "deepseek_v3"},
		{"v2lite-tiny", 118, 0, "deepseek_v2"},
	}
	for _, tt := range tests {
		dir := filepath.Join(testdata.Dir(t), "trace", tt.dir)
		c := mustOpen(t, dir)
		if len(c.Problems) != 0 || len(c.Tensors) != tt.tensors || len(c.Shards) != 2 {
			t.Errorf("%s: problems %v, %d tensors, %d shards; want none, %d, 2", tt.dir, c.Problems, len(c.Tensors), len(c.Shards), tt.tensors)
		}
		if c.Config.ModelType != tt.modelType || c.Config.NumLayers == 0 {
			t.Errorf("%s: config %+v", tt.dir, c.Config)
		}
		roles := make(map[Role]int)
		for _, x := range c.Tensors {
			roles[x.Role]++
			if x.Role == RoleOther {
				t.Errorf("%s: %s unclassified", tt.dir, x.Name)
			}
		}
		if tt.routed > 0 && roles[RoleRoutedExpert] != tt.routed {
			t.Errorf("%s: %d routed expert tensors, want %d (roles %v)", tt.dir, roles[RoleRoutedExpert], tt.routed, roles)
		}
		if roles[RoleRouter] == 0 || roles[RoleAttention] == 0 || roles[RoleDense] != 3 || roles[RoleEmbed] != 1 || roles[RoleHead] != 1 {
			t.Errorf("%s: roles %v", tt.dir, roles)
		}
	}
}

func TestReadAt(t *testing.T) {
	dir := t.TempDir()
	wm := goodCheckpoint(t, dir)
	writeIndex(t, dir, wm)
	c := mustOpen(t, dir)
	w := c.Tensor("head.weight")
	s := w.Shard
	dataStart := s.DataStart
	buf := make([]byte, w.Size)
	if n, err := s.ReadAt(buf, w.Offset); err != nil || n != len(buf) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	for i, b := range buf {
		if want := dataByte(w.Offset - dataStart + int64(i)); b != want {
			t.Fatalf("byte %d of %s is %#x, want %#x", i, w.Name, b, want)
		}
	}
	if n, err := s.ReadAt(buf, s.Size-2); err != io.EOF || n != 2 {
		t.Errorf("read across the end: %d, %v; want 2, io.EOF", n, err)
	}

	t.Run("truncated", func(t *testing.T) {
		if err := os.Truncate(s.Path, s.Size/2); err != nil {
			t.Fatal(err)
		}
		n, err := s.ReadAt(buf, w.Offset)
		if !errors.Is(err, sourcefile.ErrChanged) || n != 0 || !strings.Contains(err.Error(), s.Path) {
			t.Errorf("after truncation: %d, %v; want 0 and ErrChanged naming the file", n, err)
		}
	})
	t.Run("modified", func(t *testing.T) {
		s := c.Shard(shard1)
		f, err := os.OpenFile(s.Path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{0}, s.Size-1); err != nil {
			t.Fatal(err)
		}
		f.Close()
		// Make the change visible whatever the filesystem's time granularity.
		later := s.ModTime.Add(time.Hour)
		if err := os.Chtimes(s.Path, later, later); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadAt(make([]byte, 8), 0); !errors.Is(err, sourcefile.ErrChanged) {
			t.Errorf("after modification: %v, want ErrChanged", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		s := c.Shard(shard2)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadAt(make([]byte, 8), 0); err == nil {
			t.Errorf("read after Close succeeded")
		}
	})
}

// TestShardTensorsDataOrder checks that a shard lists its catalogued
// tensors in data order with offsets into the file.
func TestShardTensorsDataOrder(t *testing.T) {
	dir := t.TempDir()
	writeJSON(t, dir, ConfigName, map[string]any{})
	l := writeShard(t, dir, singleName, spec("z", f32, 3), spec("a", i8, 5), spec("m", bf16, 2))
	c := mustOpen(t, dir)
	s := c.Shards[0]
	if len(s.Tensors) != len(l.Tensors) {
		t.Fatalf("%d tensors, want %d", len(s.Tensors), len(l.Tensors))
	}
	raw, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	for i, lt := range l.Tensors {
		got := s.Tensors[i]
		if got.Name != lt.Name || got.Offset != l.DataStart()+lt.Begin || got.Size != lt.Len() {
			t.Errorf("tensor %d: %s at %d+%d, want %s at %d+%d", i, got.Name, got.Offset, got.Size, lt.Name, l.DataStart()+lt.Begin, lt.Len())
		}
		buf := make([]byte, got.Size)
		if _, err := s.ReadAt(buf, got.Offset); err != nil || !bytes.Equal(buf, raw[got.Offset:got.Offset+got.Size]) {
			t.Errorf("%s: read %x, %v", got.Name, buf, err)
		}
	}
}
