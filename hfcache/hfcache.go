// Package hfcache finds the snapshot a Hugging Face hub cache folder
// (models--ORG--NAME, with refs/ and snapshots/) stands for, so that such a
// folder can be given wherever a checkpoint directory is expected.
package hfcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// IsRepo reports whether dir is a Hugging Face hub cache folder of a model:
// named models--ORG--NAME and holding a snapshots directory.
func IsRepo(dir string) bool {
	if !strings.HasPrefix(filepath.Base(filepath.Clean(dir)), "models--") {
		return false
	}
	fi, err := os.Stat(filepath.Join(dir, "snapshots"))
	return err == nil && fi.IsDir()
}

// Snapshot returns the snapshot directory of the cache folder repo for
// revision: a ref under refs/ (empty means main) naming a commit, or a
// commit that is itself a snapshot name.
func Snapshot(repo, revision string) (string, error) {
	if revision == "" {
		revision = "main"
	}
	if filepath.IsLocal(revision) {
		if b, err := os.ReadFile(filepath.Join(repo, "refs", revision)); err == nil {
			commit := strings.TrimSpace(string(b))
			if !filepath.IsLocal(commit) || strings.ContainsRune(commit, '/') {
				return "", fmt.Errorf("%s: refs/%s names %q, not a commit", repo, revision, commit)
			}
			snap := filepath.Join(repo, "snapshots", commit)
			if _, err := os.Stat(snap); err != nil {
				return "", fmt.Errorf("%s: refs/%s names commit %s, which has no snapshot: %w", repo, revision, commit, err)
			}
			return snap, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		snap := filepath.Join(repo, "snapshots", revision)
		if fi, err := os.Stat(snap); err == nil && fi.IsDir() && !strings.ContainsRune(revision, '/') {
			return snap, nil
		}
	}
	ents, _ := os.ReadDir(filepath.Join(repo, "snapshots"))
	var have []string
	for _, e := range ents {
		have = append(have, e.Name())
	}
	return "", fmt.Errorf("%s: no ref or snapshot %q (snapshots: %s)", repo, revision, strings.Join(have, ", "))
}
