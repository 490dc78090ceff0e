package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/internal/s3test"
	"github.com/dsfs/dsfs/objstore"
)

// s3Source uploads the tiny checkpoint to a fresh SeaweedFS server as
// s3://ckpt/v41-tiny and points this process's environment (which every
// dsfs it starts inherits) at the server, anonymously.
func s3Source(t *testing.T) (*s3test.Server, string) {
	t.Helper()
	needMount(t)
	srv := s3test.Start(t)
	srv.CreateBucket("ckpt")
	err := filepath.Walk(tinySrc, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tinySrc, p)
		srv.Put("ckpt", "v41-tiny/"+filepath.ToSlash(rel), b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	return srv, srv.URL("ckpt", "v41-tiny")
}

// objectStats reads the object_store section of a mount's stats.json.
func objectStats(t testing.TB, m *mount) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(m.path(".dsfs", "stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		ObjectStore map[string]int64 `json:"object_store"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.ObjectStore == nil {
		t.Fatalf("stats.json has no object_store:\n%s", b)
	}
	return st.ObjectStore
}

// TestS3SameBytes mounts the tiny checkpoint from a bucket and from its
// directory: every file of every transcoding view has the same bytes,
// trace/ runs, dsfs export and dsfs inspect of the bucket agree with the
// directory, and a second read of the bucket's mount sends no GET.
func TestS3SameBytes(t *testing.T) {
	_, url := s3Source(t)
	local := startMount(t, tinySrc)
	remote := startMount(t, url, "--cache-dir", t.TempDir())
	for _, view := range []string{"source", "nvfp4", "engram-fp4", "nvfp4+engram-fp4", "q2", "gguf"} {
		want := files(t, local.path(view))
		got := files(t, remote.path(view))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s/: files from the bucket %v, from the directory %v", view, got, want)
			continue
		}
		for _, f := range want {
			run(t, "cmp", local.path(view, f), remote.path(view, f))
		}
	}
	if _, err := os.Stat(remote.path("trace", "ERROR.txt")); err == nil {
		b, _ := os.ReadFile(remote.path("trace", "ERROR.txt"))
		t.Errorf("trace/ cannot read the model from the bucket:\n%s", b)
	}
	run(t, "head", "-c", "300", remote.path("trace", "layers", "00.json"))
	out := t.TempDir()
	run(t, dsfsBin, "export", "nvfp4", url, out)
	for _, f := range files(t, out) {
		run(t, "cmp", filepath.Join(out, f), local.path("nvfp4", f))
	}
	report := func(src string) string { // less the log's lines (the bucket's says it reads anonymously)
		var out []string
		for l := range strings.SplitSeq(run(t, dsfsBin, "inspect", "--no-hash", src), "\n") {
			if !strings.HasPrefix(l, "time=") {
				out = append(out, strings.ReplaceAll(l, src, "SRC"))
			}
		}
		return strings.Join(out, "\n")
	}
	if got, want := report(url), report(tinySrc); got != want {
		t.Errorf("dsfs inspect of the bucket:\n%s\nof the directory:\n%s", got, want)
	}
	before := objectStats(t, remote)
	if before["gets"] == 0 || before["bytes_fetched"] == 0 {
		t.Errorf("object_store counted no GET: %v", before)
	}
	// The page cache would answer a second cat without asking dsfs.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		t.Logf("drop_caches: %v (the second read may come from the page cache)", err)
	}
	run(t, "cat", remote.path("source", "model-00003-of-00014.safetensors"))
	if after := objectStats(t, remote); after["gets"] != before["gets"] {
		t.Errorf("a second read sent %d GETs, want none (chunk cache): %v", after["gets"]-before["gets"], after)
	}
}

// TestS3ObjectReplaced replaces objects in the bucket after the mount
// pinned them: a read gives the pinned bytes where the mount holds them,
// else EIO and one line naming the object; never the new object's bytes,
// and the mount stays up.
func TestS3ObjectReplaced(t *testing.T) {
	srv, url := s3Source(t)
	blob := bytes.Repeat([]byte("pinned "), 200_000)
	srv.Put("ckpt", "v41-tiny/extra/blob.bin", blob)
	m := startMount(t, url, "--cache-dir", t.TempDir())
	const shard = "model-00004-of-00014.safetensors"
	old, err := os.ReadFile(filepath.Join(tinySrc, shard))
	if err != nil {
		t.Fatal(err)
	}
	damaged := func(b []byte) []byte {
		b = bytes.Clone(b)
		for i := len(b) / 2; i < len(b); i++ {
			b[i] ^= 0xa5
		}
		return b
	}
	srv.Put("ckpt", "v41-tiny/"+shard, damaged(old))
	srv.Put("ckpt", "v41-tiny/extra/blob.bin", damaged(blob))
	// The mount read the shard's header only (ReadOnceAt), so its bytes
	// are not cached: EIO, or the pinned bytes had a prefetch kept them.
	if b, err := os.ReadFile(m.path("source", shard)); err == nil && !bytes.Equal(b, old) {
		t.Errorf("source/%s: read bytes that are not the pinned object's", shard)
	} else if err != nil && !errors.Is(err, syscall.EIO) {
		t.Errorf("source/%s: %v, want EIO or the pinned bytes", shard, err)
	}
	b, err := os.ReadFile(m.path("source", "extra", "blob.bin"))
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("source/extra/blob.bin: %d bytes, %v; want EIO", len(b), err)
	}
	if lines := m.log.linesWith("extra/blob.bin: source object changed since it was opened"); len(lines) != 1 {
		t.Errorf("%d log lines name the replaced object, want 1:\n%s", len(lines), m.log)
	}
	if _, err := os.ReadFile(m.path(".dsfs", "stats.json")); err != nil {
		t.Errorf("the mount went down: %v", err)
	}
}

// TestS3ServerOutage stops the server under a mount: a read of bytes not
// cached fails within bounded time and the mount stays up; once the
// server is back the same read succeeds.
func TestS3ServerOutage(t *testing.T) {
	srv, url := s3Source(t)
	blob := bytes.Repeat([]byte("outage "), 200_000)
	srv.Put("ckpt", "v41-tiny/extra/blob.bin", blob)
	m := startMount(t, url, "--cache-dir", t.TempDir())
	p := m.path("source", "extra", "blob.bin")
	srv.Stop()
	start := time.Now()
	_, err := os.ReadFile(p)
	took := time.Since(start)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read with the server stopped: %v, want EIO", err)
	}
	if took > 30*time.Second {
		t.Errorf("the failed read took %v, want a bounded wait", took)
	}
	if lines := m.log.linesWith("giving up after"); len(lines) == 0 {
		t.Errorf("no log line says the read gave up:\n%s", m.log)
	}
	if _, err := os.ReadFile(m.path(".dsfs", "stats.json")); err != nil {
		t.Fatalf("the mount went down with the server: %v", err)
	}
	srv.Restart()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read after the server came back: %v\n%s", err, m.log)
	}
	if !bytes.Equal(got, blob) {
		t.Error("read after the server came back: bytes differ from the object")
	}
	t.Logf("the failed read took %v", took)
}

// TestS3SharedCache: hosts (mounts with empty local directories, or none)
// share the q2/ block cache in a bucket; the first quantises, the others
// quantise nothing and serve the same bytes. A damaged entry in the bucket
// is detected, deleted and recomputed, never served.
func TestS3SharedCache(t *testing.T) {
	srv, url := s3Source(t)
	srv.CreateBucket("fleet")
	cache := srv.URL("fleet", "dsfs-cache")
	first := startMount(t, url, "--cache-dir", cache, "--cache-dir-local", t.TempDir(), "--views", "q2")
	want := files(t, first.path("q2"))
	data := make(map[string][]byte)
	for _, f := range want {
		b, err := os.ReadFile(first.path("q2", f))
		if err != nil {
			t.Fatal(err)
		}
		data[f] = b
	}
	s1, raw1 := readStats(t, first)
	if s1.ViewStats.Q2.Quantised == 0 || s1.DiskCache.Writes == 0 {
		t.Fatalf("the first host quantised or stored nothing:\n%s", raw1)
	}
	for _, local := range []bool{true, false} {
		args := []string{"--cache-dir", cache, "--views", "q2"}
		if local {
			args = append(args, "--cache-dir-local", t.TempDir())
		}
		second := startMount(t, url, args...)
		for _, f := range want {
			b, err := os.ReadFile(second.path("q2", f))
			if err != nil || !bytes.Equal(b, data[f]) {
				t.Fatalf("second host (local directory %v): q2/%s differs from the first host's (%v)", local, f, err)
			}
		}
		s2, raw2 := readStats(t, second)
		if s2.ViewStats.Q2.Quantised != 0 || s2.ViewStats.Q2.FromDisk != s1.ViewStats.Q2.Quantised {
			t.Errorf("second host (local directory %v) quantised %d blocks and read %d from the shared cache, want 0 and %d:\n%s",
				local, s2.ViewStats.Q2.Quantised, s2.ViewStats.Q2.FromDisk, s1.ViewStats.Q2.Quantised, raw2)
		}
		second.stop(t)
	}

	// A damaged entry in the bucket is found, deleted and recomputed.
	bk, err := objstore.Open(context.Background(), cache, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	entries, err := bk.List(context.Background())
	if err != nil || len(entries) == 0 {
		t.Fatalf("the shared cache holds %d entries, %v", len(entries), err)
	}
	victim := entries[0].Name()
	b, err := bk.Get(context.Background(), victim, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(b)
	damaged[len(b)/2] ^= 0x40
	srv.Put("fleet", "dsfs-cache/"+victim, damaged)
	third := startMount(t, url, "--cache-dir", cache, "--views", "q2")
	for _, f := range want {
		b, err := os.ReadFile(third.path("q2", f))
		if err != nil || !bytes.Equal(b, data[f]) {
			t.Fatalf("third host: q2/%s differs from the first host's (%v)", f, err)
		}
	}
	s3, raw3 := readStats(t, third)
	// The entry may be a block (quantised again) or a shard's digests.
	if s3.ViewStats.Q2.Quantised > 1 || s3.DiskCache.Corrupt != 1 || !strings.Contains(third.log.String(), victim) {
		t.Errorf("third host, one entry damaged: quantised %d, corrupt %d, want at most 1, 1 and a line naming %s:\n%s\n%s",
			s3.ViewStats.Q2.Quantised, s3.DiskCache.Corrupt, victim, raw3, third.log)
	}
	if b, err := bk.Get(context.Background(), victim, 1<<30); err != nil || bytes.Equal(b, damaged) {
		t.Errorf("the damaged entry was not replaced by a good one (%v)", err)
	}
}

// TestS3BadSource: a bucket that does not exist, a prefix that holds no
// checkpoint and a malformed URL each end dsfs mount at once with a line
// naming the source and why.
func TestS3BadSource(t *testing.T) {
	srv, _ := s3Source(t)
	for _, tc := range []struct{ src, want string }{
		{srv.URL("nosuchbucket", "x"), "s3://nosuchbucket/x"},
		{srv.URL("ckpt", "nothing-here"), "no config.json and no safetensors files"},
		{"s3://", "s3://"},
	} {
		start := time.Now()
		out, err := exec.Command(dsfsBin, "mount", tc.src, t.TempDir()).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("dsfs mount %s: %v, output %q; want a failure naming %q", tc.src, err, out, tc.want)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("dsfs mount %s took %v to fail", tc.src, took)
		}
	}
}
