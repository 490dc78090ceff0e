package integration

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestStaticFileServer serves a fresh mount with Python's http.server,
// which sends the size fstat gives after open as Content-Length and then
// copies the file: every file of every view must arrive whole, with the
// length it has, documents computed on open included.
func TestStaticFileServer(t *testing.T) {
	needMount(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	m := startMount(t, tinySrc)
	srv := exec.Command(python, "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory", m.dir, "0")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		re := regexp.MustCompile(`port (\d+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	var base string
	select {
	case p := <-port:
		base = "http://127.0.0.1:" + p + "/"
	case <-time.After(20 * time.Second):
		t.Fatal("http.server did not start")
	}

	client := &http.Client{Timeout: 2 * time.Minute}
	served := 0
	for _, rel := range files(t, m.dir) {
		if rel == filepath.Join(".dsfs", "stats.json") {
			continue // live status: different on every open
		}
		u := base + (&url.URL{Path: filepath.ToSlash(rel)}).EscapedPath()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", rel, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s, %v", rel, resp.Status, err)
		}
		want, err := os.ReadFile(m.path(rel))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(resp.Header.Get("Content-Length")); n != len(want) || !bytes.Equal(body, want) {
			t.Errorf("%s: served %d bytes with Content-Length %d, the file has %d", rel, len(body), n, len(want))
		}
		served++
	}
	if served < 20 {
		t.Fatalf("only %d files served", served)
	}
}
