package main

import (
	"flag"

	"github.com/dsfs/dsfs/views"
)

// traceFlags are the settings of trace/ that mount and export take.
type traceFlags struct {
	prompts, device, precision *string
}

func addTraceFlags(fs *flag.FlagSet) traceFlags {
	return traceFlags{
		prompts:   fs.String("trace-prompts", "", "JSON list of prompts for trace/, each {id, label, text} or {id, label, token_ids} (default: the seed's four prompts)"),
		device:    fs.String("device", "auto", "where trace/ runs decoder layers: auto (CUDA when a GPU and its libraries load, else the CPU), cpu or cuda"),
		precision: fs.String("trace-precision", "a8", "how trace/ runs DeepSeek-V4 layers: a8 (FP8 activations into FP8/FP4 linears, as DeepSeek's reference) or fp32"),
	}
}

// apply sets the trace/ fields of opt.
func (f traceFlags) apply(opt *views.Options) {
	opt.TracePrompts, opt.Device, opt.TracePrecision = *f.prompts, *f.device, *f.precision
}
