//go:build !amd64

package simd

import "testing"

// eachCounter runs f with the portable Go code, the only counting code
// this architecture has.
func eachCounter(t *testing.T, f func(t *testing.T)) { t.Run("generic", f) }
