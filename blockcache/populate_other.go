//go:build !linux

package blockcache

// populate does nothing: only Linux is asked to back a block's pages ahead
// of its computation.
func populate(b []byte) {}
