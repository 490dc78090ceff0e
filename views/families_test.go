package views

// The trace families, registered for trace/ as the dsfs command registers
// them.
import (
	_ "github.com/dsfs/dsfs/trace/deepseek2"
	_ "github.com/dsfs/dsfs/trace/deepseek4"
	_ "github.com/dsfs/dsfs/trace/deepseek41"
)
