package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
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
				p := filepath.Join(dir, checkpoint.ConfigName)
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				// DeepSeek-V4.1 nests the count under text_config.
				for _, key := range [][]string{{"num_hidden_layers"}, {"n_layers"}, {"text_config", "num_hidden_layers"}} {
					var doc map[string]any
					json.Unmarshal(b, &doc)
					if tc, ok := doc[key[0]].(map[string]any); ok && len(key) == 2 {
						doc = tc
					}
					if _, ok := doc[key[len(key)-1]]; !ok {
						continue
					}
					if b, err = checkpoint.PatchConfig(b, key, json.Number(n)); err != nil {
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
				if got := strings.Count(log, "num_hidden_layers "+n); got != 1 || strings.Count(log, "\n") > 8 {
					t.Errorf("%d lines give num_hidden_layers %s, want 1; log:\n%s", got, n, log)
				}
				if preset == "v3-tiny" { // trace/ runs it: one line in its ERROR.txt, not one per layer
					b, err := os.ReadFile(m.path("trace", "ERROR.txt"))
					if err != nil {
						t.Fatal(err)
					}
					if got := strings.Count(string(b), "num_hidden_layers "+n); got != 1 || strings.Count(string(b), "\n") > 8 {
						t.Errorf("trace/ERROR.txt gives num_hidden_layers %s %d times, want 1:\n%s", n, got, b)
					}
				}
			})
		}
	}
}

// TestSymlinkOutside plants links to a root-only file outside the
// checkpoint (a file link, and an index entry through a directory link):
// with --allow-other, user nobody cannot read it through the mount, no view
// nor stats.json carries its bytes, and `dsfs export` does not copy it.
func TestSymlinkOutside(t *testing.T) {
	needMount(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed")
	}
	const secret = "TOPSECRET-d5f5"
	private := t.TempDir()
	shadow := filepath.Join(private, "shadow")
	if err := os.WriteFile(shadow, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := copyTiny(t)
	if err := os.Symlink(shadow, filepath.Join(src, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(private, filepath.Join(src, "ext")); err != nil {
		t.Fatal(err)
	}
	editIndex(t, src, func(wm map[string]string) { wm["stolen.weight"] = "ext/shadow" })
	// nobody must reach the mount point to be refused by dsfs, not by it.
	for d := filepath.Dir(src); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
			os.Chmod(d, fi.Mode().Perm()|0o005)
			t.Cleanup(func() { os.Chmod(d, fi.Mode().Perm()) })
		}
	}
	m := startMount(t, src, "--allow-other")
	os.Chmod(m.dir, 0o755)
	for _, name := range []string{"notes.txt", "ext/shadow"} {
		if !strings.Contains(m.log.String(), name) {
			t.Errorf("no log line names %s:\n%s", name, m.log)
		}
	}
	if strings.Contains(m.log.String(), "header length") {
		t.Errorf("the outside file was read as a shard:\n%s", m.log)
	}
	as := []string{"--reuid=65534", "--regid=65534", "--clear-groups"}
	for _, p := range []string{m.path("source", "notes.txt"), m.path("nvfp4", "notes.txt"), m.path("source", "ext", "shadow")} {
		if out, err := exec.Command(setpriv, append(as, "cat", p)...).CombinedOutput(); err == nil || strings.Contains(string(out), secret) {
			t.Errorf("nobody read %s: %v %q", p, err, out)
		}
	}
	grep := func(dirs ...string) {
		t.Helper()
		out, err := exec.Command("grep", append([]string{"-rl", secret}, dirs...)...).CombinedOutput()
		if err == nil {
			t.Errorf("%s found in %s", secret, out)
		}
	}
	grep(m.path("source"), m.path("nvfp4"), m.path("manifest", "summary.json"), m.path(".dsfs", "stats.json"))
	out := export(t, "source", src)
	if _, err := os.Lstat(filepath.Join(out, "notes.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("export copied notes.txt: %v", err)
	}
	grep(out)
}

// TestProblemsGrouped: 300k stale index entries give one log line and a
// small stats.json that still counts them; a shard changed under the
// mount, read block after block, logs the change once; a bad shard read
// block after block logs its failure a few times with a count, not once
// per block.
func TestProblemsGrouped(t *testing.T) {
	needMount(t)
	src := copyTiny(t)
	const stale = 300_000
	editIndex(t, src, func(wm map[string]string) {
		for i := range stale {
			wm[fmt.Sprintf("ghost.%06d.weight", i)] = goodShard
		}
	})
	m := startMount(t, src)
	if n := strings.Count(m.log.String(), "bad input"); n != 1 {
		t.Errorf("%d bad input lines, want 1:\n%.3000s", n, m.log)
	}
	if !strings.Contains(m.log.String(), "count=300000") {
		t.Errorf("the line does not count the problems:\n%.3000s", m.log)
	}
	b, err := os.ReadFile(m.path(".dsfs", "stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Problems struct {
			Total  int `json:"total"`
			Groups []struct {
				Count   int      `json:"count"`
				Tensors []string `json:"tensors"`
			} `json:"groups"`
		} `json:"problems"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if len(b) > 16<<10 || st.Problems.Total != stale || len(st.Problems.Groups) != 1 || st.Problems.Groups[0].Count != stale {
		t.Errorf("stats.json: %d bytes, problems %+v", len(b), st.Problems)
	}

	view := m.path("nvfp4", badShard)
	shard := filepath.Join(src, badShard)
	fi, err := os.Stat(shard)
	if err != nil {
		t.Fatal(err)
	}
	patchBytes(t, shard, fi.Size()-1, []byte{1})
	exec.Command("dd", "if="+view, "of=/dev/null", "bs=64k", "conv=noerror").Run() // fails: the point
	if failed := strings.Count(m.log.String(), "read failed"); failed != 1 {
		t.Errorf("%d read failed lines for a changed shard, want 1:\n%s", failed, m.log)
	}

	src = copyTiny(t)
	patchBytes(t, filepath.Join(src, badShard), 9, []byte("#")) // JSON that does not parse
	m = startMount(t, src)
	exec.Command("dd", "if="+m.path("nvfp4", badShard), "of=/dev/null", "bs=64k", "conv=noerror").Run() // fails: the point
	log := m.log.String()
	failed := strings.Count(log, "read failed")
	if failed == 0 || failed > 4 || !strings.Contains(log, "times=10 ") {
		t.Errorf("%d read failed lines for a bad shard, want the 1st and 10th failures with counts:\n%s", failed, log)
	}
}
