package main

import (
	"fmt"
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
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := synth.Write(*preset, pos[0]); err != nil {
		return err
	}
	fmt.Printf("wrote %s to %s in %.1f s\n", *preset, pos[0], time.Since(start).Seconds())
	return nil
}
