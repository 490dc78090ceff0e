package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documentation a newcomer reads first: every page the README and
// docs/ link to exists, with the heading a link names.

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
