package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSourceFilesChangedUnderTheMount changes a shard, tokenizer.json and
// config.json under a mount in each way a file can change: every read of
// the file through source/ and through a derived view that serves it gives
// EIO (never old and new bytes, never another file's bytes), one log line
// names the file and the change, and the other files are still served.
func TestSourceFilesChangedUnderTheMount(t *testing.T) {
	needMount(t)
	changes := []struct {
		name, how string
		do        func(t *testing.T, p string)
	}{
		{"truncated", "truncated", func(t *testing.T, p string) {
			fi, _ := os.Stat(p)
			if err := os.Truncate(p, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"grown", "grown", func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("\n\n"))
			f.Close()
		}},
		{"rewritten in place with its mtime put back", "rewritten", func(t *testing.T, p string) {
			before, _ := os.Stat(p)
			flipByte(t, p)
			mtime := before.ModTime()
			run(t, "touch", "-d", fmt.Sprintf("@%d.%09d", mtime.Unix(), mtime.Nanosecond()), p)
			if after, _ := os.Stat(p); !after.ModTime().Equal(mtime) || after.Size() != before.Size() {
				t.Fatalf("touch -d did not put the mtime back: %v, was %v", after.ModTime(), mtime)
			}
		}},
		{"replaced by rename", "replaced", func(t *testing.T, p string) {
			run(t, "cp", "-p", p, p+".new")
			flipByte(t, p+".new")
			run(t, "mv", p+".new", p)
		}},
	}
	files := []struct {
		name  string
		views []string // the views that serve it from the source
	}{
		{goodShard, []string{"source", "nvfp4", "engram-fp4"}},
		{"tokenizer.json", []string{"source", "nvfp4", "engram-fp4"}},
		{"config.json", []string{"source"}}, // the derived views patch it at mount
	}
	for _, file := range files {
		for _, change := range changes {
			t.Run(file.name+" "+change.name, func(t *testing.T) {
				src := copyTiny(t)
				if err := os.WriteFile(filepath.Join(src, "tokenizer.json"), []byte(`{"model":{"vocab":{"a":0,"b":1}}}`+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				m := startMount(t, src, "--views", "source,nvfp4,engram-fp4")
				change.do(t, filepath.Join(src, file.name))
				for _, view := range file.views {
					b, err := os.ReadFile(m.path(view, file.name))
					if !errors.Is(err, syscall.EIO) {
						t.Errorf("%s/%s: read %d bytes, %v; want EIO", view, file.name, len(b), err)
					}
				}
				// A document computed from the file fails as often as it is
				// opened, and adds no log line.
				for range 2 {
					if _, err := os.ReadFile(m.path("nvfp4", "TRANSCODE.json")); err != nil && !errors.Is(err, syscall.EIO) {
						t.Errorf("nvfp4/TRANSCODE.json: %v", err)
					}
				}
				lines := m.log.linesWith("source file changed")
				if len(lines) != 1 || !strings.Contains(lines[0], file.name) || !strings.Contains(lines[0], change.how) {
					t.Errorf("want one log line naming %s and %q, got:\n%s", file.name, change.how, strings.Join(lines, "\n"))
				}
				const other = "model-00005-of-00014.safetensors"
				run(t, "cmp", m.path("source", other), filepath.Join(src, other))
				run(t, "sha256sum", m.path("nvfp4", other), m.path("engram-fp4", other))
			})
		}
	}
}

// flipByte inverts the byte in the middle of a file, in place.
func flipByte(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// TestPassthroughNotReusedForAChangedFile: while one reader holds a source/
// file open through kernel passthrough, the file changes; a new open of it
// fails with EIO instead of sharing the first reader's backing file (the
// held descriptor itself reads the file without asking dsfs: OPERATIONS.md
// says so).
func TestPassthroughNotReusedForAChangedFile(t *testing.T) {
	needMount(t)
	src := copyTiny(t)
	m := startMount(t, src, "--views", "source")
	held, err := os.Open(m.path("source", goodShard))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Passthrough int64 `json:"passthrough"`
	}
	b, err := os.ReadFile(m.path(".dsfs", "stats.json"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("stats.json: %v %s", err, b)
	}
	if st.Passthrough == 0 {
		t.Skip("the kernel does not pass source files through here")
	}
	p := filepath.Join(src, goodShard)
	fi, _ := os.Stat(p)
	if err := os.Truncate(p, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(m.path("source", goodShard))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("a new open of the changed file read %d bytes, %v; want EIO", len(b), err)
	}
	if n := strings.Count(m.log.String(), "source file changed"); n != 1 {
		t.Fatalf("%d log lines name the change, want 1:\n%s", n, m.log)
	}
}
