// Package s3test runs a real S3-compatible server, SeaweedFS, on loopback
// for tests: no fakes, so the tests see the status codes, ETags, range and
// conditional-request handling of a real implementation.
//
// The weed binary is taken from $DSFS_WEED, else ~/.cache/dsfs/weed; when
// neither exists the test is skipped with a message saying how to build it.
// The server allows anonymous access (SeaweedFS enforces S3 authentication
// only once an identity is configured, so the server is started with no
// AWS credentials in its environment and no S3 config), and the helpers
// here speak plain unsigned HTTP to it.
package s3test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StartTimeout bounds how long Start and Restart wait for S3 to answer.
const StartTimeout = 60 * time.Second

// Server is a SeaweedFS server (master, volume, filer and S3 gateway in one
// process) listening on 127.0.0.1, with its data in a temporary directory.
type Server struct {
	// Endpoint is the S3 endpoint URL, http://127.0.0.1:PORT.
	Endpoint string

	t     testing.TB
	bin   string
	dir   string // data directory, kept across Restart
	log   string // server log file, appended to across Restart
	ports []int  // master, volume, filer, s3, and their gRPC ports

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Binary returns the path of the weed binary the tests use: $DSFS_WEED,
// else ~/.cache/dsfs/weed.
func Binary() string {
	if p := os.Getenv("DSFS_WEED"); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "dsfs", "weed")
	}
	return filepath.Join(home, ".cache", "dsfs", "weed")
}

// Start runs a fresh server and waits until its S3 gateway answers. It
// skips the test when there is no weed binary, and fails it instead when
// $DSFS_REQUIRE_WEED is 1 (.ci/run sets it once it has built one).
// t.Cleanup stops the server; when the test failed, the tail of the
// server's log is printed.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("s3test: no SeaweedFS binary at %s (set $DSFS_WEED to one, or let .ci/run build it there)", bin)
		if os.Getenv("DSFS_REQUIRE_WEED") == "1" {
			t.Fatal(msg + "; DSFS_REQUIRE_WEED=1 says it was built")
		}
		t.Skip(msg)
	}
	root := t.TempDir()
	s := &Server{
		t:   t,
		bin: bin,
		dir: filepath.Join(root, "data"),
		log: filepath.Join(root, "weed.log"),
	}
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(8)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	s.ports = ports
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(ports[3])
	t.Cleanup(func() {
		s.Stop()
		s.removeSockets()
		if t.Failed() {
			t.Logf("s3test: tail of %s:\n%s", s.log, s.LogTail(4096))
		}
	})
	if err := s.start(); err != nil {
		t.Fatalf("s3test: %v\n%s", err, s.LogTail(4096))
	}
	return s
}

// freePorts asks the kernel for n distinct free loopback ports. They are
// closed before weed binds them, so another process could take one in
// between; that race is accepted for tests. Every port, gRPC ones
// included, is passed to weed explicitly, since weed's default gRPC port
// (port+10000) could be taken.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (s *Server) start() error {
	p := s.ports
	args := []string{
		"server",
		"-dir=" + s.dir,
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + strconv.Itoa(p[0]), "-master.port.grpc=" + strconv.Itoa(p[4]),
		"-volume.port=" + strconv.Itoa(p[1]), "-volume.port.grpc=" + strconv.Itoa(p[5]),
		"-filer", "-filer.port=" + strconv.Itoa(p[2]), "-filer.port.grpc=" + strconv.Itoa(p[6]),
		"-s3", "-s3.port=" + strconv.Itoa(p[3]), "-s3.port.grpc=" + strconv.Itoa(p[7]),
		// Listeners the tests do not use, some on fixed ports by default.
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false",
		"-master.telemetry=false",
		// A restarted master waits an election timeout (10 s by default)
		// before it leads again; one peer needs no patience.
		"-master.electionTimeout=1s",
		// Small volumes: the default 30 GB limit is pointless for tests.
		"-master.volumeSizeLimitMB=1024", "-volume.max=16",
	}
	log, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so Stop reaches anything weed starts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = serverEnv()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	exited := make(chan struct{})
	go func() {
		// Only to notice an early exit; Stop does the Wait.
		for {
			if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
				close(exited)
				return
			}
			time.Sleep(200 * time.Millisecond)
			s.mu.Lock()
			running := s.cmd == cmd
			s.mu.Unlock()
			if !running {
				return
			}
		}
	}()
	return s.waitReady(exited)
}

// serverEnv is the test's environment without AWS credentials: weed turns
// S3 authentication on when it finds AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return env
}

// ProbeBucket is the bucket where Start and Restart write an object to
// learn that the server stores and serves objects: S3 answers some time
// before the filer has registered with the master and the volumes are
// known, and until then writes stall and reads fail.
const ProbeBucket = "s3test-probe"

// waitReady polls until S3 answers, then until an object can be written
// and read back.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(StartTimeout)
	var last error
	ready := false
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("weed exited before S3 answered at %s", s.Endpoint)
		default:
		}
		if last = s.probe(); last == nil {
			ready = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !ready {
		return fmt.Errorf("S3 at %s not ready within %v: %v", s.Endpoint, StartTimeout, last)
	}
	return nil
}

// probe reads the probe object, and when it is not there (a fresh
// server), creates ProbeBucket, writes the object and reads it. A
// restarted server is only read: a write would wait on the filer's lock
// ring for many seconds more.
func (s *Server) probe() error {
	get := request{http.MethodGet, "/" + ProbeBucket + "/probe", nil, []int{http.StatusOK}}
	code, err := s.try(get)
	if err == nil || code != http.StatusNotFound {
		return err
	}
	for _, r := range []request{
		{http.MethodPut, "/" + ProbeBucket, nil, []int{http.StatusOK, http.StatusConflict}},
		{http.MethodPut, "/" + ProbeBucket + "/probe", []byte("probe"), []int{http.StatusOK}},
		get,
	} {
		if _, err := s.try(r); err != nil {
			return err
		}
	}
	return nil
}

// request is a probe's request and the statuses that mean success.
type request struct {
	method, path string
	body         []byte
	ok           []int
}

// try sends r and returns the status, with an error unless it is one of
// r.ok.
func (s *Server) try(r request) (int, error) {
	resp, err := s.do(r.method, r.path, r.body)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !slices.Contains(r.ok, resp.StatusCode) {
		return resp.StatusCode, fmt.Errorf("%s %s: %s", r.method, r.path, resp.Status)
	}
	return resp.StatusCode, nil
}

// Stop kills the server's process group and waits for it. The data
// directory stays, for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

// Restart stops the server if it runs and starts it again on the same
// directory and ports, waiting until S3 answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatalf("s3test: restart: %v\n%s", err, s.LogTail(4096))
	}
}

// removeSockets deletes the Unix sockets weed makes beside its TCP
// listeners, /tmp/seaweedfs-*-PORT.sock, which a killed weed leaves.
func (s *Server) removeSockets() {
	for _, p := range s.ports {
		socks, _ := filepath.Glob(filepath.Join(os.TempDir(), "seaweedfs-*-"+strconv.Itoa(p)+".sock"))
		for _, f := range socks {
			os.Remove(f)
		}
	}
}

// LogTail returns the last n bytes of the server's log.
func (s *Server) LogTail(n int64) string {
	f, err := os.Open(s.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(fi.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	return string(b)
}

// URL returns the s3:// URL of bucket and prefix (which may be empty).
func (s *Server) URL(bucket, prefix string) string {
	if prefix == "" {
		return "s3://" + bucket
	}
	return "s3://" + bucket + "/" + prefix
}

// CreateBucket creates bucket, failing the test if it cannot.
func (s *Server) CreateBucket(bucket string) {
	s.t.Helper()
	s.expect(http.MethodPut, "/"+bucket, nil, http.StatusOK)
}

// Put writes the object bucket/key with content b, failing the test if
// it cannot, and returns its ETag as the server sends it, with quotes.
func (s *Server) Put(bucket, key string, b []byte) string {
	s.t.Helper()
	return s.expect(http.MethodPut, "/"+bucket+"/"+key, b, http.StatusOK)
}

// Delete removes the object bucket/key, failing the test if it cannot.
func (s *Server) Delete(bucket, key string) {
	s.t.Helper()
	s.expect(http.MethodDelete, "/"+bucket+"/"+key, nil, http.StatusNoContent, http.StatusOK)
}

// expect sends a request and fails the test unless the status is one of
// want; it returns the response's ETag header.
func (s *Server) expect(method, path string, body []byte, want ...int) string {
	s.t.Helper()
	resp, err := s.do(method, path, body)
	if err != nil {
		s.t.Fatalf("s3test: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	for _, w := range want {
		if resp.StatusCode == w {
			return resp.Header.Get("ETag")
		}
	}
	s.t.Fatalf("s3test: %s %s: %s: %s", method, path, resp.Status, msg)
	return ""
}

// client is the helpers' HTTP client; the timeout keeps a wedged server
// from hanging a test.
var client = &http.Client{Timeout: 60 * time.Second}

func (s *Server) do(method, path string, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.Endpoint+path, r)
	if err != nil {
		return nil, err
	}
	return client.Do(req)
}
