package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/internal/testdata"
)

// TestDemoCheckTraces runs dsfs demo --check as a newcomer would, in an
// empty directory with nothing beside it: the default preset (v41-tiny)
// runs trace/'s four default prompts, the check prints one trace/ line
// with its figures, gguf/ is named as not run with llama.cpp's reason
// and not counted, nothing says "cannot run", and the demo passes.
func TestDemoCheckTraces(t *testing.T) {
	needMount(t)
	cmd := exec.Command(dsfsBin, "demo", "--check")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+cmd.Dir, "XDG_CACHE_HOME="+filepath.Join(cmd.Dir, "cache"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo --check: %v\n%s", err, out)
	}
	s := string(out)
	if strings.Contains(s, "cannot run") {
		t.Errorf("the demo says something cannot run:\n%s", s)
	}
	trace := regexp.MustCompile(`(?m)^check trace/ +4 prompts \((\d+) tokens\) x 6 MoE layers: (\d+) routes to 2 distinct experts, weights sqrtsoftplus, normalised to 1\.5.*; \d+ activations finite; 15 files \(.*\) read twice, the same bytes$`).FindStringSubmatch(s)
	if trace == nil {
		t.Fatalf("no check trace/ line with its figures:\n%s", s)
	}
	if tokens, routes := trace[1], trace[2]; tokens == "0" || routes == "0" {
		t.Errorf("%s tokens, %s routes", tokens, routes)
	}
	for _, want := range []string{
		"\ncheck trace/             mount == export: 0 files differ\n",
		"\ncheck gguf/              not run: gguf/: no GGUF file: llama.cpp has no deepseek41 architecture yet",
		"\ncheck passed: 7 views checked; not run here: gguf/\n",
		// The demo's sample of trace/ is a routed layer, not ERROR.txt.
		"\ntrace/layers/00.json: layer 0 ran in ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the demo lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "check gguf/              mount == export") {
		t.Error("gguf/ counted as checked")
	}
}

// TestTraceWarningOnlyWhenMounted: a checkpoint whose trace/ cannot run
// the default prompts (no tokenizer.json) gets the one warning saying so
// when it is mounted, and not before a failure to mount, which it has
// nothing to do with (here /dev/fuse is /dev/null, in a mount namespace
// of the test's own).
func TestTraceWarningOnlyWhenMounted(t *testing.T) {
	needMount(t)
	src := filepath.Join(testdata.Dir(t), "trace", "v3-tiny")
	const warning = "trace/ cannot run the default prompts"
	m := startMount(t, src)
	if n := len(m.log.linesWith(warning)); n != 1 {
		t.Errorf("%d warnings that %s, want 1:\n%s", n, warning, m.log)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1) to hide /dev/fuse")
	}
	out, err := exec.Command("unshare", "--mount", "sh", "-c", `mount --bind /dev/null /dev/fuse && exec "$@"`, "sh",
		dsfsBin, "mount", src, t.TempDir()).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "dsfs mount: mounting") {
		t.Skipf("could not make the mount fail in a namespace without /dev/fuse: %v\n%s", err, out)
	}
	if strings.Contains(string(out), warning) {
		t.Errorf("a failed mount logs that %s:\n%s", warning, out)
	}
}
