// Command dsfs mounts a DeepSeek checkpoint and serves lazily transcoded
// views of it (nvfp4/, engram-fp4/, ...) as ordinary files.
//
//	dsfs mount [--cache-mb N] [--views LIST] [--allow-other] SRC MNT
//	dsfs umount MNT
//	dsfs demo [--check] [--preset NAME] [MNT]
//	dsfs synth --preset NAME OUT
//	dsfs export VIEW SRC OUT
//	dsfs verify q2 SRC --against DIR [--sample N]
//	dsfs audit q2 SRC [--json F]
//	dsfs inspect SRC [--json F] [--shard NAME] [--tp N] [--no-hash]
//	dsfs diff A B
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

type command struct {
	name, usage, about string
	run                func(args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"mount", "[--cache-mb N] [--cache-dir DIR] [--cache-dir-gb N] [--revision REV] [--views LIST] [--device auto|cpu|cuda] [--trace-prompts FILE] [--tp N] [--no-hash] [--allow-other] [--debug] [--background] [-o OPTS] SRC MNT", "mount SRC at MNT (foreground unless --background; Ctrl-C, SIGTERM or SIGHUP unmounts)", runMount},
		{"umount", "[--lazy] MNT", "unmount a dsfs mount", runUmount},
		{"demo", "[--check] [--preset NAME] [MNT]", "synthesise a small checkpoint, mount it and show it; --check verifies the views and exits", runDemo},
		{"synth", "--preset NAME OUT", "write a synthetic checkpoint (presets: see --help)", runSynth},
		{"export", "[--cache-mb N] [--cache-dir DIR] [--cache-dir-gb N] [--revision REV] [--device auto|cpu|cuda] [--trace-prompts FILE] VIEW SRC OUT", "write a view as ordinary files, through the same code as the mount", runExport},
		{"verify", "q2 SRC --against DIR [--sample N] [--seed S] [--json F]", "recompute sampled q2/ blocks and check them against an exported q2 directory or a --cache-dir, and the recorded digests", runVerify},
		{"audit", "q2 SRC [--json F] [--sample N] [--cache-dir DIR]", "cosine similarity and relative RMS error of the q2/ blocks against the exact MXFP4 decode, per projection", runAudit},
		{"inspect", "[--json F] [--shard NAME] [--tp N] [--no-hash] [--cache-dir DIR] SRC", "the manifest summary and problems of a checkpoint, hashing and checking every tensor (progress bar on a terminal)", runInspect},
		{"diff", "[--json F] [--tp N] [--no-hash] [--cache-dir DIR] A B", "compare two checkpoints or manifest.json files tensor by tensor: same bytes, different bytes, missing, re-quantised", runDiff},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dsfs COMMAND [flags] ARGS")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  dsfs %s %s\n      %s\n", c.name, c.usage, c.about)
	}
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if args, ok := mountHelperArgs(os.Args); ok {
		os.Args = append([]string{os.Args[0], "mount"}, args...)
	}
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stdout)
		return
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			if err := c.run(os.Args[2:]); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return
				}
				fmt.Fprintf(os.Stderr, "dsfs %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "dsfs: unknown command %q\n", os.Args[1])
	usage(os.Stderr)
	os.Exit(2)
}

// flags returns a flag set for a command whose usage line is printed on error.
func flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("dsfs "+name, flag.ContinueOnError)
	for _, c := range commands {
		if c.name == name {
			fs.Usage = func() {
				fmt.Fprintf(fs.Output(), "usage: dsfs %s %s\n  %s\n", c.name, c.usage, c.about)
				fs.PrintDefaults()
			}
		}
	}
	return fs
}

// parse parses flags that may stand before or after the positional
// arguments and checks their count.
func parse(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < min || len(pos) > max {
		fs.Usage()
		return nil, fmt.Errorf("want %s, got %q", argCount(min, max), strings.Join(pos, " "))
	}
	return pos, nil
}

func argCount(min, max int) string {
	if min == max {
		return fmt.Sprintf("%d arguments", min)
	}
	return fmt.Sprintf("%d to %d arguments", min, max)
}
