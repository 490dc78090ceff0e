package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/figures"
	"github.com/dsfs/dsfs/synth"
)

// checkPNGs decodes every file of files (a tree's, by relative path) as
// a PNG of at least figures.MinWidth × MinHeight.
func checkPNGs(t *testing.T, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if r := img.Bounds(); r.Dx() < figures.MinWidth || r.Dy() < figures.MinHeight {
			t.Errorf("%s: %d×%d pixels", name, r.Dx(), r.Dy())
		}
	}
}

// TestTraceCommand runs dsfs trace on the synthetic v2lite-tiny
// checkpoint with its tokenizer and the seed's four prompts: a line per
// layer, trace.json with --json, the figures with --png, the same bytes
// from a second run and from dsfs export trace (the mount's view).
func TestTraceCommand(t *testing.T) {
	src := t.TempDir()
	if err := synth.Write("v2lite-tiny", src); err != nil {
		t.Fatal(err)
	}
	figs, report := t.TempDir(), filepath.Join(t.TempDir(), "trace.json")
	stdout, stderr, status := dsfs(t, "trace", "--device", "cpu", "--png", figs, "--json", report, src)
	if status != 0 {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	layer := regexp.MustCompile(`^layer  [1-3]: \d+ routes over 8 experts, gini [0-9.]+, effective experts [0-9.]+; most routed: \d+ \(\d+\)`)
	lines := strings.Split(stdout, "\n")
	if len(lines) < 4 || lines[0] != "layer  0: dense" || !layer.MatchString(lines[1]) || !layer.MatchString(lines[3]) {
		t.Errorf("stdout:\n%s", stdout)
	}
	got := tree(t, figs)
	want := []string{"layers/01.load.png", "layers/02.load.png", "layers/03.load.png",
		"routes/code.png", "routes/en_architecture.png", "routes/math.png", "routes/zh_explanation.png"}
	var names []string
	for name := range got {
		names = append(names, filepath.ToSlash(name))
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("--png wrote %v, want %v", names, want)
	}
	checkPNGs(t, got)
	for _, name := range want {
		if !strings.Contains(stdout, "wrote "+filepath.Join(figs, name)+"\n") {
			t.Errorf("stdout does not name %s:\n%s", name, stdout)
		}
	}
	var doc struct {
		Execution struct {
			Layers []json.RawMessage `json:"layers"`
		} `json:"execution"`
	}
	if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &doc) != nil || len(doc.Execution.Layers) != 4 {
		t.Errorf("--json: %d layers (%v)", len(doc.Execution.Layers), err)
	}

	again := t.TempDir()
	if _, stderr, status := dsfs(t, "trace", "--device", "cpu", "--png", again, src); status != 0 {
		t.Fatalf("second run: status %d\n%s", status, stderr)
	}
	sameTree(t, tree(t, again), got)
	exported := t.TempDir()
	if _, stderr, status := dsfs(t, "export", "--device", "cpu", "trace", src, exported); status != 0 {
		t.Fatalf("export trace: status %d\n%s", status, stderr)
	}
	for name, b := range got {
		if e, err := os.ReadFile(filepath.Join(exported, name)); err != nil || !bytes.Equal(e, b) {
			t.Errorf("%s: export holds %d bytes (%v), --png %d", name, len(e), err, len(b))
		}
	}
}

// TestTraceCannotRun checks that a checkpoint trace/ cannot run at all
// gets exit status 1 and one line saying why, naming the checkpoint.
func TestTraceCannotRun(t *testing.T) {
	src := t.TempDir()
	if err := synth.Write("v2lite-tiny", src); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(src, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	figs := t.TempDir()
	stdout, stderr, status := dsfs(t, "trace", "--device", "cpu", "--png", figs, src)
	last := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	want := "dsfs trace: " + src + ": trace/: the default prompts cannot run: prompt zh_explanation is text"
	if status != 1 || stdout != "" || !strings.HasPrefix(last[len(last)-1], want) {
		t.Errorf("status %d, stdout %q, stderr %q; want 1, nothing, a last line starting %q", status, stdout, stderr, want)
	}
	if ents, _ := os.ReadDir(figs); len(ents) != 0 {
		t.Errorf("--png wrote %d entries", len(ents))
	}
}

// TestInspectPNG checks that dsfs inspect --png writes manifest/'s figure
// as the mount's view serves it (dsfs export manifest).
func TestInspectPNG(t *testing.T) {
	figs := t.TempDir()
	stdout, stderr, status := dsfs(t, "inspect", "--no-hash", "--png", figs, tinySrc)
	if status != 0 || !strings.HasSuffix(stdout, "\nwrote "+filepath.Join(figs, "bytes.png")+"\n") {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	got := tree(t, figs)
	checkPNGs(t, got)
	exported := t.TempDir()
	if _, stderr, status := dsfs(t, "export", "--no-hash", "manifest", tinySrc, exported); status != 0 {
		t.Fatalf("export manifest: status %d\n%s", status, stderr)
	}
	if e, err := os.ReadFile(filepath.Join(exported, "bytes.png")); err != nil || !bytes.Equal(e, got["bytes.png"]) {
		t.Errorf("bytes.png: export holds %d bytes (%v), --png %d", len(e), err, len(got["bytes.png"]))
	}
}
