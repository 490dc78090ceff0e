package integration

import (
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/synth"
)

// slowTrace mounts v4-tiny's trace/ with two prompts of 2048 tokens, whose
// layer 3 takes seconds to run on two cores, and starts cat reading that
// layer's activations; it returns once a forward has started.
func slowTrace(t *testing.T) (*mount, *exec.Cmd) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "v4-tiny")
	if err := synth.Write("v4-tiny", src); err != nil {
		t.Fatal(err)
	}
	var prompts []map[string]any
	for i := range 2 {
		ids := make([]int, 2048)
		for j := range ids {
			ids[j] = (i*7 + j*13) % 100
		}
		prompts = append(prompts, map[string]any{"id": "p" + strconv.Itoa(i), "token_ids": ids})
	}
	m := startMount(t, src, "--views", "trace", "--device", "cpu", "--trace-prompts", writePrompts(t, prompts))
	cat := exec.Command("cat", m.path("trace", "layers", "03.safetensors"))
	cat.Stdout = io.Discard
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Process.Kill(); cat.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for len(m.log.linesWith("trace: layer forward")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no layer forward 60 s after the read began\n%s", m.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return m, cat
}

// TestTraceWorkEndsWithItsReader holds closed a forward that ran on after
// its reader was killed (1.8 cores and a growing heap until unmount): the
// page cache's read-ahead requests are never interrupted, so dsfs now
// watches the process behind each waiting request. Within a second of the
// kill the computation stops: dsfs uses next to no CPU after it.
func TestTraceWorkEndsWithItsReader(t *testing.T) {
	m, cat := slowTrace(t)
	cat.Process.Kill()
	cat.Wait()
	time.Sleep(time.Second)
	before := cpuTime(t, m.cmd.Process.Pid)
	time.Sleep(time.Second)
	if used := cpuTime(t, m.cmd.Process.Pid) - before; used > 200*time.Millisecond {
		t.Fatalf("dsfs used %v of CPU in the second after its reader had been dead for one\n%s", used, m.log)
	}
	if m.cacheStats(t).Canceled == 0 {
		t.Error("stats.json counts no canceled block")
	}
}

// TestSignalEndsWork: SIGTERM while a reader waits on a long forward stops
// the forward, fails the read with EIO (not EINTR, which cat would retry
// for ever) and lets dsfs exit within two seconds.
func TestSignalEndsWork(t *testing.T) {
	m, cat := slowTrace(t)
	m.cmd.Process.Signal(syscall.SIGTERM)
	m.waitExit(t, 2*time.Second, "after SIGTERM with a forward running")
	done := make(chan error, 1)
	go func() { done <- cat.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("cat read the whole layer file of a stopped forward")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("cat still reads 2 s after dsfs exited")
	}
}
