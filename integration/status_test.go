package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// viewBlocks is .dsfs/stats.json's view_blocks.
type viewBlocks map[string]struct {
	Blocks   int64 `json:"blocks"`
	Computed int64 `json:"computed"`
	Cached   int64 `json:"cached"`
}

func readViewBlocks(t *testing.T, m *mount) viewBlocks {
	t.Helper()
	var st struct {
		ViewBlocks viewBlocks `json:"view_blocks"`
	}
	catJSON(t, m.path(".dsfs", "stats.json"), &st)
	return st.ViewBlocks
}

// statusLine returns dsfs status's line of view.
func statusLine(t *testing.T, out, view string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, view+"/ ") {
			return line
		}
	}
	t.Fatalf("dsfs status shows no line of %s/:\n%s", view, out)
	return ""
}

// TestStatusAndWarm: dsfs status shows each view's blocks computed, cached
// and to go, as stats.json counts them; dsfs warm of a view computes all
// of it, and of a file, that file's blocks; dsfs status --watch of a view
// ends when a warm has computed it.
func TestStatusAndWarm(t *testing.T) {
	m := startMount(t, tinySrc, "--cache-mb", "256")
	vb := readViewBlocks(t, m)
	for _, v := range []string{"nvfp4", "q2", "engram-fp4"} {
		if vb[v].Blocks == 0 || vb[v].Computed != 0 {
			t.Fatalf("%s/ at mount: %+v", v, vb[v])
		}
	}
	if vb["source"].Blocks != 0 {
		t.Errorf("source/ has blocks to compute: %+v", vb["source"])
	}
	out := run(t, dsfsBin, "status", "--interval", "10ms", m.dir)
	if want := fmt.Sprintf(`^q2/ +0%% \[\.+\] \(0/%d\) computed, 0 cached, %d to go, idle`, vb["q2"].Blocks, vb["q2"].Blocks); !regexp.MustCompile(want).MatchString(statusLine(t, out, "q2")) {
		t.Errorf("status before warm: q2/ line %q, want %s", statusLine(t, out, "q2"), want)
	}
	if line := statusLine(t, out, "source"); !strings.Contains(line, "nothing to compute") {
		t.Errorf("status: source/ line %q", line)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watch := exec.CommandContext(ctx, dsfsBin, "status", "--watch", "--interval", "20ms", m.path("q2"))
	watchOut := new(strings.Builder)
	watch.Stdout = watchOut
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	out = run(t, dsfsBin, "warm", m.path("q2"))
	if !regexp.MustCompile(`^warmed (\d+) of (\d+) files, `).MatchString(out) {
		t.Errorf("dsfs warm q2/: %q", out)
	}
	if err := watch.Wait(); err != nil || ctx.Err() != nil {
		t.Fatalf("dsfs status --watch MNT/q2 after the warm: %v (%v)\n%s", err, ctx.Err(), watchOut)
	}
	lines := strings.Split(strings.TrimSpace(watchOut.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "q2/ ") || !strings.HasSuffix(last, " 0 to go, done") {
		t.Errorf("status --watch's last line: %q\n%s", last, watchOut)
	}
	if strings.Contains(watchOut.String(), "nvfp4/") {
		t.Errorf("status --watch of q2/ shows other views:\n%s", watchOut)
	}
	after := readViewBlocks(t, m)
	if q := after["q2"]; q.Computed != q.Blocks || q.Cached != q.Blocks {
		t.Errorf("q2/ after warm: %+v", q)
	}
	if after["nvfp4"].Computed != 0 {
		t.Errorf("warming q2/ computed nvfp4/ blocks: %+v", after["nvfp4"])
	}

	// One file: its blocks, and no more.
	run(t, dsfsBin, "warm", m.path("nvfp4", "model-00003-of-00014.safetensors"))
	if n := readViewBlocks(t, m)["nvfp4"]; n.Computed == 0 || n.Computed == n.Blocks {
		t.Errorf("nvfp4/ after warming one of its shards: %+v", n)
	}
	out = run(t, dsfsBin, "status", "--interval", "10ms", m.dir)
	if line := statusLine(t, out, "q2"); !strings.Contains(line, "100% ") || !strings.HasSuffix(line, "0 to go, done") {
		t.Errorf("status after warm: q2/ line %q", line)
	}
}

// TestWarmInterrupted: Ctrl-C stops dsfs warm at once, with status 130
// and a line saying so; the mount stops computing for it, stays sound, and
// a second warm finishes the view.
func TestWarmInterrupted(t *testing.T) {
	m := startMount(t, tinySrc, "--cache-mb", "256")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warm := exec.CommandContext(ctx, dsfsBin, "warm", "--jobs", "1", m.path("q2"))
	stderr := new(strings.Builder)
	warm.Stderr = stderr
	if err := warm.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- warm.Wait() }()
	// q2/ of v41-tiny takes seconds to quantise: interrupt once it has begun.
	for readViewBlocks(t, m)["q2"].Computed == 0 {
		select {
		case err := <-exited:
			t.Fatalf("dsfs warm exited before a block was computed: %v\n%s", err, stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	warm.Process.Signal(syscall.SIGINT)
	err := <-exited
	if ctx.Err() != nil {
		t.Fatalf("dsfs warm did not end after SIGINT")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 || !strings.HasPrefix(stderr.String(), "dsfs warm: interrupted after ") {
		t.Fatalf("dsfs warm after SIGINT: %v\n%s", err, stderr)
	}
	q := readViewBlocks(t, m)["q2"]
	if q.Computed == q.Blocks {
		t.Fatalf("q2/ was all computed before the signal came; the test needs a longer view: %+v", q)
	}
	// Nothing keeps computing for the reader that left.
	for {
		inFlight := m.cacheStats(t).InFlight
		if inFlight == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d computations still running after the warm was interrupted", inFlight)
		case <-time.After(20 * time.Millisecond):
		}
	}
	run(t, dsfsBin, "warm", m.path("q2"))
	if q := readViewBlocks(t, m)["q2"]; q.Computed != q.Blocks {
		t.Errorf("q2/ after a second warm: %+v", q)
	}
}
