package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dsfs/dsfs/synth"
	"github.com/dustin/go-humanize"
)

func runSynth(args []string) error {
	fs := flags("synth")
	preset := fs.String("preset", "v41-tiny", "checkpoint to write (the presets are listed below)")
	force := fs.Bool("force", false, "write into OUT even when it is not empty (files of the same names are overwritten)")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if !*force {
		if err := checkEmpty(pos[0]); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := synth.Write(*preset, pos[0]); err != nil {
		return err
	}
	fmt.Printf("wrote %s to %s in %.1f s\n", *preset, pos[0], time.Since(start).Seconds())
	return nil
}

// presetHelp lists the presets for dsfs synth --help: what each is and is
// for, from synth's table, and what it holds, from the spec it writes,
// with what trace/ and gguf/ make of it.
func presetHelp(w io.Writer) {
	fmt.Fprintln(w, "\npresets:")
	for _, p := range synth.Presets() {
		c, err := p.Contents()
		if err != nil { // TestValidate holds every preset valid
			fmt.Fprintf(w, "  %-16s %v\n", p.Name, err)
			continue
		}
		fmt.Fprintf(w, "  %-16s %s\n", p.Name, p.Description)
		const indent = "                   "
		fmt.Fprintf(w, "%sfor %s\n", indent, p.Purpose)
		fmt.Fprintf(w, "%s%s: %d shards, %d tensors, %s of tensor data; %s\n", indent, c.Family, c.Shards, c.Tensors, humanize.IBytes(uint64(c.Bytes)), presetViewsText(c))
	}
}

// presetViews says what trace/ and gguf/ serve for a checkpoint with
// contents c: trace/ runs its default prompts when it can encode them with
// tokenizer.json, and gguf/ serves GGUF files when there is a vocabulary
// and llama.cpp has the architecture (TestPresetViews holds this against
// the views built from each preset). Without, each holds what says why.
func presetViews(c synth.Contents) (trace, gguf bool) {
	return c.Tokenizer, c.Tokenizer && c.Family != synth.FamilyV41
}

// presetViewsText is presetViews in words.
func presetViewsText(c synth.Contents) string {
	trace, gguf := presetViews(c)
	var b strings.Builder
	if trace {
		b.WriteString("trace/ runs the default prompts")
	} else {
		b.WriteString("trace/ holds only ERROR.txt (no tokenizer.json)")
	}
	switch {
	case gguf:
		b.WriteString("; gguf/ serves GGUF files")
	case !c.Tokenizer:
		b.WriteString("; gguf/ holds ERROR.txt and README.md (no tokenizer.json)")
	default:
		b.WriteString("; gguf/ holds ERROR.txt and README.md (llama.cpp has no deepseek41 architecture yet)")
	}
	return b.String()
}

// checkEmpty refuses an OUT that holds anything: synth overwrites the files
// it writes, and a checkpoint left beside them would be mounted as one.
func checkEmpty(dir string) error {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return fmt.Errorf("%s is not empty (it holds %s): choose an empty or new directory, or pass --force to write over it", dir, names[0])
}
