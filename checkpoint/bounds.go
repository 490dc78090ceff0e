package checkpoint

import "fmt"

// Bounds on what a checkpoint's headers may hold in all. Each catalogued
// tensor costs the catalog and every view some hundreds of bytes, so a
// hostile set of headers (the reference reader allows 100 MB, a million
// tensors, per shard) could otherwise take gigabytes before the mount is
// up. DeepSeek-V4.1-Flash has about 96k tensors in 10 MB of headers.
const (
	// MaxTensors bounds the tensors of all shards together.
	MaxTensors = 1 << 19
	// MaxHeaderBytes bounds the header JSON of all shards together.
	MaxHeaderBytes = 128 << 20

	// maxParsing bounds the header bytes being decoded at once: the
	// shards open in parallel, and a decoded header costs a few times its
	// JSON until it is validated.
	maxParsing = MaxHeaderBytes
)

// boundShards leaves out the shards (in name order) past which the catalog
// would hold more than maxTensors tensors or maxBytes bytes of header JSON:
// each is closed, set to nil, and its error says why, so it is reported
// and recorded as a bad shard like any other.
func boundShards(shards []*Shard, errs []error, maxTensors int, maxBytes int64) {
	tensors, bytes := 0, int64(0)
	for i, s := range shards {
		if s == nil {
			continue
		}
		n, b := len(s.header.Tensors), s.DataStart-8
		if tensors+n > maxTensors || bytes+b > maxBytes {
			errs[i] = fmt.Errorf("left out: with its %d tensors (%d header bytes) the checkpoint would hold more than the %d tensors or %d header bytes a mount allows (%d tensors, %d bytes before it)",
				n, b, maxTensors, maxBytes, tensors, bytes)
			s.Close()
			shards[i] = nil
			continue
		}
		tensors, bytes = tensors+n, bytes+b
	}
}
