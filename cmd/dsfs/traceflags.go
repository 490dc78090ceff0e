package main

import (
	"flag"

	"github.com/dsfs/dsfs/views"
)

// traceFlags are the settings of trace/ that mount and export take.
type traceFlags struct {
	prompts, device *string
}

func addTraceFlags(fs *flag.FlagSet) traceFlags {
	return traceFlags{
		prompts: fs.String("trace-prompts", "", "JSON list of prompts for trace/, each {id, label, text} or {id, label, token_ids} (default: the seed's four prompts)"),
		device:  fs.String("device", "auto", "where trace/ runs decoder layers: auto (CUDA when a GPU and its libraries load, else the CPU), cpu or cuda"),
	}
}

// apply sets the trace/ fields of opt.
func (f traceFlags) apply(opt *views.Options) {
	opt.TracePrompts, opt.Device = *f.prompts, *f.device
}
