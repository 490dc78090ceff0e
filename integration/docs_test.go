package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The documentation a newcomer reads first: the README's quick start runs
// as written, and every page the README and docs/ link to exists, with the
// heading a link names.

// fencedBlock returns the first ```sh block after the heading in the
// Markdown text md.
func fencedBlock(t *testing.T, md, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(md, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no heading %q", heading)
	}
	_, rest, ok = strings.Cut(rest, "\n```sh\n")
	if !ok {
		t.Fatalf("no sh block under %q", heading)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("the sh block under %q is not closed", heading)
	}
	return block
}

// TestReadmeQuickStart runs the README's quick start in an empty
// directory, with dsfs on PATH as `go install` puts it there, and checks
// what it printed: every view listed, nvfp4/'s contract, trace/'s first
// layer record, and no line saying something cannot run.
func TestReadmeQuickStart(t *testing.T) {
	needMount(t)
	md, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	script := fencedBlock(t, string(md), "## Quick start")
	dir := t.TempDir()
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dsfsBin, filepath.Join(bin, "dsfs")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A background mount must not hold the script's output open: if it
	// does, Wait gives up this long after bash exits, and the test fails.
	cmd.WaitDelay = 10 * time.Second
	// The script's last command unmounts; should it fail midway, the mount
	// must not outlive the test.
	t.Cleanup(func() { exec.Command(dsfsBin, "umount", "--lazy", filepath.Join(dir, "mnt")).Run() })
	if err := cmd.Run(); err != nil {
		t.Fatalf("the quick start failed: %v\n%s\n--- script:\n%s", err, &out, script)
	}
	got := out.String()
	for _, want := range []string{"source", "nvfp4", "trace", "manifest", "gguf", "q2", "engram-fp4",
		`"moe_quant_algo": "NVFP4"`, "hf_quant_config.json"} {
		if !strings.Contains(got, want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, got)
		}
	}
	if regexp.MustCompile(`(?i)cannot run|ERROR\.txt`).MatchString(got) {
		t.Errorf("the quick start's output says something cannot run:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "config.json")); err != nil {
		t.Errorf("the quick start exported nothing: %v", err)
	}
}

// mdLink matches a Markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchor is GitHub's anchor of a heading: lower case, punctuation other
// than - and _ dropped, spaces as -.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocsLinks: every relative link of README.md and docs/*.md names a
// file that exists, and a #fragment names a heading of that file; every
// page of docs/ is linked from the README.
func TestDocsLinks(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	anchors := map[string]map[string]bool{}
	headings := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		b, _ := os.ReadFile(path)
		inFence := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				inFence = !inFence
			}
			if h, ok := strings.CutPrefix(line, "#"); ok && !inFence {
				a[anchor(strings.TrimLeft(h, "#"))] = true
			}
		}
		anchors[path] = a
		return a
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s: %v", page, target, err)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !headings(path)[frag] {
				t.Errorf("%s links to %s: %s has no heading #%s", page, target, path, frag)
			}
		}
		if name := filepath.Base(page); page != "../README.md" && !bytes.Contains(readme, []byte("](docs/"+name+")")) {
			t.Errorf("README.md does not link docs/%s", name)
		}
	}
}
