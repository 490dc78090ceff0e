package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/internal/tinyckpt"
)

var (
	// dsfsBin is this command, built once for the tests that run it.
	dsfsBin string
	// tinySrc is a v41-tiny checkpoint the tests only read.
	tinySrc string
)

func TestMain(m *testing.M) {
	tinyckpt.MainWithDsfs(m, "v41-tiny", ".", &dsfsBin, &tinySrc)
}

// dsfs runs the built command and returns its stdout, stderr and exit
// status.
func dsfs(t *testing.T, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(dsfsBin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		status = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), status
}

// TestUsageErrors checks that every mistake in the command line gets one
// line on stderr naming it and pointing at --help, and exit status 2,
// before dsfs touches anything.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "dsfs: no command given; see dsfs --help"},
		{[]string{"nosuch"}, `dsfs: unknown command "nosuch"; see dsfs --help`},
		{[]string{"--nosuch"}, `dsfs: unknown flag "--nosuch"; see dsfs --help`},
		{[]string{"mount", "--nosuch", "a", "b"}, "dsfs mount: unknown flag --nosuch; see dsfs mount --help"},
		{[]string{"mount", "a"}, `dsfs mount: want 2 arguments, got 1 ("a"); see dsfs mount --help`},
		{[]string{"umount"}, "dsfs umount: want 1 argument, got 0; see dsfs umount --help"},
		{[]string{"export", "source", "a", "b", "c"}, "dsfs export: want 3 arguments, got 4"},
		{[]string{"mount", "--cache-mb", "-5", "a", "b"}, "dsfs mount: --cache-mb -5: want a number of MiB"},
		{[]string{"export", "--cache-mb", "x", "source", "a", "b"}, `invalid value "x" for flag -cache-mb`},
		{[]string{"mount", "--cache-dir-gb", "-1", "a", "b"}, "dsfs mount: --cache-dir-gb -1: want a number of GiB"},
		{[]string{"mount", "--cache-dir-gb", "NaN", "a", "b"}, "dsfs mount: --cache-dir-gb NaN: want a number of GiB"},
		{[]string{"mount", "--tp", "0", "a", "b"}, "dsfs mount: --tp 0: want a tensor-parallel degree"},
		{[]string{"inspect", "--tp", "-2", "a"}, "dsfs inspect: --tp -2: want a tensor-parallel degree"},
		{[]string{"audit", "q2", "a", "--sample", "-3"}, "dsfs audit: --sample -3: want 0 (all) or a positive count"},
		{[]string{"verify", "q2", "a", "--against", dir, "--sample", "-3"}, "dsfs verify: --sample -3: want 0 (all)"},
		{[]string{"mount", "--device", "foo", "a", "b"}, `dsfs mount: --device foo: unknown device "foo" (want auto, cpu or cuda)`},
		{[]string{"export", "--device", "tpu", "trace", "a", "b"}, `--device tpu: unknown device "tpu"`},
		{[]string{"mount", "--views", "nosuch", "a", "b"}, `dsfs mount: --views nosuch: unknown view "nosuch" (have source, `},
		{[]string{"mount", "--views", "source,,q2", "a", "b"}, `unknown view ""`},
		{[]string{"synth", "--preset", "v9", filepath.Join(dir, "x")}, "dsfs synth: --preset v9: unknown preset (have v41-tiny,"},
		{[]string{"verify", "nvfp4", "a", "--against", dir}, `dsfs verify: only q2 can be verified, not "nvfp4"`},
		{[]string{"verify", "q2", "a"}, "dsfs verify: --against DIR is required"},
		{[]string{"audit", "nvfp4", "a"}, `dsfs audit: only q2 can be audited, not "nvfp4"`},
		{[]string{"diff", "a"}, "dsfs diff: want 2 arguments, got 1"},
		{[]string{"status", "--interval", "0", "a"}, "dsfs status: --interval 0s: want a positive duration"},
		{[]string{"warm"}, "dsfs warm: want at least 1 argument, got 0"},
		{[]string{"trace"}, "dsfs trace: want 1 argument, got 0"},
		{[]string{"trace", "--device", "tpu", "a"}, `dsfs trace: --device tpu: unknown device "tpu"`},
		{[]string{"trace", "--tp", "2", "a"}, "dsfs trace: unknown flag --tp"},
		{[]string{"export", "nosuch", tinySrc, filepath.Join(dir, "out")}, `dsfs export: unknown view "nosuch" (have source,`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			stdout, stderr, status := dsfs(t, tt.args...)
			if status != 2 {
				t.Errorf("exit status %d, want 2", status)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); len(lines) != 1 || !strings.Contains(lines[0], tt.want) || !strings.HasSuffix(lines[0], "--help") {
				t.Errorf("stderr %q, want one line containing %q and ending in a pointer to --help", stderr, tt.want)
			}
		})
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a rejected command line wrote %d entries", len(ents))
	}
}

// TestHelp checks that --help prints the whole usage on stdout and exits 0.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"mount", "--help"}, {"export", "-h"}} {
		stdout, stderr, status := dsfs(t, args...)
		if status != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: dsfs ") {
			t.Errorf("dsfs %s: status %d, stderr %q, stdout %.60q", strings.Join(args, " "), status, stderr, stdout)
		}
		if args[0] == "mount" && !strings.Contains(stdout, "-cache-mb") {
			t.Errorf("dsfs mount --help lacks the flags:\n%s", stdout)
		}
		if len(args) == 1 && !strings.Contains(stdout, "Exit status") {
			t.Errorf("dsfs %s does not document the exit statuses", args[0])
		}
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		stdout, stderr, status := dsfs(t, arg)
		if status != 0 || stderr != "" || !strings.HasPrefix(stdout, "dsfs ") || strings.Count(stdout, "\n") != 1 {
			t.Fatalf("dsfs %s: status %d, stderr %q, stdout %q", arg, status, stderr, stdout)
		}
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}
	if got, want := versionOf(bi), "dsfs v1.2.3 go1.26.8 (no VCS revision recorded: built outside a git clone or with -buildvcs=false)"; got != want {
		t.Errorf("without VCS settings: %q, want %q", got, want)
	}
	bi.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T16:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	if got, want := versionOf(bi), "dsfs v1.2.3 revision 0123abcd 2026-12-01T16:00:00Z (modified) go1.26.8"; got != want {
		t.Errorf("with VCS settings: %q, want %q", got, want)
	}
	// A modified build is not a commit's: its identity adds the executable's digest.
	if committed(bi) {
		t.Error("a modified build counts as a commit's")
	}
	bi.Settings[2].Value = "false"
	if !committed(bi) {
		t.Error("an unmodified build of a revision does not count as a commit's")
	}
	if committed(&debug.BuildInfo{}) {
		t.Error("a build with no revision counts as a commit's")
	}
	prog, err := program()
	if err != nil || !strings.HasPrefix(prog, version()) {
		t.Errorf("program() = %q, %v; want the version first", prog, err)
	}
}

// TestVersionOfAClone installs dsfs from a fresh clone of this
// repository with go install, as a user would, checks that it lands in
// $GOBIN (else $(go env GOPATH)/bin) and that version and --version name
// the commit it was built from. (A git worktree gets no VCS stamp: the go
// command looks for a .git directory.)
func TestVersionOfAClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dsfs again")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git repository: %v", err)
	}
	clone := filepath.Join(t.TempDir(), "dsfs")
	if out, err := exec.Command("git", "clone", "-q", strings.TrimSpace(string(top)), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	head, err := exec.Command("git", "-C", clone, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	goCmd := func(env []string, args ...string) string {
		c := exec.Command("go", args...)
		c.Dir = clone
		c.Env = append(append(os.Environ(), "GOFLAGS=-buildvcs=true"), env...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gopath := goCmd(nil, "env", "GOPATH")
	if target := goCmd([]string{"GOBIN="}, "list", "-f", "{{.Target}}", "./cmd/dsfs"); target != filepath.Join(strings.Split(gopath, ":")[0], "bin", "dsfs") {
		t.Errorf("go install ./cmd/dsfs would write %s, not $(go env GOPATH)/bin/dsfs (GOPATH %s)", target, gopath)
	}
	gobin := t.TempDir()
	goCmd([]string{"GOBIN=" + gobin}, "install", "./cmd/dsfs")
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(filepath.Join(gobin, "dsfs"), arg).Output()
		if want := "revision " + strings.TrimSpace(string(head)) + " "; err != nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "modified") {
			t.Errorf("dsfs %s = %q (%v), want it to contain %q and not modified", arg, out, err, want)
		}
	}
}

// TestFindingsExitOne checks inspect's and diff's statuses: 0 when all is
// well, 1 when they find problems or differences, 2 on an error.
func TestFindingsExitOne(t *testing.T) {
	// A copy with one tensor's bytes changed, and one with a shard whose
	// header is cut short.
	changed := copyDir(t, tinySrc)
	shards, _ := filepath.Glob(filepath.Join(changed, "*.safetensors"))
	f, err := os.OpenFile(shards[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if _, err := f.WriteAt([]byte{0x5a}, fi.Size()-1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	broken := copyDir(t, tinySrc)
	if err := os.Truncate(filepath.Join(broken, filepath.Base(shards[0])), 4); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "none")
	for _, tt := range []struct {
		args   []string
		status int
	}{
		{[]string{"inspect", tinySrc}, 0},
		{[]string{"inspect", broken}, 1},
		{[]string{"inspect", missing}, 2},
		{[]string{"diff", "--no-hash", tinySrc, changed}, 0}, // headers only: they agree
		{[]string{"diff", tinySrc, tinySrc}, 0},
		{[]string{"diff", tinySrc, changed}, 1},
		{[]string{"diff", tinySrc, missing}, 2},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			stdout, stderr, status := dsfs(t, tt.args...)
			if status != tt.status {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", status, tt.status, stdout, stderr)
			}
			if tt.status == 2 && strings.Count(stderr, "\n") != 1 {
				t.Errorf("want one line on stderr, got %q", stderr)
			}
		})
	}
}

// copyDir copies the checkpoint in dir (inference/ included) into a new
// temporary directory.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestProgressBarOnlyOnATerminal runs commands that show progress under
// script(1), which gives them a terminal, and with stderr in a pipe: the
// bar (bytes or units, rate, time left) appears only on the terminal.
func TestProgressBarOnlyOnATerminal(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give the command a terminal")
	}
	q2 := t.TempDir()
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"export", "q2", tinySrc, q2}, []string{"exporting", "MiB", "/s"}},
		{[]string{"audit", "q2", tinySrc, "--sample", "1"}, []string{"audit", "weights", "weights/s"}},
		{[]string{"verify", "q2", tinySrc, "--against", q2, "--sample", "4"}, []string{"verify", "blocks"}},
	} {
		t.Run(tt.args[0], func(t *testing.T) {
			_, stderr, status := dsfs(t, tt.args...)
			if status != 0 || strings.Contains(stderr, "\r") || strings.Contains(stderr, tt.want[0]+" ") {
				t.Errorf("without a terminal: status %d, stderr %q", status, stderr)
			}
			if tt.args[0] == "export" { // export again, through a terminal, into a fresh directory
				tt.args[3] = t.TempDir()
			}
			line := dsfsBin + " " + strings.Join(tt.args, " ")
			out, err := exec.Command(script, "-qec", line, "/dev/null").CombinedOutput()
			if err != nil {
				t.Fatalf("script -qec %q: %v\n%s", line, err, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("on a terminal the output lacks %q:\n%q", w, out)
				}
			}
		})
	}
}

// TestUsageListsFlags checks that each command's usage line names every
// flag its --help describes.
func TestUsageListsFlags(t *testing.T) {
	for _, c := range commands {
		out, _, _ := dsfs(t, c.name, "--help")
		for _, line := range strings.Split(out, "\n") {
			// flag.PrintDefaults starts each flag's line with "  -name".
			rest, ok := strings.CutPrefix(line, "  -")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(rest, " ")
			name, _, _ = strings.Cut(name, "\t")
			listed := "--" + name
			if len(name) == 1 { // a short flag, as FUSE users type -o and umount's -z
				listed = "-" + name
			}
			if !strings.Contains(c.usage, listed) {
				t.Errorf("dsfs %s: usage line %q does not list %s", c.name, c.usage, listed)
			}
		}
	}
}

// TestMissingSource: a source that is not there gets one line saying it
// is the source checkpoint directory, from every command that reads one.
func TestMissingSource(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nosuch")
	want := "source checkpoint directory " + missing + ": no such file or directory\n"
	cmds := [][]string{{"inspect", missing}, {"export", "source", missing, filepath.Join(t.TempDir(), "out")}}
	if _, err := os.Stat("/dev/fuse"); err == nil { // mount says what the device lacks first
		cmds = append(cmds, []string{"mount", missing, t.TempDir()})
	}
	for _, args := range cmds {
		_, stderr, status := dsfs(t, args...)
		if status == 0 || stderr != "dsfs "+args[0]+": "+want {
			t.Errorf("dsfs %s: status %d, stderr %q, want %q", strings.Join(args, " "), status, stderr, "dsfs "+args[0]+": "+want)
		}
	}
}
