// Package manifest is the catalog of a checkpoint directory: it opens
// config.json, the safetensors index and every shard header, validates them,
// and classifies each tensor by role and official format. It reads headers
// only; tensor values are read on demand through Shard.ReadAt.
package manifest

import (
	"time"

	"github.com/dsfs/dsfs/safetensors"
)

// Role says what a tensor is for in the model.
type Role string

// The roles a tensor can have.
const (
	RoleRoutedExpert Role = "routed_expert"
	RoleMTPExpert    Role = "mtp_expert"
	RoleSharedExpert Role = "shared_expert"
	RoleAttention    Role = "attention"
	RoleRouter       Role = "router"
	RoleEngram       Role = "engram"
	RoleNorm         Role = "norm"
	RoleEmbed        Role = "embed"
	RoleHead         Role = "head"
	RoleVision       Role = "vision"
	RoleMHC          Role = "mhc"
	RoleOther        Role = "other"
)

// Format is the official storage format of a tensor, scale tensors included.
type Format string

// The formats the catalog recognises.
const (
	FormatMXFP4     Format = "mxfp4"      // I8 packed E2M1 with a 1x32 E8M0 scale
	FormatMXFP4Scale Format = "mxfp4_scale" // the E8M0 scale of an MXFP4 weight
	FormatFP8       Format = "fp8"        // F8_E4M3 with a block scale (see Tensor.Block)
	FormatFP8Scale  Format = "fp8_scale"  // an E8M0 or F32 block scale of an FP8 weight
	FormatE8M0      Format = "e8m0"       // an E8M0 tensor that pairs with no weight
	FormatBF16      Format = "bf16"
	FormatF16       Format = "f16"
	FormatF32       Format = "f32"
	FormatOther     Format = "other"
)

// Tensor is one tensor of the checkpoint, with its place in its shard and
// what the catalog learnt about it.
type Tensor struct {
	Name   string
	Shard  *Shard
	DType  safetensors.DType
	Shape  []int64
	Offset int64 // absolute offset of the data in the shard file
	Size   int64 // bytes

	Role   Role
	Format Format
	// Block is the FP8 scale block [rows, cols] inferred from the scale
	// shape (e.g. 128x128 for V3, 32x32 for V4.1; 1x32 for Engram tables).
	Block [2]int64
	// Scale is the scale tensor of a quantised weight; ScaleOf is the
	// weight of a scale tensor.
	Scale, ScaleOf *Tensor

	// Position in the model: -1 where not applicable.
	Layer, Expert, MTP int
	// Proj is the expert projection: "w1", "w2" or "w3" (empty otherwise).
	Proj string
}

// Shard is one opened, valid safetensors file of the checkpoint.
type Shard struct {
	Name    string // relative to the checkpoint dir, as the index names it
	Path    string // resolved path
	Size    int64
	ModTime time.Time
	Header  *safetensors.Header
	Tensors []*Tensor // data order
}

// File is a non-safetensors file of the checkpoint directory (config,
// tokenizer, README, ...), served unchanged by the views.
type File struct {
	Name string // relative path
	Path string
	Size int64
}

// Problem is one thing wrong with the source, reported once at open.
type Problem struct {
	File   string `json:"file"`
	Tensor string `json:"tensor,omitempty"`
	Reason string `json:"reason"`
}

func (p Problem) String() string {
	if p.Tensor != "" {
		return p.File + ": tensor " + p.Tensor + ": " + p.Reason
	}
	return p.File + ": " + p.Reason
}
