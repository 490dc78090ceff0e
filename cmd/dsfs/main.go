// Command dsfs mounts a DeepSeek checkpoint and serves lazily transcoded
// views of it (nvfp4/, engram-fp4/, ...) as ordinary files.
//
//	dsfs mount [--cache-mb N] [--views LIST] [--allow-other] SRC MNT
//	dsfs umount MNT
//	dsfs status MNT
//	dsfs warm MNT/VIEW[/FILE]
//	dsfs demo [--check] [--preset NAME] [MNT]
//	dsfs synth --preset NAME OUT
//	dsfs export VIEW SRC OUT
//	dsfs trace [--json F] [--png DIR] SRC
//	dsfs verify q2 SRC --against DIR [--sample N]
//	dsfs audit q2 SRC [--json F]
//	dsfs inspect SRC [--json F] [--png DIR] [--shard NAME] [--tp N] [--no-hash]
//	dsfs diff A B
//	dsfs version
//
// Install it with `go install ./cmd/dsfs` from a clone (the binary lands
// in $(go env GOPATH)/bin, or $GOBIN when set).
//
// Exit status: 0 on success, 2 for a usage error (one line on stderr), 1
// for any other failure; inspect and diff exit 1 when they find problems or
// differences and 2 on any error, as diff(1) and cmp(1) do.
package main

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/views"
)

type command struct {
	name, usage, about string
	run                func(args []string) error
	// errStatus is the exit status of a failure other than a usage error:
	// 2 for the commands whose status 1 means "found something".
	errStatus int
}

var commands []command

func init() {
	commands = []command{
		{"mount", "[--cache-mb N] [--cache-dir DIR|s3://B/P] [--cache-dir-local DIR] [--cache-dir-gb N] [--cache-files] [--revision REV] [--views LIST] [--nvfp4-mtp] [--nvfp4-calibrate FILE] [--device auto|cpu|cuda] [--trace-prompts FILE] [--trace-precision a8|fp32] [--trace-memory-mb N] [--tp N] [--no-hash] [--gguf-split-mb N] [--allow-other] [--nonempty] [--passthrough=false] [--splice=false] [--debug] [--background] [--log-file FILE] [--pid-file FILE] [-o OPTS] SRC MNT", "mount SRC (a checkpoint directory or s3://BUCKET/PREFIX) at MNT (foreground unless --background; Ctrl-C, SIGTERM or SIGHUP unmounts)", runMount, 1},
		{"umount", "[--lazy|-z] MNT", "unmount a dsfs mount", runUmount, 1},
		{"status", "[--watch] [--interval D] MNT[/VIEW]", "per view of a mount (or one view), its blocks computed, cached and to go, with a progress bar, the rate and the time left (from MNT/.dsfs/stats.json)", runStatus, 1},
		{"warm", "[--jobs N] MNT/VIEW[/FILE]...", "read views, directories or files of a mount to their ends, so what they compute is ready before a loader maps them; progress bar on a terminal, Ctrl-C stops (exit status 130)", runWarm, 1},
		{"demo", "[--check] [--preset NAME] [MNT]", "synthesise a small checkpoint, mount it and show it; --check verifies the views and exits", runDemo, 1},
		{"synth", "[--force] --preset NAME OUT", "write a synthetic checkpoint; dsfs synth --help lists the presets, what each holds and is for", runSynth, 1},
		{"export", "[--cache-mb N] [--cache-dir DIR|s3://B/P] [--cache-dir-local DIR] [--cache-dir-gb N] [--revision REV] [--nvfp4-mtp] [--nvfp4-calibrate FILE] [--device auto|cpu|cuda] [--trace-prompts FILE] [--trace-precision a8|fp32] [--trace-memory-mb N] [--tp N] [--no-hash] [--gguf-split-mb N] VIEW SRC OUT", "write a view as ordinary files, through the same code as the mount; a rerun completes an interrupted export", runExport, 1},
		{"trace", "[--device auto|cpu|cuda] [--trace-prompts FILE] [--trace-precision a8|fp32] [--trace-memory-mb N] [--json F] [--png DIR] SRC", "run trace/'s decoder-layer forwards on SRC without mounting it: a line per layer; trace.json with --json, the figures (route maps, expert loads) with --png", runTrace, 1},
		{"verify", "q2 SRC --against DIR [--sample N] [--seed S] [--json F]", "recompute sampled q2/ blocks and check them against an exported q2 directory or a --cache-dir, and the recorded digests", runVerify, 1},
		{"audit", "q2 SRC [--json F] [--sample N] [--cache-dir DIR|s3://B/P] [--cache-dir-local DIR] [--cache-dir-gb N] [--revision REV]", "cosine similarity and relative RMS error of the q2/ blocks against the exact MXFP4 decode, per projection", runAudit, 1},
		{"inspect", "[--json F] [--png DIR] [--shard NAME] [--tp N] [--no-hash] [--cache-dir DIR] SRC", "the manifest summary and problems of a checkpoint, hashing and checking every tensor (progress bar on a terminal); --png writes manifest/'s figure; exits 1 when it finds problems", runInspect, 2},
		{"diff", "[--json F] [--tp N] [--no-hash] [--cache-dir DIR] A B", "compare two checkpoints or manifest.json files tensor by tensor: same bytes, different bytes, missing, re-quantised; exits 1 when they differ", runDiff, 2},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dsfs COMMAND [flags] ARGS")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  dsfs %s %s\n      %s\n", c.name, c.usage, c.about)
	}
	fmt.Fprintln(w, "  dsfs version (or --version)\n      the module version and VCS revision of this binary")
	fmt.Fprintln(w, "\nExit status: 0 on success, 1 on failure (inspect: problems found; diff: the checkpoints differ), 2 on a usage error (inspect, diff: on any error).")
	fmt.Fprintln(w, "dsfs COMMAND --help shows a command's flags.")
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	args := os.Args[1:]
	if helper, ok := mountHelperArgs(os.Args); ok {
		args = append([]string{"mount"}, helper...)
	}
	os.Exit(run(args))
}

// run runs the command line args and returns the exit status.
func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "dsfs: no command given; see dsfs --help")
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(os.Stdout)
		return 0
	case "-version", "--version", "version":
		fmt.Println(version())
		return 0
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		what := "command"
		if strings.HasPrefix(args[0], "-") {
			what = "flag"
		}
		fmt.Fprintf(os.Stderr, "dsfs: unknown %s %q; see dsfs --help\n", what, args[0])
		return 2
	}
	c := commands[i]
	err := c.run(args[1:])
	var status exitStatus
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "dsfs %s: %v; see dsfs %s --help\n", c.name, err, c.name)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "dsfs %s: %v\n", c.name, err)
		return c.errStatus
	}
}

// usageError is a mistake in the command line: dsfs says what it is in one
// line and exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitStatus ends a command whose output has already said what it found
// (inspect's problems, diff's differences) with that status.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// version is the module version and VCS revision the binary was built
// from, as the go command recorded them.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dsfs: no build information in this binary"
	}
	return versionOf(bi)
}

// program names the running dsfs for views.Identity: its version, and for
// a build that is not of a commit (modified, or with no revision recorded)
// the SHA-256 of its executable too, since two such builds share a version
// but may compute different bytes. The executable is read once.
var program = sync.OnceValues(func() (string, error) {
	v := version()
	if bi, ok := debug.ReadBuildInfo(); ok && committed(bi) {
		return v, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("naming this build: %w", err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		return "", fmt.Errorf("naming this build: %w", err)
	}
	return fmt.Sprintf("%s executable sha256 %x", v, sha256.Sum256(b)), nil
})

// committed reports whether bi is of a commit, unmodified.
func committed(bi *debug.BuildInfo) bool {
	set := settings(bi)
	return set["vcs.revision"] != "" && set["vcs.modified"] != "true"
}

// settings are bi's build settings by key.
func settings(bi *debug.BuildInfo) map[string]string {
	set := make(map[string]string)
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	return set
}

func versionOf(bi *debug.BuildInfo) string {
	set := settings(bi)
	v := "dsfs " + bi.Main.Version
	rev := set["vcs.revision"]
	if rev == "" {
		return v + " " + bi.GoVersion + " (no VCS revision recorded: built outside a git clone or with -buildvcs=false)"
	}
	v += " revision " + rev
	if t := set["vcs.time"]; t != "" {
		v += " " + t
	}
	if set["vcs.modified"] == "true" {
		v += " (modified)"
	}
	return v + " " + bi.GoVersion
}

// flags returns a flag set for a command. It prints nothing itself: --help
// prints the command's usage on stdout and a bad flag comes back from parse
// as a usageError.
func flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("dsfs "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// printUsage prints a command's usage line and flags on w.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	name := strings.TrimPrefix(fs.Name(), "dsfs ")
	for _, c := range commands {
		if c.name == name {
			fmt.Fprintf(w, "usage: dsfs %s %s\n  %s\n", c.name, c.usage, c.about)
		}
	}
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if more := moreHelp[name]; more != nil {
		more(w)
	}
}

// moreHelp writes, after a command's flags, what its --help says beyond
// them.
var moreHelp = map[string]func(io.Writer){
	"synth": presetHelp,
}

// parse parses flags that may stand before or after the positional
// arguments, checks their count and the values of the flags flagChecks
// knows.
func parse(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(os.Stdout, fs)
				return nil, err
			}
			if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
				return nil, usagef("unknown flag --%s", name)
			}
			return nil, usageError{err}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < min || len(pos) > max {
		return nil, usagef("want %s, got %d%s", argCount(min, max), len(pos), quoted(pos))
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		check := flagChecks[f.Name]
		if o, ok := views.OptionNamed(f.Name); ok && check == nil {
			check = o.Check
		}
		if check != nil && err == nil {
			if cerr := check(f.Value.String()); cerr != nil {
				err = usagef("--%s %s: %v", f.Name, f.Value, cerr)
			}
		}
	})
	return pos, err
}

func quoted(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%q)", strings.Join(args, " "))
}

func argCount(min, max int) string {
	switch {
	case max == math.MaxInt && min == 1:
		return "at least 1 argument"
	case max == math.MaxInt:
		return fmt.Sprintf("at least %d arguments", min)
	case min == max && min == 1:
		return "1 argument"
	case min == max:
		return fmt.Sprintf("%d arguments", min)
	}
	return fmt.Sprintf("%d to %d arguments", min, max)
}

// flagChecks validates the values of the flags several commands share, by
// flag name, so that each command rejects a bad value before it does
// anything. A view's option brings its own check (views.Option.Check);
// --tp, manifest/'s, is checked here since inspect and diff take it too.
var flagChecks = map[string]func(string) error{
	"cache-mb":     intIn(1, 1<<30, "want a number of MiB from 1 to 1073741824"),
	"cache-dir-gb": floatIn(0, 1<<32, "want a number of GiB from 0 (no cap) to 4294967296"),
	"tp":           intIn(1, 1<<16, "want a tensor-parallel degree from 1 (no cuts) to 65536"),
	"sample":       intIn(0, math.MaxInt64, "want 0 (all) or a positive count"),
	"jobs":         intIn(1, 1024, "want a number of files from 1 to 1024"),
	"views":        checkViews,
	"preset":       checkPreset,
}

// intIn accepts an integer in [lo, hi].
func intIn(lo, hi int64, want string) func(string) error {
	return func(s string) error {
		if n, err := strconv.ParseInt(s, 10, 64); err != nil || n < lo || n > hi {
			return errors.New(want)
		}
		return nil
	}
}

// floatIn accepts a number in [lo, hi].
func floatIn(lo, hi float64, want string) func(string) error {
	return func(s string) error {
		// NaN fails both comparisons.
		if x, err := strconv.ParseFloat(s, 64); err != nil || !(x >= lo && x <= hi) {
			return errors.New(want)
		}
		return nil
	}
}

// checkViews accepts a comma-separated list of known views.
func checkViews(s string) error {
	for _, v := range strings.Split(s, ",") {
		if !slices.Contains(views.Names(), v) {
			return fmt.Errorf("unknown view %q (have %s)", v, strings.Join(views.Names(), ", "))
		}
	}
	return nil
}

// checkPreset accepts the name of a synth preset.
func checkPreset(s string) error {
	var names []string
	for _, p := range synth.Presets() {
		if p.Name == s {
			return nil
		}
		names = append(names, p.Name)
	}
	return fmt.Errorf("unknown preset (have %s)", strings.Join(names, ", "))
}
