package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dsfs/dsfs/synth"
)

func runSynth(args []string) error {
	fs := flags("synth")
	var names []string
	for _, p := range synth.Presets() {
		names = append(names, fmt.Sprintf("%s (%s)", p.Name, p.Description))
	}
	preset := fs.String("preset", "v41-tiny", "checkpoint to write: "+strings.Join(names, "; "))
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
