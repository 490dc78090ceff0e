package s3test

import (
	"io"
	"net/http"
	"testing"
	"time"
)

func get(t *testing.T, s *Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(s.Endpoint + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServer puts, reads, deletes, and reads again after a restart.
func TestServer(t *testing.T) {
	t0 := time.Now()
	s := Start(t)
	t.Logf("started in %v", time.Since(t0))
	s.CreateBucket("bkt")
	if tag := s.Put("bkt", "dir/k", []byte("hello")); tag == "" {
		t.Error("Put returned no ETag")
	}
	s.Put("bkt", "gone", []byte("x"))
	s.Delete("bkt", "gone")
	if code, body := get(t, s, "/bkt/dir/k"); code != 200 || body != "hello" {
		t.Errorf("GET: %d %q", code, body)
	}
	if code, _ := get(t, s, "/bkt/gone"); code != 404 {
		t.Errorf("GET of a deleted object: %d, want 404", code)
	}
	t0 = time.Now()
	s.Restart()
	t.Logf("restarted in %v", time.Since(t0))
	if code, body := get(t, s, "/bkt/dir/k"); code != 200 || body != "hello" {
		t.Errorf("GET after restart: %d %q", code, body)
	}
	if got := s.URL("b", "p"); got != "s3://b/p" {
		t.Errorf("URL = %q", got)
	}
}
