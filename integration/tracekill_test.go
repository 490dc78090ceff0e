package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/trace"
)

// procState is the state letter of /proc/PID/stat ("" once the process
// is reaped).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) S ...: comm may hold spaces, the state follows its ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// TestTraceKilledReader starts `cat` on a layer document whose forward
// runs for tens of seconds (v2lite-tiny with 32 heads, two prompts of
// trace.MaxPromptTokens tokens: the attention alone), kills it
// with SIGKILL in the middle of the layer, and requires it gone within
// 2 s: the kernel's interrupt reaches the forward, which stops, rather than
// leaving the reader in D state until the layer ends. The mount serves on.
func TestTraceKilledReader(t *testing.T) {
	needMount(t)
	src := t.TempDir()
	spec := synth.V2LiteTinySpec()
	spec.Heads = 32
	spec.MaxShardBytes = 64 << 20
	if err := synth.WriteMLA(spec, src); err != nil {
		t.Fatal(err)
	}
	type prompt struct {
		ID       string `json:"id"`
		TokenIDs []int  `json:"token_ids"`
	}
	var prompts []prompt
	for i, id := range []string{"a", "b"} {
		ids := make([]int, trace.MaxPromptTokens)
		for j := range ids {
			ids[j] = (j*7 + i) % 512
		}
		prompts = append(prompts, prompt{id, ids})
	}
	m := startMount(t, src, "--views", "trace", "--device", "cpu", "--trace-prompts", writePrompts(t, prompts))

	cat := exec.Command("cat", m.path("trace", "layers", "00.json"))
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cat.Wait(); close(exited) }()
	time.Sleep(time.Second) // the forward is under way: its attention takes seconds per prompt
	select {
	case <-exited:
		t.Fatal("cat finished before it was killed: the layer is too quick to test")
	default:
	}
	pid := cat.Process.Pid
	start := time.Now()
	cat.Process.Kill()
	states := map[string]int{}
	deadline := time.After(2 * time.Second)
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-deadline:
			t.Fatalf("cat still there 2 s after SIGKILL (states seen %v, now %q)\n%s", states, procState(pid), m.log)
		case <-time.After(5 * time.Millisecond):
			states[procState(pid)]++
		}
	}
	t.Logf("cat gone %v after SIGKILL (states seen while waiting: %v)", time.Since(start), states)
	if n := layerForwards(t, m); n != 0 {
		t.Errorf("%d forwards finished: the killed reader's forward ran on", n)
	}
	if _, err := os.ReadFile(m.path("trace", "prompts.json")); err != nil {
		t.Fatalf("mount unusable after the killed read: %v", err)
	}
}
