package hfcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnapshot(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "models--deepseek-ai--DeepSeek-V4.1-Flash")
	for _, d := range []string{"refs", "snapshots/0123abcd", "snapshots/4567ef01", "blobs"} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("0123abcd"), 0o644)
	os.WriteFile(filepath.Join(repo, "refs", "v2"), []byte("4567ef01\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "refs", "bad"), []byte("../../etc"), 0o644)
	os.WriteFile(filepath.Join(repo, "refs", "gone"), []byte("89abcdef"), 0o644)
	if !IsRepo(repo) || IsRepo(filepath.Join(repo, "snapshots")) || IsRepo(t.TempDir()) {
		t.Fatal("IsRepo is wrong")
	}
	tests := []struct{ rev, want, err string }{
		{"", "snapshots/0123abcd", ""},
		{"main", "snapshots/0123abcd", ""},
		{"v2", "snapshots/4567ef01", ""},
		{"4567ef01", "snapshots/4567ef01", ""},
		{"bad", "", "not a commit"},
		{"gone", "", "has no snapshot"},
		{"v9", "", `no ref or snapshot "v9" (snapshots: 0123abcd, 4567ef01)`},
		{"../refs", "", "no ref or snapshot"},
	}
	for _, tt := range tests {
		got, err := Snapshot(repo, tt.rev)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Snapshot(%q) = %q, %v; want error %q", tt.rev, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != filepath.Join(repo, tt.want) {
			t.Errorf("Snapshot(%q) = %q, %v; want %s", tt.rev, got, err, tt.want)
		}
	}
}
